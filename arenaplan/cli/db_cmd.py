"""`arenaplan db upgrade`: bring the service's store to the newest schema, without serving.

`arenaplan serve` does the same at start; this command does it alone, e.g. before starting
several instances of a new version on one PostgreSQL store. The store is the one `serve` would
use (`--db`, else ARENAPLAN_DB, else DATA_DIR/arenaplan.db).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from arenaplan.cli.common import EXIT_OK

if TYPE_CHECKING:  # the service's imports (SQLAlchemy, Alembic) only when the command runs
    from service.migrations import SchemaUpgrade
    from service.store import Store


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "db", help="manage the planning service's store (db upgrade: migrate its schema)",
        description="Manage the planning service's store.",
    )
    actions = parser.add_subparsers(dest="db_command", metavar="ACTION", required=True)
    upgrade = actions.add_parser(
        "upgrade", help="upgrade the store's schema to this version's (serve does it at start)",
        description="Upgrade the store's schema to the newest revision this arenaplan knows: "
        "creates it in an empty database, adopts a store made before migrations existed. "
        "Safe to run while instances serve and to run twice.",
    )
    upgrade.add_argument("--db", metavar="PATH_OR_URL",
                         help="SQLite file or SQLAlchemy URL (default ARENAPLAN_DB, else "
                         "DATA_DIR/arenaplan.db)")
    upgrade.add_argument("--data-dir", help="where the default SQLite file lives "
                         "(default ~/.local/share/arenaplan)")
    upgrade.set_defaults(handler=run_upgrade)


def open_store(database_url: str) -> Store:
    """Open (and so upgrade) the store; a wrong URL or driver is one clear line, not a
    traceback."""
    from schemas.errors import ArenaplanError
    from service.app import redact_url
    from service.store import Store

    try:
        return Store(database_url)
    except ModuleNotFoundError as exc:
        raise ArenaplanError(f"the database driver for {redact_url(database_url)} is not "
                             f"installed ({exc.name}); pip install it") from None
    except Exception as exc:  # noqa: BLE001 - SQLAlchemy/driver/migration errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ArenaplanError(f"cannot open the store {redact_url(database_url)}: {first}; "
                             "check --db / ARENAPLAN_DB") from None


def run_upgrade(args: argparse.Namespace) -> int:
    from service.app import redact_url
    from service.settings import load_settings

    settings = load_settings(db=args.db, data_dir=args.data_dir)
    store = open_store(settings.db)
    store.close()
    print(f"arenaplan db: {describe_upgrade(redact_url(settings.db), store.schema)}")
    return EXIT_OK


def describe_upgrade(where: str, done: SchemaUpgrade) -> str:
    """One line saying what opening the store `where` did to its schema."""
    if not done.changed:
        return f"the store {where} is at the newest schema ({done.after})"
    if done.before is None:
        return f"created the store's schema in {where} (revision {done.after})"
    start = ("made before migrations (stamped as the baseline)" if done.before == "legacy"
             else f"at revision {done.before}")
    return f"upgraded the store {where}, {start}, to revision {done.after}"
