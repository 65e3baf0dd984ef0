"""planner.memory.replay keeps its last walk: the remat search replays the schedule it picks
and the plan builder replays that same object again. Only the same objects get it back."""

from __future__ import annotations

import random

from planner.ir.graph_json import graph_from_node_link
from planner.memory.replay import forget_last_replay, replay
from planner.memory.schedule import Schedule, sequential_schedule
from tests.support.chains import chain_json


def _chain(n: int = 30):
    graph, _ = graph_from_node_link(chain_json(random.Random(1), n))
    return graph


def _walk_facts(walk):
    return [(m.tensor, m.device, m.first, m.ordinal, tuple(m.reads), m.freed_at, m.shares,
             walk.storage_range(m.owner)) for m in walk.materializations]


def test_the_same_schedule_object_gets_the_same_walk_back():
    graph = _chain()
    schedule = sequential_schedule(graph, range(len(graph.ops)), "cpu")
    walk = replay(graph, schedule)
    assert replay(graph, schedule) is walk


def test_an_equal_schedule_or_another_graph_is_walked_afresh_with_the_same_result():
    graph = _chain()
    schedule = sequential_schedule(graph, range(len(graph.ops)), "cpu")
    walk = replay(graph, schedule)
    twin = Schedule(tuple(schedule.events), dict(schedule.home))
    again = replay(graph, twin)
    assert again is not walk and _walk_facts(again) == _walk_facts(walk)
    other = _chain()  # an equal graph, another object
    assert replay(other, twin) is not again


def test_a_forgotten_walk_is_not_returned():
    graph = _chain()
    schedule = sequential_schedule(graph, range(len(graph.ops)), "cpu")
    walk = replay(graph, schedule)
    forget_last_replay()
    again = replay(graph, schedule)
    assert again is not walk and _walk_facts(again) == _walk_facts(walk)
