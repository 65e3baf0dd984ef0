"""The rematerialization / placement problem the solvers work on, built from the graph IR.

Checkmate and XEngine schedule *nodes* over *stages* of a fixed topological order: stage t must
compute node t for the first time (the "frontier-advancing diagonal") and may recompute earlier
nodes. Here:

- a **node** is a group of ops run back to back as a unit: one op each by default, a segment of
  forward ops after coarsening (planner.remat.coarsen). Its cost on a device is the sum of its
  ops' costs; it cannot run on a device where one of its ops cannot.
- a **value** is what is kept, copied or freed as a unit: the tensors of one node that the same
  set of other nodes read (grouping by reader set is exact: such tensors are needed, and recreated,
  together), or one source tensor (graph input, constant, state). Outputs nobody reads and a
  node's internal temporaries are the node's `workspace`, live only while it runs.
- **sources**: graph inputs are preloaded on the home device and may be freed after their last
  read (the shared memory model, planner.memory.liveness); constants and state (`persistent`)
  stay on the home device for the whole step and count against its budget (`base`); their in-place
  updates reuse their storage and cost nothing.
- **storage sharing** (planner.memory.sharing): a view costs nothing, and its readers count as
  readers of the bytes it views, which stay resident for them. An output a one-op node may
  write over an activation it reads (`Node.in_place`: same bytes, read under one shape) takes
  that activation's bytes where the node frees it (the constraints' in-place credit): counted
  as bytes of their own, such outputs made GPT-2-tiny's model at persistent + half its
  activations infeasible while the replayed schedules fit. Other in-place writes (coarsened
  nodes) are counted as bytes of their own (the model over-counts them), and a view kept while
  its source is recomputed is not seen (it under-counts that): every schedule is replayed with
  the memory model (planner.memory.replay) before it is judged against the budgets.
- **home**: one designated device holds sources, constants, state and graph outputs; ops that
  write a graph output or an in-place state update are pinned there and run once.
- **recomputation**: only ops of the forward phase (everything the order runs before the last
  forward-region op, except optimizer ops, ops writing outputs or state, nondeterministic ops
  such as RandomUniformLike, and the ops reading their draws directly) may be recomputed, and
  only in the stages `recompute_stages` allows (see RematOptions). What they read from ops that
  are not recomputed (a dropout mask: the comparison of a draw) is kept for them: a
  recomputation needs its inputs resident like any computation. A recomputation reading a state
  that is updated in place may not run after the update (it would read the new value).

Memory is counted in `memory_unit` bytes (each tensor rounded up: conservative), time in
`time_unit` seconds, each op rounded down, so that the model's bound times the unit is a lower
bound on real seconds; the unit grows past the requested one when the costs are so large that
CP-SAT's 64-bit sums could overflow (`solver_time_unit`). Sizes too large for it are refused.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Literal

from planner.errors import InvalidInputError
from planner.ir.aliasing import SINGLE_INPUT_IN_PLACE_OPS
from planner.ir.graph import Graph, Region, per_graph
from planner.memory.liveness import aliases_in_order
from planner.memory.sharing import state_updates
from planner.memory.zones import buffer_bytes, live_curve, persistent_tensors
from planner.profile.costs import CostTable

NONDETERMINISTIC_OPS = frozenset({
    "Dropout", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike",
    "Multinomial", "Bernoulli",
})

ValueKind = Literal["activation", "input", "persistent", "output"]


@dataclass(frozen=True)
class Reduction:
    """A simplification applied to the problem or model, and whether it keeps optimality."""

    name: str
    exact: bool
    detail: str


@dataclass(frozen=True)
class RematOptions:
    """Which recomputations the model may choose.

    `recompute`: "forward_phase" (see the module doc) or "none" (keep-everything placement).
    `window`: "after_forward" recomputes only once the forward phase is over (stages from the
    first after the last forward-region op); "any" allows every later stage (Checkmate).
    `just_in_time`: a node may only be recomputed in a stage where it, or a node it feeds that
    may itself be recomputed there, is read; `jit_depth` bounds that chain (0: only where its own
    values are read; 1: also where a reader may be recomputed for its own readers; ...), which
    bounds how long a chain of recomputations one stage may need.
    `tiny_units`: with one device, values this small are kept from their computation to their
    last possible read, and nodes whose outputs are this small get no memory row of their own
    (one row per run of them bounds them all); 0 disables both.
    """

    recompute: Literal["forward_phase", "none"] = "forward_phase"
    window: Literal["after_forward", "any"] = "after_forward"
    just_in_time: bool = True
    jit_depth: int | None = None
    tiny_units: int = 0
    memory_unit: int = 1
    time_unit: float = 1e-9


# Largest total a model may sum, in units (CP-SAT sums coefficients times bounds in 64 bits).
SOLVER_RANGE = 2**50


def solver_time_unit(graph: Graph, costs: CostTable, requested: float) -> float:
    """`requested`, or a coarser unit when every op run once per stage could sum past
    SOLVER_RANGE units (costs of 1e13 s in a node-link graph, say)."""
    total = sum(max(c.values(), default=0.0) for c in costs.op_seconds)
    return max(requested, total * (len(graph.ops) + 1) / SOLVER_RANGE)


def _check_sizes(graph: Graph, memory_unit: int) -> None:
    total = sum(t.nbytes for t in graph.tensors)
    units = sum(buffer_bytes(t.nbytes, memory_unit) // memory_unit for t in graph.tensors)
    if units > SOLVER_RANGE:
        enough = 1 << max(0, math.ceil(math.log2(total / SOLVER_RANGE * 2)))
        raise InvalidInputError(
            f"the graph's tensors add up to {units} units of {memory_unit} B, more than the "
            f"solver's range ({SOLVER_RANGE} units); plan with --alignment {enough} or more "
            "(bytes per unit)")


@dataclass(frozen=True)
class Value:
    id: int
    producer: int | None  # node id; None for a source
    tensors: tuple[int, ...]  # graph tensor ids
    size: int  # memory units
    consumers: tuple[int, ...]  # node ids, ascending
    kind: ValueKind
    home: str | None  # sources and outputs
    last_read: int  # last stage it may be read in (-1: never read); outputs stay to the end
    update_stage: int | None = None  # state updated in place at this stage (no copy after it)
    copy_cost: Mapping[tuple[str, str], int] = field(default_factory=dict)


@dataclass(frozen=True)
class Node:
    id: int  # == the stage of its first computation
    ops: tuple[int, ...]  # graph op ids, in execution order
    values: tuple[int, ...]  # values it produces
    reads: tuple[int, ...]  # values it reads
    cost: Mapping[str, int]  # device -> time units; a missing device cannot run it
    workspace: int  # units live only while it runs
    recomputable: bool
    pinned: str | None
    recompute_stages: tuple[int, ...]  # stages > id where it may be recomputed
    unit: int | None = None  # recompute unit: its nodes are recomputed together
    # Outputs it may write over a value it reads (`_in_place_options`): each output's units and
    # the (value, units) whose bytes it may take when this node is their last reader.
    in_place: tuple[tuple[int, tuple[tuple[int, int], ...]], ...] = ()

    def runs_on(self, device: str) -> bool:
        return device in self.cost and (self.pinned is None or self.pinned == device)


@dataclass(frozen=True)
class RematProblem:
    name: str
    graph: Graph
    devices: tuple[str, ...]
    home: str
    nodes: tuple[Node, ...]
    values: tuple[Value, ...]
    base: Mapping[str, int]  # device -> persistent units (constants and state on home)
    memory_unit: int
    time_unit: float
    forward_end: int  # first stage after the forward phase
    options: RematOptions
    reductions: tuple[Reduction, ...] = ()
    units: tuple[tuple[int, ...], ...] = ()  # node ids recomputed together

    @property
    def stages(self) -> int:
        return len(self.nodes)

    def may_run(self, node: int, device: str, stage: int) -> bool:
        """Whether node may be (re)computed on device in stage (an R variable exists)."""
        n = self.nodes[node]
        if not n.runs_on(device):
            return False
        if stage == node:
            return True
        return stage in self._recompute_sets[node]

    @cached_property
    def _recompute_sets(self) -> tuple[frozenset[int], ...]:
        """Each node's recompute stages as a set (may_run is asked once per model variable)."""
        return tuple(frozenset(n.recompute_stages) for n in self.nodes)

    def last_reader_in_stage(self, value: int, device: str, stage: int) -> int:
        """The last node that may read `value` on `device` in `stage` (its producer if none
        may, -1 if it is not made there either): where the static-free memory model frees it."""
        v = self.values[value]
        for c in reversed(v.consumers):
            if c <= stage and self.may_run(c, device, stage):
                return c
        if v.producer is not None and self.may_run(v.producer, device, stage):
            return v.producer
        return -1


