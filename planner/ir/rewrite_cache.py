"""ONNX Runtime's rewrite of a model (schemas.optimized_graph.optimized_model), kept on disk per
machine: a request for a model planned before skips it. On GPT-2-small the rewrite is 1.3-2.0 s
of the load, a third of a 5 s request's time; the budget sweeps and CI jobs that plan one model
many times pay it once.

An entry is keyed by everything its bytes depend on: the model's sha256, the level, the
providers, the bound dims, the ONNX Runtime version and the source of our own rewrites (an edited
rewrite never serves stale bytes, installed or not). Its file name carries the sha256 of its
bytes, checked on every read: a truncated or altered file is a miss. Entries over
MAX_ENTRY_BYTES (a model that embeds its weights) are not kept, and the oldest used go once the
directory holds more than MAX_TOTAL_BYTES. A cache that cannot be written (read-only, full) is
only slower. The runtime never reads it: it rewrites the model itself and compares digests
(schemas.optimized_graph.rebuild), so a plan made from a cached graph is checked against a fresh
one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Literal

import schemas.graph_rewrite
import schemas.late_addend
import schemas.late_recompute
import schemas.loss_fusion
import schemas.optimized_graph
import schemas.pool_offsets
import schemas.update_fusion
from planner.cache_dir import cache_dir, prune_oldest, write_whole
from schemas.optimized_graph import onnxruntime_version, optimized_model, with_late_copies

DIRECTORY_NAME = "optimized-graphs"
MAX_ENTRY_BYTES = 64 * 2**20
MAX_TOTAL_BYTES = 2**30
SUFFIX = ".onnx"
# The modules whose code decides the rewritten bytes besides ONNX Runtime itself.
_REWRITE_MODULES = (schemas.optimized_graph, schemas.graph_rewrite, schemas.update_fusion,
                    schemas.late_addend, schemas.late_recompute, schemas.loss_fusion,
                    schemas.pool_offsets)


def cached_optimized_model(data: bytes, level: Literal["basic", "extended"],
                           providers: Sequence[str], dims: Mapping[str, int] | None = None,
                           directory: Path | None = None, late_recompute: bool = True) -> bytes:
    """optimized_model(data, level, providers, dims, late_recompute), from the cache in
    `directory` (arenaplan's cache dir by default) when it holds it, else made and kept there,
    with and without the late copies (one ONNX Runtime rewrite makes both: the planner asks for
    the graph without them when its keep-everything plan may fit the budget)."""
    folder = (directory or cache_dir()) / DIRECTORY_NAME
    found = _read(folder, entry_key(data, level, providers, dims or {}, late_recompute))
    if found is not None:
        return found
    held = optimized_model(data, level, providers, dims, late_recompute=False)
    made = {False: held, True: with_late_copies(held)}
    for copies, written in made.items():
        if len(written) <= MAX_ENTRY_BYTES:
            with contextlib.suppress(OSError):
                _write(folder, entry_key(data, level, providers, dims or {}, copies), written)
                prune_oldest(folder, f"*{SUFFIX}", MAX_TOTAL_BYTES)
    return made[late_recompute]


def entry_key(data: bytes, level: str, providers: Sequence[str], dims: Mapping[str, int],
              late_recompute: bool = True) -> str:
    text = json.dumps([hashlib.sha256(data).hexdigest(), level, list(providers),
                       sorted(dims.items()), late_recompute, onnxruntime_version(),
                       _rewrites_digest()])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


@cache
def _rewrites_digest() -> str:
    digest = hashlib.sha256()
    for module in _REWRITE_MODULES:
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def _read(folder: Path, key: str) -> bytes | None:
    for path in folder.glob(f"{key}-*{SUFFIX}"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        if hashlib.sha256(data).hexdigest() == path.name[len(key) + 1:-len(SUFFIX)]:
            with contextlib.suppress(OSError):
                os.utime(path)  # the least recently used go first (_prune)
            return data
    return None


def _write(folder: Path, key: str, data: bytes) -> None:
    write_whole(folder / f"{key}-{hashlib.sha256(data).hexdigest()}{SUFFIX}", data)
