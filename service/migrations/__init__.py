"""The store's schema under Alembic: `upgrade_schema` brings a database to the newest revision.

The revisions live in `versions/` beside this file, so they ship with the service. Every
`Store` upgrades its database when it opens it, which is how `arenaplan serve` upgrades at
start; `arenaplan db upgrade` does the same alone (before a rolling deployment, say).

Three starting points:

- an empty database: every revision runs;
- a database made before the schema was under Alembic (the tables exist, no `alembic_version`):
  its tables are exactly the baseline revision's, so it is stamped at the baseline and
  upgraded from there;
- a database at a known revision: the newer revisions run; one at a revision this arenaplan
  does not know (written by a newer version) is refused, rather than used with a schema the
  code does not match.

Several instances may start at once on one store. The upgrade runs in one transaction that
first takes a lock (PostgreSQL: an advisory lock; SQLite: BEGIN IMMEDIATE, the write lock), so
the first instance upgrades and the others find the schema current. Within one process, a lock
serializes upgrades too: Alembic's `context` and `op` are process-wide. To write a new revision:
`alembic -c service/migrations/alembic.ini revision --autogenerate -m "what changes"` with
ARENAPLAN_DB naming a database at the current head, then review the file it writes.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Connection, Engine, inspect, text

from schemas.errors import ArenaplanError

SCRIPT_DIR = Path(__file__).resolve().parent
BASELINE = "0001"
BASELINE_TABLES = ("models", "plan_jobs", "plan_access")
# Any constant will do: it names the lock two instances upgrading one PostgreSQL store share.
ADVISORY_LOCK_KEY = 0x6172656E61706C61  # "arenapla"
_IN_PROCESS = threading.Lock()


@dataclass(frozen=True)
class SchemaUpgrade:
    """What `upgrade_schema` found and left: revisions (None: no schema, "legacy": tables made
    before Alembic)."""

    before: str | None
    after: str

    @property
    def changed(self) -> bool:
        return self.before != self.after


def alembic_config(connection: Connection | None = None) -> Config:
    """Alembic's configuration without an ini file; `env.py` migrates `connection`."""
    config = Config()
    config.set_main_option("script_location", str(SCRIPT_DIR))
    config.attributes["connection"] = connection
    return config


def head_revision() -> str:
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None, "service/migrations/versions holds no revision"
    return head


def upgrade_schema(engine: Engine) -> SchemaUpgrade:
    """Bring the store's schema to the newest revision (see the module's docstring)."""
    write_engine = engine.execution_options(arenaplan_write=True)  # SQLite: BEGIN IMMEDIATE
    with _IN_PROCESS, write_engine.begin() as connection:
        if connection.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_xact_lock(:key)"),
                               {"key": ADVISORY_LOCK_KEY})
        config = alembic_config(connection)
        script = ScriptDirectory.from_config(config)
        current = MigrationContext.configure(connection).get_current_revision()
        before: str | None = current
        if current is None:
            before = _stamp_legacy_tables(connection, config)
        elif not _known(script, current):
            raise ArenaplanError(
                f"the store's schema is at revision {current}, which this arenaplan does not "
                f"know (its newest is {script.get_current_head()}): a newer arenaplan upgraded "
                "it; run that version, or restore a backup made before the upgrade")
        command.upgrade(config, "head")
        return SchemaUpgrade(before, head_revision())


def _known(script: ScriptDirectory, revision: str) -> bool:
    return any(r.revision == revision for r in script.walk_revisions())


def _stamp_legacy_tables(connection: Connection, config: Config) -> str | None:
    """Tables made before Alembic are the baseline's: stamp them. Returns "legacy" then, None
    for an empty database; refuses a database with only some of them."""
    present = [name for name in BASELINE_TABLES if inspect(connection).has_table(name)]
    if not present:
        return None
    if len(present) < len(BASELINE_TABLES):
        missing = sorted(set(BASELINE_TABLES) - set(present))
        raise ArenaplanError(
            f"the store has the tables {', '.join(present)} but not {', '.join(missing)} and no "
            "schema revision: it is not an arenaplan store, or a damaged one; point --db / "
            "ARENAPLAN_DB at an empty database or a complete store")
    command.stamp(config, BASELINE)
    return "legacy"
