"""Choose how faithful a model the time limit affords: the problem for one graph and order.

`TIERS`, from the most faithful model down (the first whose size fits is used); n is the number
of recomputable ops, and segment tiers cut them into N = max(8, n // 8 or n // 15) segments:

| tier | recompute window | recomputed as | just-in-time chain | small values |
|---|---|---|---|---|
| checkmate | any later stage | single ops | unbounded | modelled |
| ops | any later stage | single ops | unbounded | kept whole |
| ops-backward | after the forward phase | single ops | unbounded | kept whole |
| segmentsN | after the forward phase | segments, n // 8 | unbounded | kept whole |
| segmentsN | after the forward phase | segments, n // 15 | unbounded | kept whole |
| segmentsN-jitD | after the forward phase | segments, n // 15 | D = 4, 2, 1, 0 deep | kept whole |

The memory model is exact (Checkmate's) for the checkmate tier on one device when the problem is
small (EXACT_NODE_LIMIT nodes), else static frees.

Reductions every tier applies and whether they keep optimality:
- exact: presolve of fixed variables, one save variable per run of stages without an event,
  merged dominated memory rows, no recompute / copy of a resident value, grouping a node's
  outputs by reader set (planner.remat.constraints, planner.remat.problem);
- not exact (they can cut off better schedules; the bound is the reduced model's): the order is
  fixed (Checkmate's premise), tightened first (planner.remat.reorder); only forward-phase ops
  are recomputed; copies come from a device that computed the value; graph outputs and state
  updates run once on the home device; beyond the first tier, values and nodes under
  `tiny_units` are kept / unchecked individually (bounded by one row per run).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates
from planner.profile.costs import CostTable
from planner.remat.coarsen import coarse_groups
from planner.remat.model import MemoryModel
from planner.remat.problem import (
    Reduction,
    RematOptions,
    RematProblem,
    build_problem,
    forward_phase,
)
from planner.remat.reorder import tighten_order

# Recompute variables (sum over nodes of their recompute stages) a tier may have.
SIZE_LIMIT = 6_000
# Recompute stages up to which an op-level problem is fine for the heuristics.
FINE_LIMIT = 250_000
# Nodes up to which the exact (Checkmate) memory model is used on one device.
EXACT_NODE_LIMIT = 90


@dataclass(frozen=True)
class Tier:
    """One row of the module doc's table: how the tier reduces the problem."""

    name: str  # segment tiers add the segment count (and the depth): see `label`
    window: Literal["any", "after_forward"]  # RematOptions.window
    small_values_kept: bool  # RematOptions.tiny_units: on (reported as a reduction) or off
    ops_per_segment: int | None = None  # None: single ops
    jit_depth: int | None = None  # RematOptions.jit_depth
    exact_memory: bool = False  # the exact memory model when the problem is small enough

    def segments(self, n_recomputable: int) -> int | None:
        if self.ops_per_segment is None:
            return None
        return max(8, n_recomputable // self.ops_per_segment)

    def label(self, segments: int | None) -> str:
        if segments is None:
            return self.name
        return f"{self.name}{segments}" + ("" if self.jit_depth is None
                                           else f"-jit{self.jit_depth}")


TIERS = (
    Tier("checkmate", "any", small_values_kept=False, exact_memory=True),
    Tier("ops", "any", small_values_kept=True),
    Tier("ops-backward", "after_forward", small_values_kept=True),
    Tier("segments", "after_forward", small_values_kept=True, ops_per_segment=8),
    Tier("segments", "after_forward", small_values_kept=True, ops_per_segment=15),
    *(Tier("segments", "after_forward", small_values_kept=True, ops_per_segment=15,
           jit_depth=depth) for depth in (4, 2, 1, 0)),
)

# The heuristics' op-level problem (not a model tier: no CP-SAT runs on it).
FINE_TIER = Tier("ops-backward", "after_forward", small_values_kept=True)


@dataclass(frozen=True)
class Configured:
    problem: RematProblem
    memory: MemoryModel
    tier: str
    fine: RematProblem  # op-level problem for the heuristics (replayed, not modelled)


def home_device(budgets: Mapping[str, int]) -> str:
    """Where state, constants, graph inputs and outputs live: the largest budget (cpu first on
    ties, then by name)."""
    return max(budgets, key=lambda d: (budgets[d], d == "cpu", [-ord(c) for c in d]))


def configure(
    graph: Graph, order: Sequence[int], costs: CostTable, budget_bytes: Mapping[str, int], *,
    memory_unit: int = 64, size_limit: int = SIZE_LIMIT, exact_node_limit: int = EXACT_NODE_LIMIT,
    tighten: bool = True,
) -> Configured:
    setup = _setup(graph, order, costs, budget_bytes, memory_unit, tighten)
    devices, order, recomputable = setup.devices, setup.order, setup.recomputable
    multi = len(devices) > 1
    fine = None
    for tier in TIERS:
        segments = tier.segments(len(recomputable))
        options = _options(tier, memory_unit, setup.tiny)
        units = coarse_groups(graph, order, recomputable, segments) if segments else None
        groups = _fixed_runs(graph, order, recomputable, units) if multi and units else None
        problem = build_problem(
            graph, order, costs, devices=devices, home=setup.home, options=options,
            recomputable=recomputable, units=units, groups=groups,
        )
        size = _recompute_variables(problem)
        if fine is None and not segments and tier.small_values_kept and size <= FINE_LIMIT:
            fine = problem
        if size <= size_limit:
            break
    memory: MemoryModel = "exact" if (tier.exact_memory and not multi
                                      and len(problem.nodes) <= exact_node_limit) else "stage"
    extra = _tier_reductions(tier, options, segments, memory, setup.tiny)
    problem = replace(problem, reductions=tuple(setup.reductions + extra))
    if fine is None:
        fine = problem if not segments else _fine(graph, costs, setup, memory_unit)
    return Configured(problem, memory, tier.label(segments), fine)


@dataclass(frozen=True)
class _Setup:
    """What every tier shares: devices, home, the (tightened) order, the recomputable ops,
    the reductions all tiers apply, and the small-value threshold in units."""

    devices: tuple[str, ...]
    home: str
    order: Sequence[int]
    recomputable: set[int]
    reductions: list[Reduction]
    tiny: int


def base_reductions(graph: Graph, home: str) -> list[Reduction]:
    """The reductions every schedule of plan_remat makes, whichever search made it."""
    reductions = [
        Reduction("fixed order", False, "Checkmate's premise: the order of first computations "
                  "is given"),
        Reduction("forward-phase recomputation", False, "only ops the order runs before the "
                  "last forward op, not writing outputs or state, deterministic, are recomputed"),
        Reduction("home device", False, f"sources, constants, state and outputs live on {home};"
                  " output and state-update ops run there once"),
    ]
    sharing = state_updates(graph)
    if sharing.view_source or sharing.candidates:
        reductions.append(Reduction(
            "storage sharing approximated", False, "with one device a view costs nothing and "
            "an output written over an activation its one-op node frees takes that "
            "activation's bytes; other in-place writes, and views with several devices, are "
            "counted as bytes of their own; every schedule is replayed with them "
            "(planner.memory.replay) before it is judged against the budgets"))
    return reductions


def _setup(graph: Graph, order: Sequence[int], costs: CostTable,
           budget_bytes: Mapping[str, int], memory_unit: int, tighten: bool) -> _Setup:
    devices = tuple(budget_bytes)
    home = home_device(budget_bytes)
    base = RematOptions(memory_unit=memory_unit)
    recomputable, forward_end = forward_phase(graph, order, base)
    reductions = base_reductions(graph, home)
    reductions.insert(3, Reduction("presolve", True, "fixed variables, event runs, dominated "
                                   "memory rows, no recompute or copy of a resident value"))
    if tighten:
        tightened = tighten_order(graph, order, set(range(len(graph.ops))) - recomputable,
                                  forward_end)
        if list(tightened) != list(order):
            reductions.append(Reduction("tightened order", False, "ops never recomputed moved "
                                        "next to their data (planner.remat.reorder)"))
        order = tightened
    tiny = max(1, min(budget_bytes.values()) // memory_unit // 4000)
    return _Setup(devices, home, order, recomputable, reductions, tiny)


def _fine(graph: Graph, costs: CostTable, setup: _Setup, memory_unit: int) -> RematProblem:
    """Single ops, recomputed after the forward phase, small values kept whole."""
    return build_problem(
        graph, setup.order, costs, devices=setup.devices, home=setup.home,
        recomputable=setup.recomputable, options=_options(FINE_TIER, memory_unit, setup.tiny))


def _options(tier: Tier, memory_unit: int, tiny: int) -> RematOptions:
    return RematOptions(memory_unit=memory_unit, window=tier.window,
                        tiny_units=tiny if tier.small_values_kept else 0,
                        jit_depth=tier.jit_depth)


def _recompute_variables(problem: RematProblem) -> int:
    """The model's size: recompute variables (a unit's nodes share theirs), plus one placement
    choice per node and extra device."""
    devices = len(problem.devices)
    size = sum(len(n.recompute_stages) * devices for n in problem.nodes if n.unit is None)
    size += sum(len(problem.nodes[u[0]].recompute_stages) * devices for u in problem.units)
    if devices > 1:
        size += len(problem.nodes) * (devices - 1)
    return size


def _tier_reductions(tier: Tier, options: RematOptions, segments: int | None,
                     memory: MemoryModel, tiny: int) -> list[Reduction]:
    """The reductions the chosen tier adds to those every tier applies."""
    extra = []
    if tier.small_values_kept:
        extra.append(Reduction("small values kept", False, f"values and nodes under {tiny} "
                               "units are kept whole / checked per run"))
    if options.window == "after_forward":
        extra.append(Reduction("recompute after forward", False, "recomputations only in "
                               "stages after the forward phase"))
    if segments:
        extra.append(Reduction("segments", False, f"recomputable ops cut into {segments} "
                               "segments recomputed as units (planner.remat.coarsen)"))
    if options.jit_depth is not None:
        extra.append(Reduction("bounded recompute chains", False, "a segment is recomputed only "
                               f"where it or readers up to {options.jit_depth} deep are read"))
    if memory == "stage":
        extra.append(Reduction("static frees", False, "within a stage a value is freed after the "
                               "last node that may read it (Checkmate: that does)"))
    return extra


def _fixed_runs(graph: Graph, order: Sequence[int], recomputable: Collection[int],
                units: Sequence[Sequence[int]]) -> list[list[int]]:
    """Nodes for several devices: runs of up to 12 consecutive ops that are never recomputed
    (ops writing outputs or state alone), every recomputable op alone (units group them)."""
    outputs = set(graph.outputs)
    groups: list[list[int]] = []
    run: list[int] = []
    for op in order:
        pinned = any(t in outputs for t in graph.ops[op].output_ids)
        if op in recomputable or pinned:
            if run:
                groups.append(run)
                run = []
            groups.append([op])
        else:
            run.append(op)
            if len(run) >= 12:
                groups.append(run)
                run = []
    if run:
        groups.append(run)
    return groups
