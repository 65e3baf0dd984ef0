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
    grouped: dict[Hashable, tuple[list[int], list[int], list[int]]] = {}
    for owner, first, last in storages:
        if first < n_steps:
            k = key(owner)
            ranges = grouped.get(k)
            if ranges is None:
                ranges = grouped[k] = ([], [], [])
            ranges[0].append(first)
            ranges[1].append(last)
            ranges[2].append(owner.size)
    curves = {}
    for k, (starts, lasts, sizes) in grouped.items():
        ends = np.minimum(np.asarray(lasts, dtype=np.int64), n_steps - 1) + 1
        delta = np.zeros(n_steps + 1, dtype=np.int64)
        np.add.at(delta, np.asarray(starts, dtype=np.int64), sizes)
        np.subtract.at(delta, ends, sizes)
        curves[k] = np.cumsum(delta)[:n_steps]
    return curves


def storage_ranges(buffers: Iterable[BufferSpec]) -> list[tuple[BufferSpec, int, int]]:
    """Each storage's owner and the inclusive steps its bytes are taken (see the module doc).
    A buffer naming a storage that no buffer owns is left out (the validator reports it)."""
    owners: dict[str, BufferSpec] = {}
    ranges: dict[str, list[int]] = {}  # storage -> [first, last], in order of first mention
    for b in buffers:
        if b.owns_storage:
            owners[b.id] = b
        first, last = b.first_step, b.last_step
        span = ranges.get(b.storage)
        if span is None:
            ranges[b.storage] = [first, last]
            continue
        if first < span[0]:
            span[0] = first
        if last > span[1]:
            span[1] = last
    return [(owners[s], first, last) for s, (first, last) in ranges.items() if s in owners]
