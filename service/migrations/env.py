"""Alembic's entry point: migrate the connection `upgrade_schema` hands over, or, from the
`alembic` command line (writing a new revision), the database ARENAPLAN_DB names."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, create_engine

from service.store import Base


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection, target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite alters by copying tables
    )
    with context.begin_transaction():
        context.run_migrations()


def _run() -> None:
    given = context.config.attributes.get("connection")
    if given is not None:
        _migrate(given)
        return
    from service.settings import load_settings

    engine = create_engine(load_settings().db)
    try:
        with engine.connect() as connection:
            _migrate(connection)
    finally:
        engine.dispose()


_run()
