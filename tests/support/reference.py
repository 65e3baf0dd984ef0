"""A plan run by the runtime against ONNX Runtime's whole-graph session, step by step, on the
fixture's recorded inputs: how far the outputs drift, and how far they may."""

from __future__ import annotations

from runtime.executor import ExecutorOptions, PlanExecutor
from runtime.inputs import read_npz
from runtime.model import read_model
from runtime.reference import ReferenceSession, compare_outputs
from tests.support.fixture_zoo import inputs_path, model_path

TOLERANCE = 1e-5


def reference_diffs(name: str, plan, options: ExecutorOptions, steps: int = 5
                    ) -> list[tuple[str, float]]:
    """Per step, the output differing most from ONNX Runtime's whole-graph run and by how much
    (the fixture's recorded inputs, state fed back on both sides)."""
    model = read_model(model_path(name))
    executor = PlanExecutor(model, plan, options=options)
    reference = ReferenceSession(model, plan.state_updates)
    values = read_npz(inputs_path(name), model)
    executor.load_inputs(values)
    reference.load_inputs(values)
    worst_per_step = []
    for _ in range(steps):
        executor.step()
        reference.step()
        diffs = compare_outputs(executor.outputs(), reference.last)
        worst = max(diffs, key=diffs.get)
        worst_per_step.append((worst, diffs[worst]))
    return worst_per_step