def default_groups(order: Sequence[int]) -> list[list[int]]:
    return [[op] for op in order]


def forward_phase(graph: Graph, order: Sequence[int], options: RematOptions
                  ) -> tuple[set[int], int]:
    """(recomputable op ids, position in `order` where the forward phase ends)."""
    position = {op: k for k, op in enumerate(order)}
    forward_positions = [position[op.id] for op in graph.ops if op.region is Region.FORWARD]
    end = 1 + max(forward_positions, default=-1)
    if options.recompute == "none":
        return set(), end
    return {op for op in recomputable_anywhere(graph) if position[op] < end}, end


@per_graph
def recomputable_anywhere(graph: Graph) -> frozenset[int]:
    """Ops that may run again at all, in any phase: not optimizer ops, not ops writing graph
    outputs or in-place state updates, not nondeterministic ops nor the ops reading their draws
    directly. The stage models keep to the forward phase of these (`forward_phase`: backward
    recomputations would multiply their variables for little); the eviction simulation
    (planner.remat.evict), linear in any case, may also drop backward values such as a gradient
    transposed long before it is read. Computed once per graph (a remat call asked five times:
    0.09 s of the 20,000-op chain's)."""
    return _recomputable_anywhere(graph)


def _recomputable_anywhere(graph: Graph) -> frozenset[int]:
    updates = state_updates(graph)
    outputs = set(graph.outputs)
    random_draws = {t for op in graph.ops if op.op_type in NONDETERMINISTIC_OPS
                    for t in op.output_ids}
    return frozenset(op.id for op in graph.ops
                     if op.region is not Region.OPTIMIZER
                     and op.op_type not in NONDETERMINISTIC_OPS
                     and not any(t in outputs or t in updates.in_place for t in op.output_ids)
                     and not any(t in random_draws for t in op.input_ids))


