"""The sequence in which eviction (planner.remat.evict) tries the orders it is given.

Eviction removes forward values only; gradients and optimizer temporaries stay from their op to
their last read. An order tuned for keeping everything can hold so many of those at once that no
eviction fits the budget (GPT-2-small at persistent + 50% of its activations: the chosen order
runs its embedding's Adam update mid-backward and holds 652 MB eviction cannot touch, with
446 MB of room), and trying it first spent the request's time: such orders go last. The cheap
estimate (`unevictable_peak`) is checked against the exact replay of each order
(planner.memory.liveness.lifetimes, which decides every storage share).
"""

from __future__ import annotations

import numpy as np

from planner.ir.graph import Graph, load_graph
from planner.memory.liveness import lifetimes
from planner.memory.zones import persistent_tensors
from planner.order import optimize_order
from planner.remat.evict import HOPELESS_FACTOR, ordered_for_eviction, unevictable_peak
from planner.remat.problem import RematOptions, forward_phase
from tests.support.fixture_zoo import model_path


def replayed_unevictable_peak(graph: Graph, order: list[int]) -> int:
    """The exact figure: per storage of the order's replay, its whole live range when its
    owner is made by an op forward eviction cannot run again, at its most at any step."""
    forward, _ = forward_phase(graph, order, RematOptions())
    persistent = persistent_tensors(graph)
    live = lifetimes(graph, order)
    members: dict[int, list[int]] = {}
    for tensor in live.first:
        owner = live.alias.get(tensor, tensor)
        if owner not in persistent:
            members.setdefault(owner, []).append(tensor)
    change = np.zeros(len(order) + 1, dtype=np.int64)
    for owner, tensors in members.items():
        producer = graph.tensors[owner].producer
        if producer is None or producer in forward:
            continue
        change[min(live.first[t] for t in tensors)] += graph.tensors[owner].nbytes
        change[max(live.last[t] for t in tensors) + 1] -= graph.tensors[owner].nbytes
    return int(np.cumsum(change[:-1]).max())


def quick_orders(name: str) -> tuple[Graph, list[list[int]]]:
    graph = load_graph(model_path(name), optimization="extended")
    quick = optimize_order(graph, use_solver=False)
    return graph, [list(o) for o in (quick.order, *quick.alternatives)]


def estimates(graph: Graph, orders: list[list[int]]) -> list[int]:
    return [unevictable_peak(graph, o, forward_phase(graph, o, RematOptions())[0])
            for o in orders]


def test_orders_without_room_for_eviction_go_last_and_the_replay_agrees():
    """UNet-small: a budget whose room beside the persistent bytes lies between what its
    quick orders hold unevictably, too little for the chosen order. The orders over it go
    last, the others keep their sequence, and the exact replay confirms each moved order holds
    more than the room. (GPT-2-tiny's orders lie too close together since its tied head's
    product runs apart from its late addend: schemas.late_addend.)"""
    graph, orders = quick_orders("unet_small")
    held = estimates(graph, orders)
    persistent = sum(graph.tensors[t].nbytes for t in persistent_tensors(graph))
    assert min(held) < held[0] / HOPELESS_FACTOR
    room = int(min(held) + held[0] / HOPELESS_FACTOR) // 2
    hopeless = [k for k, h in enumerate(held) if h > HOPELESS_FACTOR * room]
    assert hopeless and len(hopeless) < len(orders)
    ordered = ordered_for_eviction(graph, orders, int(persistent + room))
    assert ordered == [k for k in range(len(orders)) if k not in hopeless] + hopeless
    assert ordered[0] != 0  # the chosen order is among those moved
    for k in hopeless:
        assert replayed_unevictable_peak(graph, orders[k]) > room
    assert replayed_unevictable_peak(graph, orders[ordered[0]]) <= room


def test_the_given_sequence_stays_when_every_order_leaves_room():
    graph, orders = quick_orders("unet_small")
    ample = sum(t.nbytes for t in graph.tensors)
    assert ordered_for_eviction(graph, orders, ample) == list(range(len(orders)))
    assert ordered_for_eviction(graph, orders[:1], 0) == [0]


def test_the_estimate_stays_near_the_replay_on_a_transformer():
    """GPT-2-tiny's quick orders (in-place chains, views, Adam's update chains): the estimate
    is within 0.8x-1.3x of the replayed figure (measured 1.1x-1.22x)."""
    graph, orders = quick_orders("gpt2_tiny_adam")
    for order in orders:
        estimate, exact = unevictable_peak(
            graph, order, forward_phase(graph, order, RematOptions())[0]), \
            replayed_unevictable_peak(graph, order)
        assert 0.8 * exact <= estimate <= 1.3 * exact


