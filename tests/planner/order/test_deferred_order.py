"""The deferred order (planner.order.just_in_time.deferred) the eviction simulation also runs."""

from __future__ import annotations

import pytest

from planner.ir.graph import load_graph
from planner.memory.liveness import check_order
from planner.memory.sharing import state_updates
from planner.order import optimize_order
from planner.order.just_in_time import deferred
from tests.support.fixture_zoo import model_path
from tests.support.onnx_builders import random_dag


def first_reads(graph, order):
    """Per op with readers, the position of its first reader (or read-before-update edge)."""
    position = {op: k for k, op in enumerate(order)}
    edges = state_updates(graph).edges
    out = {}
    for op in graph.ops:
        readers = [c for t in op.output_ids for c in graph.tensors[t].consumers]
        readers += edges.get(op.id, [])
        if readers:
            out[op.id] = min(position[c] for c in readers)
    return out


@pytest.mark.parametrize("seed", range(8))
def test_every_op_runs_right_before_its_first_reader_in_a_valid_order(seed, tmp_path):
    path = tmp_path / "dag.onnx"
    path.write_bytes(random_dag(seed, n_ops=12).SerializeToString())
    graph = load_graph(path)
    order = list(range(len(graph.ops)))
    late = deferred(graph, order)
    check_order(graph, late)
    position = {op: k for k, op in enumerate(late)}
    for op, first in first_reads(graph, late).items():
        # Only ops it moved itself (deferred first, depth first) may sit in between.
        between = late[position[op] + 1:first]
        assert all(first_reads(graph, late).get(b, first) <= first for b in between), (op, late)


def test_resnet_cifar_transposes_move_next_to_their_convolution_and_updates_stay():
    """ONNX Runtime's rewrite transposes an activation for a weight gradient several ops
    before the convolution that reads it; deferred, it runs right before. A state's update
    chain keeps its place (its in-place write must follow the reads it follows)."""
    graph = load_graph(model_path("resnet_cifar"), optimization="extended")
    order = optimize_order(graph, use_solver=False).order
    late = deferred(graph, order)
    check_order(graph, late)
    before, after = first_reads(graph, order), first_reads(graph, late)
    pos_before = {op: k for k, op in enumerate(order)}
    pos_after = {op: k for k, op in enumerate(late)}
    transposes = [op.id for op in graph.ops if op.op_type == "Transpose" and op.id in before]
    gaps_before = [before[t] - pos_before[t] for t in transposes]
    gaps_after = [after[t] - pos_after[t] for t in transposes]
    assert max(gaps_before) > 2 and max(gaps_after) <= 2
    chains = {graph.tensors[v].producer for c in state_updates(graph).update_chains.values()
              for v in c}
    assert chains
    kept = [op for op in order if op in chains]
    assert [op for op in late if op in chains] == kept