def build_problem(
    graph: Graph,
    order: Sequence[int],
    costs: CostTable,
    *,
    devices: Sequence[str],
    home: str,
    options: RematOptions = RematOptions(),
    groups: Sequence[Sequence[int]] | None = None,
    recomputable: Collection[int] | None = None,
    units: Sequence[Sequence[int]] | None = None,
    reductions: Sequence[Reduction] = (),
) -> RematProblem:
    """The problem for `graph` run in `order`, with nodes = `groups` (default: one op each).

    `groups` must list every op once, each group's ops in execution order, groups in an order
    where every op's producers are in its own or an earlier group. `recomputable` overrides the
    ops that may be recomputed (default: `forward_phase(graph, order, options)`). `units` (lists
    of op ids, each a union of whole nodes) are recomputed as one: their nodes share the stages
    and, in the model, one R variable per stage (planner.remat.coarsen).
    """
    devices = tuple(devices)
    if home not in devices:
        raise InvalidInputError(f"home device {home} is not among the devices {devices}")
    options = replace(options, time_unit=solver_time_unit(graph, costs, options.time_unit))
    _check_sizes(graph, options.memory_unit)
    recomputable_ops, forward_end_pos = forward_phase(graph, order, options)
    if recomputable is not None:
        recomputable_ops = set(recomputable) if options.recompute != "none" else set()
    grouping = _Grouping.of(graph, order, groups if groups is not None
                            else default_groups(order), views_share=len(devices) == 1)
    values = _source_values(grouping, home)
    records = [_node_values(grouping, index, home, options.memory_unit, values,
                            recomputable_ops) for index in range(len(grouping.groups))]
    for index, record in enumerate(records):
        _reads_and_costs(grouping, index, record, values, costs, devices, options.time_unit)
    recompute_units = _RecomputeUnits.of(units or (), grouping, records)
    forward_end = grouping.forward_end(order, forward_end_pos)
    stages = _recompute_stages(records, values, recompute_units, options, forward_end)
    nodes = tuple(
        Node(id=index, ops=rec.ops, values=rec.values, reads=rec.reads, cost=rec.cost,
             workspace=rec.workspace, recomputable=rec.recomputable and bool(stages[index]),
             pinned=rec.pinned, recompute_stages=stages[index],
             unit=recompute_units.unit_of.get(index),
             in_place=_in_place_options(grouping, rec, values, options.memory_unit))
        for index, rec in enumerate(records)
    )
    value_objs = tuple(_value(graph, costs, devices, options, vid, record, nodes)
                       for vid, record in enumerate(values.records))
    base = {d: 0 for d in devices}
    base[home] += sum(v.size for v in value_objs if v.kind == "persistent")
    return RematProblem(
        name=graph.name, graph=graph, devices=devices, home=home, nodes=nodes,
        values=value_objs, base=base, memory_unit=options.memory_unit,
        time_unit=options.time_unit, forward_end=forward_end, options=options,
        reductions=tuple(reductions),
        units=tuple(tuple(u) for u in recompute_units.members),
    )


