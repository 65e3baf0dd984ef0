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
- **home**: one designated device holds sources, constants, state and graph outputs; ops that
  write a graph output or an in-place state update are pinned there and run once.
- **recomputation**: only ops of the forward phase (everything the order runs before the last
  forward-region op, except optimizer ops, ops writing outputs or state, and nondeterministic ops
  such as Dropout) whose inputs come from such ops or sources may be recomputed, and only in the
  stages `recompute_stages` allows (see RematOptions). A recomputation reading a state that is
  updated in place may not run after the update (it would read the new value).

Memory is counted in `memory_unit` bytes (each tensor rounded up: conservative), time in
`time_unit` seconds (each op rounded to the nearest unit).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from planner.errors import InvalidInputError
from planner.ir.graph import Graph, Region
from planner.memory.sharing import state_updates
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

    def to_units(self, nbytes: int) -> int:
        return -(-nbytes // self.memory_unit)

    def node_of_op(self) -> dict[int, int]:
        return {op: n.id for n in self.nodes for op in n.ops}

    def may_run(self, node: int, device: str, stage: int) -> bool:
        """Whether node may be (re)computed on device in stage (an R variable exists)."""
        n = self.nodes[node]
        if not n.runs_on(device):
            return False
        if stage == node:
            return True
        sets = self.__dict__.get("_recompute_sets")
        if sets is None:
            sets = [frozenset(x.recompute_stages) for x in self.nodes]
            object.__setattr__(self, "_recompute_sets", sets)
        return stage in sets[node]

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
    updates = state_updates(graph)
    outputs = set(graph.outputs)
    recomputable: set[int] = set()
    for op_id in order:
        op = graph.ops[op_id]
        if (
            position[op_id] >= end
            or op.region is Region.OPTIMIZER
            or op.op_type in NONDETERMINISTIC_OPS
            or any(t in outputs or t in updates.in_place for t in op.output_ids)
        ):
            continue
        producers = [graph.tensors[t].producer for t in op.input_ids]
        if all(p is None or p in recomputable for p in producers):
            recomputable.add(op_id)
    return recomputable, end


def in_place_aliases(graph: Graph, order: Sequence[int]) -> dict[int, int]:
    """Updated output -> state input for the in-place updates `order` allows (as lifetimes)."""
    position = {op: k for k, op in enumerate(order)}
    updates = state_updates(graph)
    return {
        new: state
        for new, state in updates.in_place.items()
        if all(position[r] <= position[graph.tensors[new].producer]
               for r in graph.tensors[state].consumers)
    }


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
    groups = [list(g) for g in (groups if groups is not None else default_groups(order))]
    recomputable_ops, forward_end_pos = forward_phase(graph, order, options)
    if recomputable is not None:
        recomputable_ops = set(recomputable) if options.recompute != "none" else set()
    alias = in_place_aliases(graph, order)
    updates = state_updates(graph)
    unit = options.memory_unit

    def size_of(tensors) -> int:
        return sum(-(-graph.tensors[t].nbytes // unit) for t in tensors)

    node_of: dict[int, int] = {}
    for index, members in enumerate(groups):
        for op in members:
            node_of[op] = index
    if sorted(node_of) != list(range(len(graph.ops))):
        raise ValueError("groups must list every op exactly once")
    n_stages = len(groups)
    outputs = set(graph.outputs)
    position = {op: k for k, op in enumerate(order)}
    forward_end = 0
    for index, members in enumerate(groups):
        if any(position[op] < forward_end_pos for op in members):
            forward_end = index + 1

    def consumer_nodes(t: int) -> tuple[int, ...]:
        return tuple(sorted({node_of[c] for c in graph.tensors[t].consumers}))

    values: list[dict] = []
    value_of_tensor: dict[int, int] = {}
    persistent = updates.persistent | {t.id for t in graph.tensors if t.is_initializer}
    update_stage_of = {state: node_of[graph.tensors[new].producer] for new, state in alias.items()}
    for t in graph.tensors:
        if t.producer is not None:
            continue
        kind = "persistent" if (t.id in persistent or t.is_graph_output) else "input"
        value_of_tensor[t.id] = len(values)
        values.append(dict(producer=None, tensors=(t.id,), consumers=consumer_nodes(t.id),
                           kind=kind, home=home, update_stage=update_stage_of.get(t.id),
                           free_of_charge=False))

    node_records = []
    for index, members in enumerate(groups):
        member_set = set(members)
        exported: dict[tuple, list[int]] = {}
        internal: list[int] = []
        for op in members:
            for t in graph.ops[op].output_ids:
                readers = consumer_nodes(t)
                outside = tuple(c for c in readers if c != index)
                if t in alias:  # written over its state's storage: no bytes of its own
                    exported.setdefault(("alias", outside), []).append(t)
                elif t in outputs:
                    exported.setdefault(("output", outside), []).append(t)
                elif outside:
                    exported.setdefault(("activation", outside), []).append(t)
                else:
                    internal.append(t)
        produced = []
        for (kind, outside), tensors in sorted(exported.items(), key=lambda kv: kv[1][0]):
            for t in tensors:
                value_of_tensor[t] = len(values)
            produced.append(len(values))
            values.append(dict(producer=index, tensors=tuple(tensors), consumers=outside,
                               kind="output" if kind == "alias" else kind,
                               home=home if kind in ("output", "alias") else None,
                               update_stage=None, free_of_charge=kind == "alias"))
        workspace = _internal_peak(graph, members, set(internal), unit)
        pinned = home if any(t in outputs or t in alias or t in updates.in_place
                             for op in members for t in graph.ops[op].output_ids) else None
        node_records.append(dict(
            ops=tuple(members), values=tuple(produced), workspace=workspace, pinned=pinned,
            recomputable=pinned is None and all(op in recomputable_ops for op in members),
            member_set=member_set,
        ))

    for index, rec in enumerate(node_records):
        reads = set()
        for op in rec["ops"]:
            for t in graph.ops[op].input_ids:
                producer = graph.tensors[t].producer
                if producer is not None and node_of[producer] == index:
                    continue
                reads.add(value_of_tensor[t])
        rec["reads"] = tuple(sorted(reads))
        cap = n_stages - 1
        for v in rec["reads"]:
            stage = values[v]["update_stage"]
            if stage is not None:
                cap = min(cap, stage)
        rec["cap"] = cap
        cost: dict[str, int] = {}
        for d in devices:
            per_op = [costs.op_seconds[op].get(d) for op in rec["ops"]]
            if all(c is not None for c in per_op):
                cost[d] = sum(round(c / options.time_unit) for c in per_op)
        if rec["pinned"] is not None and rec["pinned"] not in cost:
            raise InvalidInputError(
                f"op {graph.ops[rec['ops'][0]].name} writes a graph output or state, so it runs "
                f"on the home device {home}, which cannot run it"
            )
        if not cost:
            raise InvalidInputError(
                f"op {graph.ops[rec['ops'][0]].name} cannot run on any of {', '.join(devices)}"
            )
        rec["cost"] = cost

    # Recompute stages, last nodes first (a node's readers come later in the order). The nodes
    # of a recompute unit share one set of stages: they are recomputed together.
    unit_of: dict[int, int] = {}
    unit_members: list[list[int]] = []
    for members in units or ():
        node_ids = sorted({node_of[op] for op in members})
        if len(node_ids) > 1 and all(node_records[k]["recomputable"] for k in node_ids):
            for k in node_ids:
                unit_of[k] = len(unit_members)
            unit_members.append(node_ids)
    lo_floor = forward_end if options.window == "after_forward" else 0
    depth_limit = options.jit_depth if options.just_in_time else None
    levels = 1 if depth_limit is None else depth_limit + 1
    recompute_stages: list[tuple[int, ...]] = [()] * n_stages
    for _ in range(levels):
        previous = recompute_stages
        recompute_stages = [()] * n_stages
        done: set[int] = set()
        for index in range(n_stages - 1, -1, -1):
            if index in done or not node_records[index]["recomputable"]:
                continue
            block = unit_members[unit_of[index]] if index in unit_of else [index]
            done.update(block)
            inside = set(block)
            lo = max(max(block) + 1, lo_floor)
            hi = min(node_records[k]["cap"] for k in block)
            if lo > hi:
                continue
            readers = {c for k in block for v in node_records[k]["values"]
                       for c in values[v]["consumers"]} - inside
            # Unbounded: readers' stages of this pass (later nodes are done); bounded: the
            # previous level's.
            source = recompute_stages if depth_limit is None else previous
            if options.just_in_time:
                stages = set()
                for c in readers:
                    if lo <= c <= hi:
                        stages.add(c)
                    stages.update(x for x in source[c] if lo <= x <= hi)
            else:
                need_end = max((max((c, *source[c])) for c in readers), default=index)
                stages = set(range(lo, min(hi, need_end) + 1))
            for k in block:
                recompute_stages[k] = tuple(sorted(stages))

    nodes = tuple(
        Node(id=index, ops=rec["ops"], values=rec["values"], reads=rec["reads"],
             cost=rec["cost"], workspace=rec["workspace"], recomputable=rec["recomputable"]
             and bool(recompute_stages[index]), pinned=rec["pinned"],
             recompute_stages=recompute_stages[index], unit=unit_of.get(index))
        for index, rec in enumerate(node_records)
    )
    value_objs = []
    for vid, v in enumerate(values):
        last = max((max((c, *nodes[c].recompute_stages)) for c in v["consumers"]),
                   default=-1)
        if v["update_stage"] is not None:
            last = min(last, v["update_stage"])
        tensors = v["tensors"]
        copy_cost = {}
        for src in devices:
            for dst in devices:
                if src != dst:
                    seconds = sum(costs.copy_seconds(src, dst, graph.tensors[t].nbytes)
                                  for t in tensors)
                    copy_cost[(src, dst)] = max(0, round(seconds / options.time_unit))
        value_objs.append(Value(
            id=vid, producer=v["producer"], tensors=tensors,
            size=0 if v["free_of_charge"] else size_of(tensors),
            consumers=v["consumers"], kind=v["kind"], home=v["home"], last_read=last,
            update_stage=v["update_stage"], copy_cost=copy_cost,
        ))
    base = {d: 0 for d in devices}
    for v in value_objs:
        if v.kind == "persistent":
            base[home] += v.size
    return RematProblem(
        name=graph.name, graph=graph, devices=devices, home=home, nodes=nodes,
        values=tuple(value_objs), base=base, memory_unit=unit, time_unit=options.time_unit,
        forward_end=forward_end, options=options, reductions=tuple(reductions),
        units=tuple(tuple(u) for u in unit_members),
    )


def _internal_peak(graph: Graph, members: Sequence[int], internal: set[int], unit: int) -> int:
    """Peak units of a group's internal tensors while its ops run in order (eager frees)."""
    if not internal:
        return 0
    last_use: dict[int, int] = {}
    for k, op in enumerate(members):
        for t in graph.ops[op].input_ids:
            if t in internal:
                last_use[t] = k
    peak = live = 0
    born: dict[int, list[int]] = {}
    for t in internal:
        producer = members.index(graph.tensors[t].producer)
        born.setdefault(producer, []).append(t)
    dying: dict[int, list[int]] = {}
    for t in internal:
        end = max(last_use.get(t, 0), members.index(graph.tensors[t].producer))
        dying.setdefault(end, []).append(t)
    for k in range(len(members)):
        live += sum(-(-graph.tensors[t].nbytes // unit) for t in born.get(k, []))
        peak = max(peak, live)
        live -= sum(-(-graph.tensors[t].nbytes // unit) for t in dying.get(k, []))
    return peak

