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
    deltas: dict[Hashable, np.ndarray] = {}
    for owner, first, last in storage_ranges(buffers):
        if first >= n_steps:
            continue
        delta = deltas.setdefault(key(owner), np.zeros(n_steps + 1, dtype=np.int64))
        delta[first] += owner.size
        delta[min(last, n_steps - 1) + 1] -= owner.size
    return {k: np.cumsum(delta)[:n_steps] for k, delta in deltas.items()}


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
