"""The live bytes a plan declares: what its buffers hold at every step, as the plan says.

A storage occupies its bytes from the first step of any of its buffers to the last step of any of
them, inclusive (steps past the end of the plan do not exist); a buffer sharing another's storage
(a view, an in-place write) adds no bytes. The
validator checks these curves against the budgets and the report draws them: both read them
here, from the plan alone, never from the solvers' memory model (planner.memory), so a bug there
cannot hide itself.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable

import numpy as np

from schemas.plan import BufferSpec


def live_curves(buffers: Iterable[BufferSpec], n_steps: int,
                key: Callable[[BufferSpec], Hashable] = lambda b: b.device
                ) -> dict[Hashable, np.ndarray]:
    """Bytes live at each of `n_steps` steps, one curve per `key` (default: per device)."""
    return range_curves(storage_ranges(buffers), n_steps, key)


def range_curves(storages: Iterable[tuple[BufferSpec, int, int]], n_steps: int,
                 key: Callable[[BufferSpec], Hashable] = lambda b: b.device
                 ) -> dict[Hashable, np.ndarray]:
    """`live_curves` of the storages `storage_ranges` returned: one difference array per key,
    summed in numpy (linear in storages plus keys times steps)."""
    grouped: dict[Hashable, list[tuple[int, int, int]]] = {}
    for owner, first, last in storages:
        if first < n_steps:
            grouped.setdefault(key(owner), []).append(
                (first, min(last, n_steps - 1) + 1, owner.size))
    curves = {}
    for k, ranges in grouped.items():
        starts, ends, sizes = np.asarray(ranges, dtype=np.int64).T
        delta = np.zeros(n_steps + 1, dtype=np.int64)
        np.add.at(delta, starts, sizes)
        np.subtract.at(delta, ends, sizes)
        curves[k] = np.cumsum(delta)[:n_steps]
    return curves


def storage_ranges(buffers: Iterable[BufferSpec]) -> list[tuple[BufferSpec, int, int]]:
    """Each storage's owner and the inclusive steps its bytes are taken (see the module doc).
    A buffer naming a storage that no buffer owns is left out (the validator reports it)."""
    buffers = list(buffers)
    owners = {b.id: b for b in buffers if b.owns_storage}
    ranges: dict[str, tuple[int, int]] = {}
    for b in buffers:
        if b.storage in owners:
            first, last = ranges.get(b.storage, (b.first_step, b.last_step))
            ranges[b.storage] = (min(first, b.first_step), max(last, b.last_step))
    return [(owners[s], first, last) for s, (first, last) in ranges.items()]
