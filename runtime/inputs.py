"""Input values for a training step: from an .npz file, or generated when none is given.

Generated values are for smoke runs, not training: floats uniform in [0, 0.1) (non-negative, so
variances and Adam's second moments stay valid), integers 0 (a valid class index or token id
whatever the vocabulary), booleans False. Give real values with --inputs for real numbers.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from runtime.errors import InputValuesError
from runtime.model import RuntimeModel
from schemas.plan import Plan


def read_npz(path: str | Path, model: RuntimeModel) -> dict[str, np.ndarray]:
    """Every graph input's value from an .npz (extra arrays are refused, missing ones named)."""
    try:
        with np.load(path, allow_pickle=False) as archive:
            values = {name: archive[name] for name in archive.files}
    except (OSError, ValueError) as exc:
        raise InputValuesError(f"cannot read input values from {path}: {exc}") from None
    missing = [n for n in model.inputs if n not in values]
    unknown = [n for n in values if n not in model.inputs]
    if missing or unknown:
        raise InputValuesError(
            f"{path} does not hold exactly the model's inputs: missing {missing[:5]}, "
            f"unknown {unknown[:5]}"
        )
    return values


def generated_inputs(plan: Plan, seed: int = 0) -> dict[str, np.ndarray]:
    """A value for every graph input, shaped as the plan holds it."""
    rng = np.random.default_rng(seed)
    buffers = {b.id: b for b in plan.buffers}
    values = {}
    for name, b_id in plan.graph_inputs.items():
        b = buffers[b_id]
        dtype = np.dtype(b.dtype)
        if dtype.kind == "f":
            values[name] = rng.uniform(0.0, 0.1, size=b.shape).astype(dtype)
        else:
            values[name] = np.zeros(b.shape, dtype=dtype)
    return values


def loss_output(plan: Plan, preferred: str | None = None) -> str | None:
    """The graph output to print as the loss: `preferred`, else the first scalar float output
    that is not a state update."""
    if preferred is not None:
        if preferred not in plan.graph_outputs:
            raise InputValuesError(f"--loss {preferred} is not an output of the model")
        return preferred
    buffers = {b.id: b for b in plan.buffers}
    updated = set(plan.state_updates.values())
    for name, b_id in plan.graph_outputs.items():
        b = buffers[b_id]
        if name not in updated and np.dtype(b.dtype).kind == "f" and \
                int(np.prod(b.shape, dtype=np.int64)) == 1:
            return name
    return None
