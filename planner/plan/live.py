"""The live bytes a plan declares: what its buffers hold at every step, as the plan says.

A buffer occupies its bytes in every step of its inclusive range [first_step, last_step] (steps
past the end of the plan do not exist); an alias shares its owner's bytes and adds none. The
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
    for b in buffers:
        if b.alias_of is not None or b.first_step >= n_steps:
            continue
        delta = deltas.setdefault(key(b), np.zeros(n_steps + 1, dtype=np.int64))
        delta[b.first_step] += b.size
        delta[min(b.last_step, n_steps - 1) + 1] -= b.size
    return {k: np.cumsum(delta)[:n_steps] for k, delta in deltas.items()}