@dataclass(frozen=True)
class _Grouping:
    """The ops grouped into nodes, the in-place updates the order allows, and whether views are
    free (one device: with several, the model could place a view away from its source's bytes,
    so views are counted as bytes of their own there)."""

    graph: Graph
    groups: tuple[tuple[int, ...], ...]
    node_of: Mapping[int, int]  # op id -> node id
    alias: Mapping[int, int]  # updated output -> its state (memory.sharing.aliases_in_order)
    views_share: bool

    @classmethod
    def of(cls, graph: Graph, order: Sequence[int], groups: Sequence[Sequence[int]], *,
           views_share: bool) -> _Grouping:
        node_of = {op: index for index, members in enumerate(groups) for op in members}
        if sorted(node_of) != list(range(len(graph.ops))):
            raise ValueError("groups must list every op exactly once")
        return cls(graph, tuple(tuple(g) for g in groups), node_of,
                   aliases_in_order(graph, order), views_share)

    def readers(self, tensor: int) -> tuple[int, ...]:
        """Nodes reading `tensor`'s bytes, ascending: its consumers and those of its views
        (planner.memory.sharing), which keep those bytes resident."""
        ops = set(self.graph.tensors[tensor].consumers)
        for view in self.views_of.get(tensor, ()):
            ops.update(self.graph.tensors[view].consumers)
        return tuple(sorted({self.node_of[c] for c in ops}))

    @cached_property
    def views_of(self) -> dict[int, list[int]]:
        """Tensor -> the views of its bytes, transitively (none when views are not free)."""
        sharing = state_updates(self.graph)
        found: dict[int, list[int]] = {}
        for view in sharing.view_source if self.views_share else ():
            found.setdefault(sharing.view_root(view), []).append(view)
        return found

    @cached_property
    def views_of_any(self) -> frozenset[int]:
        """Every tensor that is a free view."""
        return frozenset(v for views in self.views_of.values() for v in views)

    def forward_end(self, order: Sequence[int], forward_end_pos: int) -> int:
        """The first node after every node holding an op of the forward phase."""
        position = {op: k for k, op in enumerate(order)}
        return max((index + 1 for index, members in enumerate(self.groups)
                    if any(position[op] < forward_end_pos for op in members)), default=0)


