"""`arenaplan serve`: run the planning service (FastAPI on uvicorn) on 127.0.0.1 by default."""

from __future__ import annotations

import argparse
import sys

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.db_cmd import describe_upgrade, open_store
from arenaplan.cli.options import parse_bytes


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "serve", help="run the planning service (POST /plan, GET /plans/ID, docs at /docs)",
        description="Run the planning service. Settings come from ARENAPLAN_* environment "
        "variables (see service/settings.py); these options override them. Binding an address "
        "other than loopback needs API keys, or --allow-public-without-keys.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    parser.add_argument("--db", metavar="PATH_OR_URL",
                        help="SQLite file or SQLAlchemy URL (default DATA_DIR/arenaplan.db)")
    parser.add_argument("--data-dir", help="where the default SQLite file and models live "
                        "(default ~/.local/share/arenaplan)")
    parser.add_argument("--workers", type=int, help="solver processes (default: half the cores)")
    parser.add_argument("--api-keys-file", metavar="F",
                        help="file of API keys, one per line (KEY or NAMESPACE:KEY)")
    parser.add_argument("--allow-public-without-keys", action="store_true",
                        help="serve a non-loopback address without API keys (trusted networks)")
    parser.add_argument("--max-upload", type=parse_bytes, metavar="SIZE",
                        help="largest model accepted, e.g. 512MiB (the default)")
    parser.add_argument("--log-level", default="info",
                        choices=["critical", "error", "warning", "info", "debug"])
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import logging

    import uvicorn

    from service.app import create_app, redact_url
    from service.settings import check_bind_allowed, load_settings

    settings = load_settings(
        db=args.db, data_dir=args.data_dir, workers=args.workers,
        api_keys_file=args.api_keys_file, max_upload_bytes=args.max_upload,
    )
    check_bind_allowed(args.host, settings, args.allow_public_without_keys)
    store = open_store(settings.db)  # upgrades the schema; a wrong --db is one clear line
    store.close()
    if store.schema.changed:
        print(f"arenaplan: {describe_upgrade(redact_url(settings.db), store.schema)}",
              file=sys.stderr, flush=True)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host = f"[{args.host}]" if ":" in args.host else args.host
    print(f"arenaplan: serving http://{host}:{args.port} (API docs at /docs), "
          f"{settings.workers} solver process(es), "
          f"{'API keys required' if settings.auth_enabled else 'no API keys'}",
          file=sys.stderr, flush=True)
    config = uvicorn.Config(
        create_app(settings), host=args.host, port=args.port, log_level=args.log_level,
        timeout_graceful_shutdown=5, access_log=args.log_level == "debug",
    )
    try:
        uvicorn.Server(config).run()
    except KeyboardInterrupt:  # uvicorn re-raises Ctrl-C after its graceful shutdown
        pass
    return EXIT_OK
