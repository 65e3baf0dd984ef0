"""The conservative scratch bound a plan reserves when its workspace could not be measured
(planner.profile.workspace_bound): it must never fall short of what the per-op profile measures,
the figure a plan made with a profile reserves, and ops profiled as scratch-free count 0."""

from __future__ import annotations

import numpy as np
import pytest

from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.workspace_bound import (
    MIN_OP_SCRATCH,
    SCRATCH_FREE_CPU,
    column_bytes,
    op_scratch_bound,
)
from tests.support.fixture_zoo import inputs_path, model_path

pytestmark = pytest.mark.usefixtures("private_profile_cache")


@pytest.mark.parametrize("name", ["cnn_bn_momentum", "unet_small"])
def test_the_bound_covers_every_op_the_profile_measures(name):
    """Both fixtures have ops with scratch (Conv, ConvTranspose, Where: up to 1 MiB measured);
    the bound is at least each op's figure, 0 only where the profile measured 0."""
    g = load_graph(model_path(name))
    profile = profile_graph(g, inputs=dict(np.load(inputs_path(name))), cache=None,
                            policy=QUICK_POLICY)
    measured = {o.op_id: o.costs["cpu"].workspace_bytes for o in profile.ops}
    assert max(measured.values()) > 0
    for op in g.ops:
        bound = op_scratch_bound(g, op, "cpu")
        assert bound >= measured[op.id], (op.op_type, op.name)
        assert bound == 0 or op.op_type not in SCRATCH_FREE_CPU
    assert all(op_scratch_bound(g, op, "cpu:1") == op_scratch_bound(g, op, "cpu")
               for op in g.ops)  # an extra host arena runs the CPU's kernels


def test_a_convolution_counts_its_column_buffer_and_a_gpu_every_op():
    g = load_graph(model_path("unet_small"))
    convs = [op for op in g.ops if op.op_type in ("Conv", "ConvTranspose")]
    assert convs and all(column_bytes(g, op) > 0 for op in convs)
    for op in convs:  # a power of two covering twice the larger of operands and columns
        bound = op_scratch_bound(g, op, "cpu")
        largest = max(column_bytes(g, op), *(g.tensors[t].nbytes for t in op.input_ids))
        assert bound >= max(2 * largest, MIN_OP_SCRATCH) and bound & (bound - 1) == 0
    free = next(op for op in g.ops if op.op_type in SCRATCH_FREE_CPU)
    assert op_scratch_bound(g, free, "cpu") == 0 < op_scratch_bound(g, free, "cuda:0")
