"""Input values for profiling: generated index inputs stay in range, given values are checked."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from planner.errors import InvalidInputError
from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.inputs import capture_values, graph_input_values, index_upper_bound
from tests.support.fixture_zoo import FIXTURE_DIR
from tests.support.onnx_builders import make_model, value

I64 = TensorProto.INT64


def embedding_step(vocab: int = 7, classes: int = 5):
    """tokens -> Gather(embedding) -> MatMul -> logits; labels -> Reshape -> Where(ignore) ->
    Unsqueeze -> GatherElements (the shape of torch's cross-entropy decomposition)."""
    nodes = [
        helper.make_node("Gather", ["emb", "tokens"], ["h"], axis=0),
        helper.make_node("MatMul", ["h", "proj"], ["logits"]),
        helper.make_node("Reshape", ["labels", "flat"], ["lab"]),
        helper.make_node("Equal", ["lab", "ignore"], ["is_ignored"]),
        helper.make_node("Where", ["is_ignored", "zero", "lab"], ["lab_safe"]),
        helper.make_node("Unsqueeze", ["lab_safe", "one_axis"], ["lab2"]),
        helper.make_node("Reshape", ["logits", "rows"], ["logits2"]),
        helper.make_node("GatherElements", ["logits2", "lab2"], ["picked"], axis=1),
        helper.make_node("ReduceSum", ["picked"], ["loss"], keepdims=0),
    ]
    inits = [
        helper.make_tensor("flat", I64, [1], [-1]), helper.make_tensor("ignore", I64, [], [-100]),
        helper.make_tensor("zero", I64, [], [0]), helper.make_tensor("one_axis", I64, [1], [1]),
        helper.make_tensor("rows", I64, [2], [-1, classes]),
    ]
    return make_model(
        nodes,
        [value("tokens", [3, 4], I64), value("labels", [3, 4], I64), value("emb", [vocab, 6]),
         value("proj", [6, classes])],
        [value("loss", [])], inits,
    )


def test_generated_indices_stay_in_range_of_gather_and_label_consumers():
    graph = load_graph(embedding_step(vocab=7, classes=5))
    tokens, labels = graph.tensor("tokens").id, graph.tensor("labels").id
    assert index_upper_bound(graph, tokens) == 7
    assert index_upper_bound(graph, labels) == 5  # through Reshape, Where, Unsqueeze
    for seed in range(5):
        values = graph_input_values(graph, seed=seed)
        assert values[tokens].min() >= 0 and values[tokens].max() < 7
        assert values[labels].min() >= 0 and values[labels].max() < 5
    # the whole graph runs on them (out-of-range Gather indices would make ORT fail)
    captured = capture_values(graph)
    assert captured[graph.tensor("h").id].shape == (3, 4, 6)
    profile = profile_graph(graph, cache=None, policy=QUICK_POLICY)
    assert all(o.costs["cpu"].source == "measured" for o in profile.ops)


def test_fixture_embedding_bounds():
    graph = load_graph(FIXTURE_DIR / "gpt2_tiny_adam.onnx")
    vocab = graph.tensor("wte.weight").shape[0]
    assert index_upper_bound(graph, graph.tensor("input").id) == vocab
    assert index_upper_bound(graph, graph.tensor("label").id) == vocab
    values = graph_input_values(graph)
    assert values[graph.tensor("input").id].max() < vocab


def test_given_values_are_used_and_checked():
    graph = load_graph(embedding_step())
    tokens = np.zeros((3, 4), np.int64)
    values = graph_input_values(graph, {"tokens": tokens})
    assert values[graph.tensor("tokens").id] is not None
    assert not values[graph.tensor("tokens").id].any()
    with pytest.raises(InvalidInputError, match="shape"):
        graph_input_values(graph, {"tokens": np.zeros((2, 4), np.int64)})
    with pytest.raises(InvalidInputError, match="not graph inputs"):
        graph_input_values(graph, {"nope": tokens})
    with pytest.raises(InvalidInputError, match="dtype"):
        graph_input_values(graph, {"emb": np.zeros((7, 6), np.complex64)})