def test_a_fit_evicting_backward_values_lets_the_next_orders_forward_eviction_run(monkeypatch):
    """The scan's control flow (the runs themselves stubbed): the first order fits only when
    backward values go too; the second order's forward eviction still runs, and fits, which
    ends the scan before its own backward scope."""
    from planner.remat import evict
    from planner.remat.heuristics import Candidate
    from planner.remat.problem import recomputable_anywhere

    graph, orders = quick_orders("gpt2_tiny_adam")
    orders = orders[:3]
    assert len(orders) == 3 and len(recomputable_anywhere(graph)) > len(
        forward_phase(graph, orders[0], RematOptions())[0])
    runs: list[tuple[int, bool]] = []
    fits = {(0, True), (1, False), (2, False)}

    def stub(graph, order, device, budget, costs, alignment, deadline, rule, recomputable,
             name, found, complete, jitter=None):
        backward = evict.BACKWARD_TOO in name
        number = next(k for k, o in enumerate(orders) if list(order) == o)
        runs.append((number, backward))
        if (number, backward) in fits:
            found.fitting.append(Candidate(name.format(factor=1), None, None, None, None))
        yield False

    monkeypatch.setattr(evict, "_factors", stub)
    monkeypatch.setattr(evict, "_deferred_factors", lambda *args: iter(()))
    found = evict._scan(graph, evict._Forms(graph, orders), [0, 1, 2], "cpu", 1, None, 1,
                        float("inf"), evict.NEIGHBOURHOOD, first=True)
    assert runs == [(0, False), (0, True), (1, False)]
    assert [c.name for c in found.fitting] == ["evict+bwd@1", "evict@1/order1"]


def test_no_lower_factor_follows_a_run_that_overshoots_in_its_own_count(monkeypatch):
    """At the op-footprint bound, forward eviction in GPT-2-tiny cannot fit: the simulation
    overshoots the budget in its own count by more than HOPELESS_OVERSHOOT of it, and the
    replay does too. Lower factors would find
    the same values they cannot evict; they are not run."""
    import time

    from planner.memory.liveness import order_lower_bound
    from planner.profile import QUICK_POLICY, profile_graph
    from planner.profile.costs import costs_from_profile
    from planner.remat import evict

    graph, orders = quick_orders("gpt2_tiny_adam")
    costs = costs_from_profile(profile_graph(graph, ["cpu"], policy=QUICK_POLICY), graph,
                               ["cpu"])
    budget = order_lower_bound(graph)
    runs: list[evict.Evicted | None] = []
    real = evict.evict_schedule

    def counted(*args, **kwargs):
        runs.append(real(*args, **kwargs))
        return runs[-1]

    monkeypatch.setattr(evict, "evict_schedule", counted)
    found = evict._Found()
    forward = forward_phase(graph, orders[0], RematOptions())[0]
    steps = list(evict._factors(graph, orders[0], "cpu", budget, costs, 64,
                                time.perf_counter() + 60, evict.NEIGHBOURHOOD, forward,
                                "evict@{factor:g}", found, complete=True))
    assert len(runs) == 1 and steps == []
    assert runs[0] is not None and runs[0].overshoot > evict.HOPELESS_OVERSHOOT * budget
    assert not found.fitting and found.smallest_peak is not None
    assert found.smallest_peak > budget


def test_past_the_deadline_no_rule_after_the_first_starts(monkeypatch):
    """Each rule's first run completes whatever the time while nothing fits; past the deadline
    only the first rule's runs: at a budget no run meets, a refused 20,000-op chain at 2 s spent
    a second on each rule's run. Here a 2,002-op chain at a budget nothing meets, with the
    deadline already passed: one complete run of the first rule, none of the others."""
    import random
    import time

    from planner.ir.graph_json import graph_from_node_link
    from planner.memory.liveness import order_lower_bound
    from planner.profile.costs import costs_from_profile
    from planner.remat import evict
    from tests.support.chains import chain_json

    graph, profile = graph_from_node_link(chain_json(random.Random(0), 1000), name="chain")
    order = optimize_order(graph, use_solver=False, time_limit=1).order
    costs = costs_from_profile(profile, graph, ["cpu"])
    rules: list[str] = []
    real = evict.evict_schedule

    def counted(*args, **kwargs):
        rules.append(kwargs["rule"])
        return real(*args, **kwargs)

    monkeypatch.setattr(evict, "evict_schedule", counted)
    found = evict.evict_candidates(graph, [order], "cpu", order_lower_bound(graph), costs,
                                   alignment=1, deadline=time.perf_counter())
    assert not found.fitting
    assert rules == [evict.RULES[0]]
