"""planner.memory.replay computes every materialization's live range once, after the walk: the
ranges must follow its module doc (constants and state for the whole step, a graph output never
freed to the last step, anything else from its write to its last read)."""

from __future__ import annotations

from planner.ir.graph import load_graph
from planner.memory.replay import forget_last_replay, replay
from planner.memory.schedule import sequential_schedule
from tests.support.fixture_zoo import model_path


def test_live_ranges_follow_the_module_doc() -> None:
    graph = load_graph(model_path("mlp_sgd"))
    forget_last_replay()
    walk = replay(graph, sequential_schedule(graph, range(len(graph.ops)), "cpu"))
    end = walk.n_steps - 1
    kinds = set()
    for m in walk.materializations:
        if m.preloaded and m.tensor in walk.persistent:
            kind, expected = "whole step", (0, end)
        elif m.freed_at is None and graph.tensors[m.tensor].is_graph_output:
            kind, expected = "output", (m.first, end)
        else:
            kind, expected = "transient", (m.first, max([m.first, *m.reads]))
        assert walk.live_range(m) == expected, (graph.tensors[m.tensor].name, kind)
        kinds.add(kind)
    assert kinds == {"whole step", "output", "transient"}
