"""`arenaplan profile MODEL.onnx -o prof.json`: time every op on each device with ONNX Runtime."""

from __future__ import annotations

import argparse
import sys
import zipfile
from pathlib import Path

import numpy as np

from arenaplan.cli.common import EXIT_OK
from arenaplan.cli.options import add_dims_option, add_graph_optimization_option, parse_bytes
from planner.errors import InvalidInputError
from planner.ir.graph import load_graph
from planner.profile import ConsoleProgress, profile_graph, save_profile
from planner.profile.runner import DEFAULT_CACHE


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "profile", help="measure each op's time on each device (ONNX Runtime) and copy costs",
        description="Run every op of MODEL.onnx in its own ONNX Runtime session on real inputs, "
        "on each --device, and write per-op costs, copy costs and the machine description as "
        "a JSON profile. Measurements are cached per machine in a SQLite file.",
    )
    parser.add_argument("model", help="path to the ONNX training graph")
    parser.add_argument("-o", "--output", required=True, metavar="PROF.json",
                        help="where to write the profile")
    parser.add_argument("--device", dest="devices", action="append", default=[],
                        metavar="DEVICE", help="cpu or cuda:N (repeatable; default: cpu)")
    add_dims_option(parser)
    add_graph_optimization_option(parser)  # a plan's profile must be of the graph it plans
    parser.add_argument("--inputs", metavar="VALUES.npz",
                        help="values for graph inputs by name (others are generated)")
    parser.add_argument("--threads", type=int, default=1, metavar="N",
                        help="intra-op threads of every profiling session (default 1)")
    parser.add_argument("--memory-allowance", type=parse_allowance, metavar="SIZE",
                        help="host memory the captured input values of the ops being measured "
                        "may hold at once, e.g. 1GiB (binary units KiB/MiB/GiB or KB/MB/GB; "
                        "default: half of the available memory after the graph inputs); an op "
                        "reading more gets a labelled estimate")
    cache = parser.add_mutually_exclusive_group()
    cache.add_argument("--cache", metavar="PATH",
                       help="SQLite cache file (default: $ARENAPLAN_CACHE_DIR or "
                       "~/.cache/arenaplan/profile-cache.sqlite)")
    cache.add_argument("--no-cache", action="store_true", help="measure everything, store nothing")
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.set_defaults(handler=run)


def parse_allowance(text: str) -> int:
    """A positive size for --memory-allowance (0 would leave every captured op unmeasured)."""
    size = parse_bytes(text)
    if size <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive size such as 1GiB, got {text!r}")
    return size


def read_inputs(path: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except FileNotFoundError:
        raise InvalidInputError(f"input values file not found: {path}") from None
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InvalidInputError(
            f"cannot read input values from {path} ({exc}); write them with numpy.savez"
        ) from None


def run(args: argparse.Namespace) -> int:
    graph = load_graph(args.model, dims=dict(args.dims), optimization=args.graph_optimization,
                       devices=args.devices or ["cpu"])
    inputs = read_inputs(args.inputs) if args.inputs else None
    cache = None if args.no_cache else (args.cache or DEFAULT_CACHE)
    progress = None if args.quiet else ConsoleProgress(sys.stderr)
    profile = profile_graph(graph, args.devices or ["cpu"], threads=args.threads, inputs=inputs,
                            cache=cache, progress=progress,
                            memory_allowance_bytes=args.memory_allowance)
    save_profile(profile, Path(args.output))
    return EXIT_OK
