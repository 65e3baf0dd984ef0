"""Parsers for option values several commands share (dims, byte sizes, graph optimization)."""

from __future__ import annotations

import argparse
import re

_UNITS = {
    "": 1, "b": 1, "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3,
    "gb": 1000**3, "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}


def parse_dim(text: str) -> tuple[str, int]:
    """`batch=32` -> ("batch", 32), for --dim."""
    name, sep, value = text.partition("=")
    if not sep or not name or not value.strip().isdigit() or int(value) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected NAME=POSITIVE_INT (e.g. batch=32), got {text!r}"
        )
    return name.strip(), int(value)


def parse_bytes(text: str) -> int:
    """`512MiB`, `2GB`, `1048576` -> bytes; binary (KiB) and decimal (KB) units."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in _UNITS:
        raise argparse.ArgumentTypeError(
            f"expected a size such as 512MiB, 2GiB, 1.5GB or 1048576, got {text!r}"
        )
    return int(float(match.group(1)) * _UNITS[match.group(2).lower()])


def add_dims_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dim", dest="dims", action="append", type=parse_dim, default=[], metavar="NAME=N",
        help="bind a symbolic dimension of the model, e.g. --dim batch=32 (repeatable)",
    )


def parse_budget(text: str) -> tuple[str, int]:
    """`cpu=512MiB` / `cuda:0=2GiB` -> (device, bytes), for --budget."""
    device, sep, size = text.partition("=")
    if not sep or not device:
        raise argparse.ArgumentTypeError(
            f"expected DEVICE=SIZE such as cpu=512MiB or cuda:0=2GiB, got {text!r}"
        )
    return device.strip(), parse_bytes(size)


def add_request_options(parser: argparse.ArgumentParser) -> None:
    """Options that make up a PlanRequest: budgets, dims, solver limits, alignment, profile."""
    parser.add_argument(
        "--budget", dest="budgets", action="append", type=parse_budget, default=[],
        metavar="DEVICE=SIZE", required=True,
        help="arena budget of a device, e.g. cpu=512MiB (binary units KiB/MiB/GiB or KB/MB/GB)",
    )
    add_dims_option(parser)
    add_graph_optimization_option(parser)
    add_solver_options(parser)
    parser.add_argument("--alignment", type=int, default=64,
                        help="byte alignment of buffer offsets (default 64)")


def add_solver_options(parser: argparse.ArgumentParser, time_limit: float = 30.0,
                       time_help: str = "solver time limit in seconds") -> None:
    """--profile, --time-limit, --workers, --seed: what every solving command takes."""
    parser.add_argument("--profile", help="per-op costs from `arenaplan profile -o`")
    parser.add_argument("--time-limit", type=float, default=time_limit, metavar="S",
                        help=f"{time_help} (default {time_limit:g})")
    parser.add_argument("--workers", type=int, default=1, help="CP-SAT workers (default 1)")
    parser.add_argument("--seed", type=int, default=0, help="CP-SAT random seed (default 0)")


def add_graph_optimization_option(parser: argparse.ArgumentParser) -> None:
    """--graph-optimization: which graph to plan (schemas.optimized_graph); the CLI's default is
    the service's (`schemas.optimized_graph.SERVICE_DEFAULT`)."""
    from schemas.optimized_graph import SERVICE_DEFAULT

    parser.add_argument(
        "--graph-optimization", choices=("disable", "basic", "extended"),
        default=SERVICE_DEFAULT,
        help="plan the graph ONNX Runtime would run: its basic rewrites (standard ops) or also "
        "its extended fusions (FusedConv, FusedMatMul, ...) for the budgets' devices; disable "
        f"plans the model as sent (default {SERVICE_DEFAULT})",
    )