@dataclass(frozen=True)
class _ValueRecord:
    """A value before its readers' recompute stages are known (`_value` makes it a Value)."""

    producer: int | None
    tensors: tuple[int, ...]
    consumers: tuple[int, ...]
    kind: ValueKind
    home: str | None
    update_stage: int | None
    free_of_charge: bool  # an in-place state update or a view: sits in another value's bytes


@dataclass
class _Values:
    """The values so far, and which value holds each tensor."""

    records: list[_ValueRecord] = field(default_factory=list)
    of_tensor: dict[int, int] = field(default_factory=dict)

    def add(self, record: _ValueRecord) -> int:
        for t in record.tensors:
            self.of_tensor[t] = len(self.records)
        self.records.append(record)
        return len(self.records) - 1


@dataclass
class _NodeRecord:
    """A node while it is built: its values and pinning first, then what it reads and costs."""

    ops: tuple[int, ...]
    values: tuple[int, ...]
    workspace: int
    pinned: str | None
    recomputable: bool  # whether all its ops may be recomputed (the stages decide the rest)
    reads: tuple[int, ...] = ()
    cap: int = 0  # last stage it may be recomputed in (before a state it reads is updated)
    cost: dict[str, int] = field(default_factory=dict)


def _source_values(grouping: _Grouping, home: str) -> _Values:
    """One value per tensor no op produces (graph inputs, constants, state), all on `home`."""
    graph = grouping.graph
    persistent = persistent_tensors(graph)
    update_stage_of = {state: grouping.node_of[graph.tensors[new].known_producer]
                       for new, state in grouping.alias.items()}
    values = _Values()
    for t in graph.tensors:
        if t.producer is None:
            kind: ValueKind = ("persistent" if (t.id in persistent or t.is_graph_output)
                               else "input")
            values.add(_ValueRecord(None, (t.id,), grouping.readers(t.id), kind, home,
                                    update_stage_of.get(t.id), free_of_charge=False))
    return values


def _node_values(grouping: _Grouping, index: int, home: str, unit: int, values: _Values,
                 recomputable_ops: Collection[int]) -> _NodeRecord:
    """Node `index`'s values (its outputs grouped by kind and outside reader set; the rest is
    its workspace), added to `values`, and the node as far as they decide it."""
    graph = grouping.graph
    members = grouping.groups[index]
    outputs = set(graph.outputs)
    exported: dict[tuple[str, tuple[int, ...]], list[int]] = {}
    internal: list[int] = []
    for op in members:
        for t in graph.ops[op].output_ids:
            outside = tuple(c for c in grouping.readers(t) if c != index)
            if t in grouping.alias or (t in grouping.views_of_any and t not in outputs):
                # written over its state's storage, or a view of other bytes: none of its own
                exported.setdefault(("alias", outside), []).append(t)
            elif t in outputs:
                exported.setdefault(("output", outside), []).append(t)
            elif outside:
                exported.setdefault(("activation", outside), []).append(t)
            else:
                internal.append(t)
    produced = []
    for (kind, outside), tensors in sorted(exported.items(), key=lambda kv: kv[1][0]):
        value_kind: ValueKind = "activation" if kind == "activation" else "output"
        produced.append(values.add(_ValueRecord(
            index, tuple(tensors), outside, value_kind, None if kind == "activation" else home,
            None, free_of_charge=kind == "alias")))
    in_place = state_updates(graph).in_place
    pinned = home if any(t in outputs or t in grouping.alias or t in in_place
                         for op in members for t in graph.ops[op].output_ids) else None
    return _NodeRecord(
        ops=members, values=tuple(produced),
        workspace=_internal_peak(graph, members, set(internal), unit), pinned=pinned,
        recomputable=pinned is None and all(op in recomputable_ops for op in members),
    )


