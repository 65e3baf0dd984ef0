"""The search that scales: the eviction simulation (planner.remat.evict), the fill pass
(planner.remat.fill) and the crossing bound (planner.remat.bounds).

- The bound never exceeds the exact optimum (CP-SAT's exact model on random chains, proven
  optimal), and where it says no schedule fits, the exact model agrees.
- The fill pass never returns a slower schedule or one over budget, and with the budget of
  keeping everything it drops every recomputation.
- Eviction schedules replay within their budgets and build into plans the validator accepts;
  past LARGE_GRAPH_OPS ops plan_remat uses them alone and keeps its time limit.
"""

from __future__ import annotations

import math
import random
import time
from types import SimpleNamespace

import pytest

from planner.ir.graph import load_graph
from planner.ir.graph_json import graph_from_node_link
from planner.memory.replay import replay
from planner.memory.schedule import Compute
from planner.memory.sharing import state_updates
from planner.memory.simulate import simulate
from planner.memory.zones import persistent_tensors
from planner.order import optimize_order
from planner.order.heuristics import file_order
from planner.order.just_in_time import deferred
from planner.order.list_schedule import eager_free_order, memory_greedy_order
from planner.plan.builder import build_plan
from planner.plan.validate import validate_plan
from planner.profile import QUICK_POLICY, profile_graph
from planner.profile.costs import costs_from_profile
from planner.remat import baselines, evict
from planner.remat.bounds import crossing_bound
from planner.remat.configure import configure
from planner.remat.decision import evaluate
from planner.remat.emit import emit_schedule
from planner.remat.evict import evict_candidates, evict_schedule
from planner.remat.fill import fill_budget
from planner.remat.heuristics import Candidate
from planner.remat.problem import RematOptions, forward_phase, recomputable_anywhere
from planner.remat.rematerialize import LARGE_GRAPH_OPS, _by_family, _held_by_best, plan_remat
from planner.remat.solve import solve_problem
from schemas.plan import PlanRequest
from tests.planner.remat.test_remat_chain import both_optima
from tests.support.chains import chain_json
from tests.support.fixture_zoo import model_path

pytestmark = pytest.mark.usefixtures("private_profile_cache")
LAYOUT_SLACK = 0.03


