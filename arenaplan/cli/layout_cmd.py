"""`arenaplan layout`: offsets for buffers with known lifetimes, from and to CSV.

    arenaplan layout --csv in.csv -o out.csv [--capacity N] [--alignment A] [--time-limit S]
                     [--workers N] [--seed K] [--json]

Buffers without an alignment value are aligned to 1 byte unless --alignment says otherwise:
the CSV format's convention (MiniMalloc and other allocators read sizes as exact), where the
planner's own plans default to 64.

Exit codes: 0 a layout was written; 2 bad input; 3 the capacity is proven too small (the
message gives the smallest feasible size or a lower bound on it).
"""

from __future__ import annotations

import argparse
import json

from arenaplan.cli.common import EXIT_OK
from planner.errors import InvalidInputError
from planner.layout import (
    CSV_DEFAULT_ALIGNMENT,
    check_layout,
    plan_layout,
    read_buffers_csv,
    write_layout_csv,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "layout",
        help="place buffers with known lifetimes in one arena (CSV in, CSV out)",
        description="Compute an offset for every buffer of a CSV file (columns "
        "id,lower,upper,size[,alignment][,offset][,zone]; half-open lifetimes [lower, upper)) "
        "so that buffers live at a common step never overlap, with the arena as small as "
        "proven possible. Writes the same columns plus offset.",
    )
    parser.add_argument("--csv", required=True, metavar="IN.csv", help="buffers to place")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.csv",
                        help="where to write the buffers with their offsets")
    parser.add_argument("--capacity", type=int, default=None, metavar="BYTES",
                        help="arena capacity to fit in (exit 3 if proven impossible)")
    parser.add_argument("--alignment", type=int, default=CSV_DEFAULT_ALIGNMENT, metavar="BYTES",
                        help="alignment of buffers without an alignment value, a power of two "
                        f"(default {CSV_DEFAULT_ALIGNMENT}: the CSV format's convention; "
                        "arenaplan's plans use 64)")
    parser.add_argument("--time-limit", type=float, default=10.0, metavar="SECONDS",
                        help="time limit of the exact solver (default 10)")
    parser.add_argument("--workers", type=int, default=1, help="CP-SAT workers (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.set_defaults(handler=run_layout)


def run_layout(args: argparse.Namespace) -> int:
    buffers = read_buffers_csv(args.csv, default_alignment=args.alignment)
    layout = plan_layout(
        buffers, alignment=args.alignment, capacity=args.capacity, time_limit=args.time_limit,
        workers=args.workers, seed=args.seed,
    )
    violations = check_layout(buffers, layout, args.alignment)
    if violations:  # a bug, not a user error: never write an invalid layout
        raise RuntimeError("internal error, invalid layout: " + "; ".join(violations[:5]))
    try:
        write_layout_csv(args.output, buffers, layout)
    except OSError as exc:
        raise InvalidInputError(f"cannot write {args.output!r}: {exc}") from None
    summary = {
        "buffers": len(buffers),
        "arena_size": layout.arena_size,
        "lower_bound": layout.lower_bound,
        "live_bytes_bound": layout.live_bytes_bound,
        "gap": layout.gap,
        "status": layout.status,
        "method": layout.method,
        "solve_seconds": round(layout.solve_seconds, 3),
        "timed_out": layout.timed_out,
        "output": str(args.output),
    }
    if args.json:
        print(json.dumps(summary, indent=2))
    else:
        print(
            f"arena {layout.arena_size} bytes, lower bound {layout.lower_bound} bytes, "
            f"gap {layout.gap:.2%}, {layout.status}, method {layout.method}, "
            f"{layout.solve_seconds:.2f} s{' (time limit reached)' if layout.timed_out else ''}"
            f" -> {args.output}"
        )
    return EXIT_OK