def _reads_and_costs(grouping: _Grouping, index: int, rec: _NodeRecord, values: _Values,
                     costs: CostTable, devices: tuple[str, ...], time_unit: float) -> None:
    """What node `index` reads from other nodes and sources, the last stage it may be
    recomputed in (not after a state it reads is updated), and its time units per device."""
    graph = grouping.graph
    sharing = state_updates(graph)
    outputs = set(graph.outputs)
    reads = set()
    for op in rec.ops:
        for t in graph.ops[op].input_ids:
            if t in grouping.views_of_any and t not in outputs:
                # A free view's reader reads its root's bytes: the root must be resident then
                # (planner.remat.emit runs the view again after the root is recomputed).
                t = sharing.view_root(t)
            producer = graph.tensors[t].producer
            if producer is None or grouping.node_of[producer] != index:
                reads.add(values.of_tensor[t])
    rec.reads = tuple(sorted(reads))
    updates = [values.records[v].update_stage for v in rec.reads]
    rec.cap = min([len(grouping.groups) - 1, *(s for s in updates if s is not None)])
    for d in devices:
        # The least time of each run (in place or not): the model's bound must hold for the
        # replayed schedule, which prices a run sharing an input's storage at its in-place time.
        per_op = [costs.least_seconds(op, d) for op in rec.ops if d in costs.op_seconds[op]]
        if len(per_op) == len(rec.ops):
            rec.cost[d] = sum(math.floor(c / time_unit) for c in per_op)
    first = graph.ops[rec.ops[0]].name
    if rec.pinned is not None and rec.pinned not in rec.cost:
        raise InvalidInputError(
            f"op {first} writes a graph output or state, so it runs on the home device "
            f"{rec.pinned}, which cannot run it"
        )
    if not rec.cost:
        raise InvalidInputError(f"op {first} cannot run on any of {', '.join(devices)}")