def at_activation_share(name: str, share: float = 0.5):
    """A fixture as the CLI plans it (extended rewrite), its quick profile and order, and the
    budget of its persistent bytes plus `share` of the rest of its keep-everything peak."""
    graph = load_graph(model_path(name), optimization="extended")
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = optimize_order(graph, use_solver=False).order
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=64).stats.peaks["cpu"]
    persistent = sum(-(-graph.tensors[t].nbytes // 64) * 64 for t in persistent_tensors(graph))
    budget = int(persistent + share * (keep - persistent))
    return graph, profile, costs, order, budget


def chain(seed: int, n: int = 10):
    graph, profile = graph_from_node_link(chain_json(random.Random(seed), n), name="chain")
    return graph, costs_from_profile(profile, graph, ["cpu"])


@pytest.mark.parametrize("seed", range(6))
def test_crossing_bound_is_below_the_exact_optimum(seed):
    data = chain_json(random.Random(seed), 8)
    graph, costs = chain(seed, 8)
    order = list(range(len(graph.ops)))
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=1).stats.peaks["cpu"]
    checked = 0
    for budget in range(keep, 0, -max(1, keep // 12)):
        bound = crossing_bound(graph, order, "cpu", budget, costs)
        optimum = both_optima(data, budget)[5]
        if optimum is None:
            continue  # infeasible for the exact model: any bound holds
        checked += 1
        assert bound.seconds <= optimum + 1e-9, (budget, bound, optimum)
    assert checked >= 3


@pytest.mark.parametrize("seed", range(4))
def test_crossing_bound_infeasibility_is_proven_by_the_exact_model(seed):
    data = chain_json(random.Random(seed), 8)
    graph, costs = chain(seed, 8)
    order = list(range(len(graph.ops)))
    refused = [b for b in range(1, 40)
               if math.isinf(crossing_bound(graph, order, "cpu", b, costs).seconds)]
    assert refused, "some budget must be too small"
    for budget in refused[-3:]:
        assert both_optima(data, budget)[5] is None


@pytest.mark.parametrize("name", ["mlp_sgd", "cnn_bn_momentum"])
def test_crossing_bound_adds_nothing_at_an_orders_own_keep_everything_peak(name):
    """Every op once in an order fits that order's own peak, so the bound there is the time of
    every op once. A momentum chain's `mu * v`, made early and held until the gradient comes,
    may sit in the state's storage: counted as its own bytes, the bound of the memory-greedy
    order on cnn_bn_momentum was 0.3% above that time."""
    graph = load_graph(model_path(name))
    costs = costs_from_profile(profile_graph(graph, ["cpu"], cache=None, policy=QUICK_POLICY),
                               graph, ["cpu"])
    for order in (file_order(graph), memory_greedy_order(graph), eager_free_order(graph)):
        keep = baselines.keep_all(graph, order, "cpu", costs, alignment=1).stats
        bound = crossing_bound(graph, order, "cpu", keep.peaks["cpu"], costs)
        assert bound.extra_seconds == 0.0
        assert bound.seconds == pytest.approx(keep.seconds, rel=1e-12)


def test_the_reported_bound_holds_for_the_order_the_best_schedule_ran_in():
    """A bound taken for other orders need not hold for the winner's: on mlp_sgd at the peak of
    keeping everything in the eager-free order, the memory-greedy order's crossing bound is
    above that schedule's time (GPT-2-tiny at its keep-everything arena reported a bound above
    its keep-everything plan, whose order the stage heuristics had made). The winner's own
    order then bounds it; an order already bounded changes nothing."""
    graph = load_graph(model_path("mlp_sgd"))
    costs = costs_from_profile(profile_graph(graph, ["cpu"], cache=None, policy=QUICK_POLICY),
                               graph, ["cpu"])
    greedy, eager = memory_greedy_order(graph), eager_free_order(graph)
    keep = baselines.keep_all(graph, eager, "cpu", costs, alignment=1)
    assert keep.schedule is not None and keep.stats is not None
    budget = {"cpu": keep.stats.peaks["cpu"]}
    other = crossing_bound(graph, greedy, "cpu", budget["cpu"], costs).seconds
    assert other > keep.stats.seconds * (1 + 1e-6)
    best = Candidate("keep", None, None, keep.schedule, keep.stats)
    held = _held_by_best(graph, [best], (other, "greedy's"), {tuple(greedy)}, budget, costs, 1)
    assert held[0] <= keep.stats.seconds * (1 + 1e-12)
    both = {tuple(greedy), tuple(eager)}
    assert _held_by_best(graph, [best], (other, "greedy's"), both, budget, costs, 1) == (
        other, "greedy's")


def test_crossing_bound_rises_as_the_budget_falls():
    graph, costs = chain(3, 12)
    order = list(range(len(graph.ops)))
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=1).stats.peaks["cpu"]
    bounds = [crossing_bound(graph, order, "cpu", b, costs).seconds
              for b in range(keep, keep // 3, -1)]
    assert bounds == sorted(bounds)
    assert bounds[0] == pytest.approx(costs.fastest_seconds())
    assert bounds[-1] > bounds[0]


@pytest.mark.parametrize("seed", range(4))
def test_fill_with_the_keep_everything_budget_drops_every_recomputation(seed):
    graph, costs = chain(seed, 14)
    order = list(range(len(graph.ops)))
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=1).stats
    start = evict_candidates(graph, [order], "cpu", keep.peaks["cpu"] * 2 // 3, costs,
                             alignment=1, deadline=time.perf_counter() + 10).fitting
    assert start and start[0].stats.recomputes > 0
    filled = fill_budget(graph, start[0].schedule, start[0].stats, keep.peaks, costs,
                         alignment=1, deadline=time.perf_counter() + 10)
    assert filled.stats.recomputes == 0
    assert filled.stats.seconds == pytest.approx(keep.seconds)
    assert filled.stats.peaks["cpu"] <= keep.peaks["cpu"]


@pytest.mark.parametrize("name", ["cnn_bn_momentum", "unet_small", "gpt2_tiny_adam"])
def test_eviction_and_fill_plans_pass_the_validator(name):
    graph = load_graph(model_path(name))
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = list(range(len(graph.ops)))
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=64).stats
    planned = 0
    for share in (0.9, 0.8, 0.7):
        budget = int(keep.peaks["cpu"] * share)
        found = evict_candidates(graph, [order], "cpu", budget, costs, alignment=64,
                                 deadline=time.perf_counter() + 20).fitting
        for candidate in found[:1]:
            assert candidate.stats.peaks["cpu"] <= budget
            filled = fill_budget(graph, candidate.schedule, candidate.stats, {"cpu": budget},
                                 costs, alignment=64, deadline=time.perf_counter() + 20)
            assert filled.stats.peaks["cpu"] <= budget
            assert filled.stats.seconds <= candidate.stats.seconds + 1e-12
            assert simulate(graph, filled.schedule, costs, 64) == filled.stats
            # The arena may fragment a little past the live bytes (planner.pipeline.fit then
            # retries below the budget): the plan is validated against LAYOUT_SLACK more.
            request = PlanRequest(budgets={"cpu": int(budget * (1 + LAYOUT_SLACK))},
                                  profile=profile, time_limit_s=10)
            plan = build_plan(graph, filled.schedule, request, plan_id="t", planner_version="t",
                              solvers=[], layout_time_limit=5).plan
            report = validate_plan(graph, plan, profile)
            assert report.ok, report.errors[:3]
            assert max(report.live_bytes["cpu"]) <= budget
            planned += 1
    assert planned >= 2


def test_a_large_graph_is_planned_by_eviction_within_its_time_limit():
    graph = load_graph(model_path("resnet18_narrow"))
    assert len(graph.ops) > LARGE_GRAPH_OPS
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = list(range(len(graph.ops)))
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=64).stats
    budget = int(keep.peaks["cpu"] * 0.7)
    started = time.perf_counter()
    result = plan_remat(graph, order, {"cpu": budget}, costs, time_limit=8)
    assert time.perf_counter() - started <= 8 * 1.05 + 1
    assert result.model.tier == "evict"
    assert result.best is not None and result.stats is not None
    assert result.stats.peaks["cpu"] <= budget
    assert result.status == "FEASIBLE"
    assert costs.fastest_seconds() <= result.bound_seconds <= result.objective_seconds
    assert result.gap is not None and 0 <= result.gap < 1


def in_place_updates(graph, schedule) -> set[int]:
    """States whose new value ends in the state's own bytes in `schedule`."""
    walk = replay(graph, schedule)
    history = walk.final()
    return {state for new, state in state_updates(graph).in_place.items()
            if history[(new, "cpu")][-1].owner.tensor == state}


def test_eviction_never_recomputes_from_a_state_already_updated():
    """A recomputation reading a weight after its optimizer update would force the update out
    of place (the new value held to the end of the step, then copied back): on GPT-2-tiny with
    Adam (the graph ONNX Runtime's extended level rewrites it into) a storage read only through
    a view was evicted as dead and remade late, which made every budget below 584 KB
    unreachable. Every state the keep-everything schedule updates in place must stay updated
    in place, and persistent + half the activation bytes must be reached."""
    graph = load_graph(model_path("gpt2_tiny_adam"), optimization="extended")
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = optimize_order(graph, use_solver=False).order
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=64)
    expected = in_place_updates(graph, keep.schedule)
    assert expected
    persistent = sum(-(-graph.tensors[t].nbytes // 64) * 64 for t in persistent_tensors(graph))
    budget = (persistent + keep.stats.peaks["cpu"]) // 2
    found = evict_candidates(graph, [order], "cpu", budget, costs, alignment=64,
                             deadline=time.perf_counter() + 20).fitting
    assert found
    for candidate in found:
        assert candidate.stats.recomputes > 0
        assert in_place_updates(graph, candidate.schedule) == expected


@pytest.mark.usefixtures("without_late_recompute")
def test_an_input_the_order_still_reads_does_not_cap_a_recomputation():
    """A recomputation may read an input made from states already updated when the order
    itself still reads that input then: it is resident, as it was made. On GPT-2-tiny with
    Adam at persistent + 30% of its activation bytes, values made from the final hidden state
    (which the tied head's fused weight gradient reads at the very end) were held as if made
    from every weight of the network; evicting any phase's values, the smallest replayed peak
    was 565,760 B, 525,312 B once they may be remade. No update is forced out of place."""
    graph = load_graph(model_path("gpt2_tiny_adam"), optimization="extended")
    profile = profile_graph(graph, ["cpu"], policy=QUICK_POLICY)
    costs = costs_from_profile(profile, graph, ["cpu"])
    order = optimize_order(graph, use_solver=False).order
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=64)
    persistent = sum(-(-graph.tensors[t].nbytes // 64) * 64 for t in persistent_tensors(graph))
    budget = persistent + (keep.stats.peaks["cpu"] - persistent) * 3 // 10
    evicted = evict_schedule(graph, order, "cpu", budget, costs, recomputable_anywhere(graph),
                             alignment=64)
    assert evicted is not None
    assert simulate(graph, evicted.schedule, costs, 64).peaks["cpu"] < 540_000
    assert in_place_updates(graph, evicted.schedule) == in_place_updates(graph, keep.schedule)


@pytest.mark.usefixtures("without_late_recompute")
def test_eviction_drops_backward_values_when_forward_ones_are_not_enough():
    """On ResNet-CIFAR (BatchNorm, momentum) at persistent + half its activation bytes, the
    order's backward phase holds transposed gradients for dozens of steps: evicting forward
    values alone cannot reach the budget in that order, evicting those too can."""
    graph, profile, costs, order, budget = at_activation_share("resnet_cifar")
    forward, _ = forward_phase(graph, order, RematOptions())
    forward_only = evict_schedule(graph, order, "cpu", budget, costs, forward, alignment=64)
    assert forward_only is not None
    assert not simulate(graph, forward_only.schedule, costs, 64).fits({"cpu": budget})
    anywhere = recomputable_anywhere(graph)
    both = evict_schedule(graph, order, "cpu", budget, costs, anywhere, alignment=64)
    assert both is not None
    assert simulate(graph, both.schedule, costs, 64).fits({"cpu": budget})
    recomputed = {e.op for e in both.schedule.events if isinstance(e, Compute) and e.recompute}
    assert recomputed & (anywhere - forward)


@pytest.mark.usefixtures("without_late_recompute")
def test_deferred_order_lets_forward_eviction_fit_and_is_searched():
    """The same case in the deferred order (each transpose right before the convolution that
    reads it): evicting forward values alone fits, at a lower step time than any schedule of
    the order itself, and the search runs both orders and keeps that one first."""
    graph, profile, costs, order, budget = at_activation_share("resnet_cifar")
    late = deferred(graph, order)
    forward, _ = forward_phase(graph, late, RematOptions())
    evicted = evict_schedule(graph, late, "cpu", budget, costs, forward, alignment=64)
    assert evicted is not None
    stats = simulate(graph, evicted.schedule, costs, 64)
    assert stats.fits({"cpu": budget})
    anywhere = evict_schedule(graph, order, "cpu", budget, costs,
                              recomputable_anywhere(graph), alignment=64)
    assert anywhere is not None
    assert stats.seconds < simulate(graph, anywhere.schedule, costs, 64).seconds
    found = evict_candidates(graph, [order], "cpu", budget, costs, alignment=64,
                             deadline=time.perf_counter() + 20).fitting
    assert found and found[0].name.endswith("/late")



@pytest.mark.parametrize("seed", range(4))
def test_the_neighbourhood_price_counts_the_gone_inputs_a_recomputation_remakes(seed):
    """At every eviction, a made value none of whose inputs is gone is priced at its op's time;
    one with gone inputs (made, then evicted or freed) at least at its op's time plus theirs
    (their own gone inputs count as they were when it was last priced): the bookkeeping
    follows every value that comes or goes, or a cheap value at the end of an evicted chain
    looks cheap again."""
    graph, costs = chain(seed, 30)
    order = list(range(len(graph.ops)))
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=1).stats.peaks["cpu"]
    forward, _ = forward_phase(graph, order, RematOptions())
    checked = []

    class Checked(evict._Simulation):
        def _make_room(self, need, protected):
            for t in range(len(graph.tensors)):
                if self.made[t] and graph.tensors[t].producer is not None:
                    gone = [x for x in self.remake_inputs[t] if self.made[x]
                            and x not in self.resident and x not in self.persistent]
                    if gone:
                        assert self.remake_cost[t] >= self.cost[t] + sum(
                            self.cost[x] for x in gone) - 1e-9, t
                    else:
                        assert self.remake_cost[t] == self.cost[t], t
                    checked.append(bool(gone))
            super()._make_room(need, protected)

    Checked(graph, order, "cpu", keep // 3, costs, forward, 1, math.inf, math.inf,
            evict.NEIGHBOURHOOD).run()
    assert any(checked), "some value's inputs were gone at an eviction"


def test_the_fill_pass_takes_the_fastest_of_each_family_first():
    """A fast schedule of one eviction rule often fills worse than a slower one of another
    rule, so the sources alternate between families (the name before "@")."""
    def fake(name: str, seconds: float) -> Candidate:
        return Candidate(name, None, None, None, SimpleNamespace(seconds=seconds))

    ranked = _by_family([fake("evict-own@1", 1.0), fake("evict-own@0.9", 1.1),
                         fake("evict-own@0.8", 1.2), fake("evict@1", 1.3),
                         fake("cpsat", 1.4), fake("evict@0.9", 1.5)])
    assert [c.name for c in ranked] == ["evict-own@1", "evict@1", "cpsat", "evict-own@0.9",
                                        "evict@0.9", "evict-own@0.8"]


@pytest.mark.slow  # 15-35 s: `make test` stays under 10 min on 2 cores
@pytest.mark.usefixtures("without_late_recompute")
def test_a_stage_model_schedule_replays_within_the_memory_the_model_counted():
    """GPT-2-tiny's graph outputs views of activations it also saves for the backward pass: a
    read of a view needs its root's bytes. The model counted such a read as one of a free value
    and let the root go, while the emitted schedule kept the root alive under the view: the
    model's schedules replayed at 725 KB against the 554 KB it counted, and none was used. Now
    a view's reader needs its root resident, and the emitted schedule runs the view again
    after its root is recomputed. (At 55% of the activations: since its tied head's product runs
    apart from its late addend, schemas.late_addend, half of its lower keep-everything peak is
    beyond what the forward-only stage model reaches.)"""
    graph, profile, costs, order, budget = at_activation_share("gpt2_tiny_adam", 0.55)
    configured = configure(graph, order, costs, {"cpu": budget}, memory_unit=64)
    problem = configured.problem
    # 20 s: at 5 s the repair heuristic (which finds nothing here) left CP-SAT under 1 s, and
    # on a 2-core machine under load that found no schedule either
    solution = solve_problem(problem, {"cpu": budget // 64}, time_limit=20, workers=2,
                             memory=configured.memory, use_heuristics=True)
    assert solution.decision is not None
    counted = evaluate(problem, solution.decision).peaks["cpu"] * problem.memory_unit
    replayed = simulate(graph, emit_schedule(problem, solution.decision), costs, 64)
    assert replayed.peaks["cpu"] <= counted <= budget


def test_an_order_the_crossing_bound_rules_out_hands_over_to_another():
    """The order tuned for keeping everything can make a graph output early and hold it across
    a large temporary: no recomputation helps that order, and GPT-2-small at persistent + 50%
    was answered INFEASIBLE for it, while its quick order planned at 1.06x."""
    nodes = [{"id": "x", "input": True, "cost_ram": 1},
             {"id": "out", "cost_cpu": 1, "cost_ram": 10},
             {"id": "temp", "cost_cpu": 1, "cost_ram": 10},
             {"id": "loss", "cost_cpu": 1, "cost_ram": 1}]
    links = [{"source": "x", "target": "out"}, {"source": "x", "target": "temp"},
             {"source": "temp", "target": "loss"}]
    graph, profile = graph_from_node_link({"nodes": nodes, "links": links}, name="early")
    costs = costs_from_profile(profile, graph, ["cpu"])
    op = {graph.ops[k].name: k for k in range(len(graph.ops))}
    early = [op["nout"], op["ntemp"], op["nloss"]]
    late = [op["ntemp"], op["nloss"], op["nout"]]
    alone = plan_remat(graph, early, {"cpu": 15}, costs, time_limit=2, memory_unit=1)
    assert alone.status == "INFEASIBLE" and alone.best is None
    handed = plan_remat(graph, early, {"cpu": 15}, costs, time_limit=2, memory_unit=1,
                        other_orders=[late])
    assert handed.best is not None and handed.stats.peaks["cpu"] <= 15


@pytest.mark.usefixtures("without_late_recompute")
def test_backward_eviction_in_the_chosen_order_comes_before_other_orders():
    """GPT-2-tiny at persistent + 40% of its activations: no order's forward eviction fits, the
    chosen order's backward eviction does (at 45% forward eviction fits since each weight's
    update temporaries wait at its update: planner.order.just_in_time). The other orders'
    forward eviction was tried first (UNet-Adam near its smallest budget: every confirming plan
    then ran out of time and min-budget answered the keep-everything arena, 151 MB against
    52.9 MB)."""
    graph, profile, costs, order, _ = at_activation_share("gpt2_tiny_adam")
    others = optimize_order(graph, use_solver=False).alternatives
    keep = baselines.keep_all(graph, order, "cpu", costs, alignment=64).stats.peaks["cpu"]
    persistent = sum(-(-graph.tensors[t].nbytes // 64) * 64 for t in persistent_tensors(graph))
    budget = int(persistent + 0.4 * (keep - persistent))
    found = evict_candidates(graph, [order, *others], "cpu", budget, costs, alignment=64,
                             deadline=time.perf_counter() + 4).fitting
    assert found and "+bwd" in found[0].name and "/order" not in found[0].name


def test_the_bound_covers_every_order_eviction_simulated_in():
    """Eviction's schedules come from the order, other orders and their deferred forms; the
    crossing bound reported beside the plan is taken over each of them (a bound of the order
    alone may exceed a schedule of another order, and the plan would read OPTIMAL)."""
    graph = load_graph(model_path("resnet_cifar"), optimization="extended")
    found = optimize_order(graph, use_solver=False)
    orders = [list(found.order), list(found.alternatives[0])]

    def named(name: str) -> Candidate:
        return Candidate(name, None, None, None, None)

    used = evict.source_orders(graph, orders, [named("evict@1"), named("evict+bwd@0.9/late"),
                                               named("evict-own@1/order1"),
                                               named("evict@0.95/order1/late"),
                                               named("evict@0.9/order1")])
    expected = [orders[0], deferred(graph, orders[0]), orders[1], deferred(graph, orders[1])]
    assert used == [o for k, o in enumerate(expected) if o not in expected[:k]]
