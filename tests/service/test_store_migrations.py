"""The store's schema under Alembic, on SQLite and PostgreSQL: from an empty database, from a
store made before migrations (`data/store_schema_before_alembic.*.sql`, the DDL that code ran),
twice, concurrently, and refusing databases it must not touch, through `Store` and through
`arenaplan db upgrade`."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, make_url, text

from arenaplan.cli import main
from schemas.errors import ArenaplanError
from service.migrations import ADVISORY_LOCK_KEY, head_revision
from service.store import Base, Store

DATA = Path(__file__).parent / "data"
PLAN_ID, SHA = "7" * 32, "cd" * 32


def _execute(url: str, *statements: str) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as connection:
            for statement in statements:
                connection.execute(text(statement))
    finally:
        engine.dispose()


def _old_store(url: str) -> None:
    """A store as arenaplan made it before migrations, holding a finished job."""
    dialect = url.split(":", 1)[0].split("+", 1)[0]
    ddl = (DATA / f"store_schema_before_alembic.{dialect}.sql").read_text()
    _execute(
        url, *[statement for statement in ddl.split(";") if statement.strip()],
        "INSERT INTO plan_jobs (plan_id, model_sha256, planner_version, request_json, state, "
        f"created_at, attempts, retryable, plan_json) VALUES ('{PLAN_ID}', '{SHA}', 'old', "
        "'{}', 'done', 1.0, 1, false, '{\"plan\": 1}')",
        f"INSERT INTO plan_access (namespace, plan_id, created_at) VALUES ('ns', '{PLAN_ID}', 1.0)",
    )


def _schema_matches_the_models(url: str) -> None:
    """The migrated schema is what the code's models describe (no revision forgotten), at head."""
    engine = create_engine(url)
    try:
        with engine.connect() as connection:
            context = MigrationContext.configure(connection)
            assert context.get_current_revision() == head_revision()
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()


def test_an_empty_database_gets_the_whole_schema(database_url):
    store = Store(database_url)
    store.close()
    assert store.schema.before is None and store.schema.after == head_revision()
    _schema_matches_the_models(database_url)
    again = Store(database_url)
    again.close()
    assert not again.schema.changed


def test_a_store_from_before_migrations_is_adopted_with_its_jobs(database_url, capsys):
    _old_store(database_url)
    assert main(["db", "upgrade", "--db", database_url]) == 0
    said = capsys.readouterr().out
    assert "made before migrations" in said and head_revision() in said
    password = make_url(database_url).password
    assert not password or str(password) not in said
    _schema_matches_the_models(database_url)
    store = Store(database_url)
    try:
        assert store.get(PLAN_ID, "ns").state == "done"
        assert store.plan_json(PLAN_ID) == '{"plan": 1}'
        assert store.get(PLAN_ID, "other") is None
    finally:
        store.close()
    assert main(["db", "upgrade", "--db", database_url]) == 0
    assert "newest schema" in capsys.readouterr().out


def test_an_upgrade_waits_for_one_in_progress(database_url):
    """Instances starting together on one store: while one holds the schema lock (PostgreSQL:
    the advisory lock, SQLite: the write lock), another's upgrade waits, then finds it done."""
    engine = create_engine(database_url)
    holder = engine.connect()
    if holder.dialect.name == "postgresql":
        holder.begin()
        holder.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": ADVISORY_LOCK_KEY})
    else:  # as a Store's connection does: WAL, then the write lock
        holder.exec_driver_sql("PRAGMA journal_mode=WAL")
        holder.exec_driver_sql("BEGIN IMMEDIATE")
    opened: list[Store] = []
    waiter = threading.Thread(target=lambda: opened.append(Store(database_url)))
    waiter.start()
    try:
        waiter.join(timeout=1.0)
        assert waiter.is_alive() and not opened, "the upgrade did not wait for the lock"
    finally:
        holder.rollback() if holder.dialect.name == "postgresql" else holder.exec_driver_sql(
            "ROLLBACK")
        holder.close()
        waiter.join(timeout=30)
        engine.dispose()
    (store,) = opened
    store.close()
    assert store.schema.before is None
    _schema_matches_the_models(database_url)


def test_a_schema_from_a_newer_arenaplan_is_refused(database_url, capsys):
    Store(database_url).close()
    _execute(database_url, "UPDATE alembic_version SET version_num = 'f00dfeed'")
    with pytest.raises(ArenaplanError, match="revision f00dfeed, which this arenaplan does not"):
        Store(database_url)
    assert main(["db", "upgrade", "--db", database_url]) == 2
    assert "f00dfeed" in capsys.readouterr().err


def test_a_database_with_only_some_of_the_tables_is_refused(database_url):
    _execute(database_url, "CREATE TABLE models (sha256 VARCHAR(64) PRIMARY KEY)")
    with pytest.raises(ArenaplanError, match="not plan_access, plan_jobs"):
        Store(database_url)