def _in_place_options(grouping: _Grouping, rec: _NodeRecord, values: _Values, unit: int
                      ) -> tuple[tuple[int, tuple[tuple[int, int], ...]], ...]:
    """The outputs of a one-op node that may be written over an activation it reads, as
    planner.memory.replay writes them when the node is that activation's last reader (same
    bytes, read under the output's shape only, a scatter's other inputs elsewhere): each
    output's units with the (value, units) of the storages it may take, each storage offered to
    one output. With several devices none (views are bytes of their own there)."""
    graph = grouping.graph
    if len(rec.ops) != 1 or not grouping.views_share:
        return ()
    op = graph.ops[rec.ops[0]]
    sharing = state_updates(graph)
    roots = [sharing.view_root(t) for t in op.input_ids]
    offered: set[int] = set()
    found = []
    for y in op.output_ids:
        output = graph.tensors[y]
        vid = values.of_tensor.get(y)
        if vid is None or values.records[vid].kind != "activation":
            continue
        options = []
        for x in sharing.candidates.get(y, ()):
            root = sharing.view_root(x)
            value = values.of_tensor.get(root)
            if value is None or value in offered or values.records[value].kind != "activation":
                continue
            same = [k for k, r in enumerate(roots) if r == root]
            if graph.tensors[root].nbytes != output.nbytes or any(
                    graph.tensors[op.input_ids[k]].shape != output.shape for k in same) or (
                    op.op_type in SINGLE_INPUT_IN_PLACE_OPS and len(same) > 1):
                continue
            offered.add(value)
            options.append((value, buffer_bytes(output.nbytes, unit) // unit))
        if options:
            found.append((buffer_bytes(output.nbytes, unit) // unit, tuple(options)))
    return tuple(found)


@dataclass(frozen=True)
class _RecomputeUnits:
    """The `units` argument as node ids: units of two or more recomputable nodes."""

    unit_of: Mapping[int, int]  # node id -> unit
    members: tuple[tuple[int, ...], ...]  # unit -> node ids, ascending

    @classmethod
    def of(cls, units: Sequence[Sequence[int]], grouping: _Grouping,
           records: Sequence[_NodeRecord]) -> _RecomputeUnits:
        unit_of: dict[int, int] = {}
        members: list[tuple[int, ...]] = []
        for ops in units:
            node_ids = tuple(sorted({grouping.node_of[op] for op in ops}))
            if len(node_ids) > 1 and all(records[k].recomputable for k in node_ids):
                for k in node_ids:
                    unit_of[k] = len(members)
                members.append(node_ids)
        return cls(unit_of, tuple(members))

    def block(self, node: int) -> tuple[int, ...]:
        """The nodes recomputed together with `node` (itself alone outside a unit)."""
        return self.members[self.unit_of[node]] if node in self.unit_of else (node,)


def _recompute_stages(records: Sequence[_NodeRecord], values: _Values,
                      units: _RecomputeUnits, options: RematOptions, forward_end: int
                      ) -> list[tuple[int, ...]]:
    """Each node's recompute stages, last nodes first (a node's readers come later in the
    order). The nodes of a recompute unit share one set of stages: they are recomputed
    together. With a bounded just-in-time chain, level k allows stages where a reader may be
    recomputed at level k - 1."""
    n_stages = len(records)
    lo_floor = forward_end if options.window == "after_forward" else 0
    depth_limit = options.jit_depth if options.just_in_time else None
    levels = 1 if depth_limit is None else depth_limit + 1
    stages: list[tuple[int, ...]] = [()] * n_stages
    for _ in range(levels):
        previous = stages
        stages = [()] * n_stages
        done: set[int] = set()
        for index in range(n_stages - 1, -1, -1):
            if index in done or not records[index].recomputable:
                continue
            block = units.block(index)
            done.update(block)
            lo = max(max(block) + 1, lo_floor)
            hi = min(records[k].cap for k in block)
            if lo > hi:
                continue
            readers = {c for k in block for v in records[k].values
                       for c in values.records[v].consumers} - set(block)
            # Unbounded: readers' stages of this pass (later nodes are done); bounded: the
            # previous level's.
            source = stages if depth_limit is None else previous
            if options.just_in_time:
                allowed = set()
                for c in readers:
                    if lo <= c <= hi:
                        allowed.add(c)
                    allowed.update(x for x in source[c] if lo <= x <= hi)
            else:
                need_end = max((max((c, *source[c])) for c in readers), default=index)
                allowed = set(range(lo, min(hi, need_end) + 1))
            for k in block:
                stages[k] = tuple(sorted(allowed))
    return stages


def _value(graph: Graph, costs: CostTable, devices: tuple[str, ...], options: RematOptions,
           vid: int, record: _ValueRecord, nodes: Sequence[Node]) -> Value:
    """The value of `record`: its size, its last possible read (a reader's last recompute stage,
    not after its state is updated) and its copy cost between every two devices."""
    last = max((max((c, *nodes[c].recompute_stages)) for c in record.consumers), default=-1)
    if record.update_stage is not None:
        last = min(last, record.update_stage)
    copy_cost = {}
    for src in devices:
        for dst in devices:
            if src != dst:
                seconds = sum(costs.copy_seconds(src, dst, graph.tensors[t].nbytes)
                              for t in record.tensors)
                copy_cost[(src, dst)] = max(0, math.floor(seconds / options.time_unit))
    size = 0 if record.free_of_charge else sum(
        buffer_bytes(graph.tensors[t].nbytes, options.memory_unit) // options.memory_unit
        for t in record.tensors)
    return Value(
        id=vid, producer=record.producer, tensors=record.tensors, size=size,
        consumers=record.consumers, kind=record.kind, home=record.home, last_read=last,
        update_stage=record.update_stage, copy_cost=copy_cost,
    )


def _internal_peak(graph: Graph, members: Sequence[int], internal: set[int], unit: int) -> int:
    """Peak units of a group's internal tensors while its ops run in order (eager frees)."""
    position = {op: k for k, op in enumerate(members)}
    ranges = []
    for t in internal:
        born = position[graph.tensors[t].known_producer]
        reads = [position[c] for c in graph.tensors[t].consumers if c in position]
        units = buffer_bytes(graph.tensors[t].nbytes, unit) // unit
        ranges.append((born, max([born, *reads]), units))
    return max(live_curve(ranges, len(members)), default=0)
