"""Live bytes of an order being built, op by op: what running one more op would cost.

The list schedulers (planner.order.heuristics) pick among hundreds of ready ops at every step;
recomputing the memory model's lifetimes for each choice would be quadratic. `RunningBytes`
keeps the live bytes of the ops scheduled so far and answers, for any ready op, the bytes it
would allocate and free if it ran next, in time proportional to its inputs and outputs.

It follows the storage rules of planner.memory.replay, which stays the judge of every finished
order (planner.memory.liveness.lifetimes):

- constants and state are held for the whole step, data inputs until their last read, graph
  outputs to the end, everything else from its write to the last read of its storage;
- a view (planner.memory.sharing.view_source) sits in its source's storage;
- an elementwise op's output may be written over an input's storage (sharing.candidates) when
  this op is that storage's last reader, the bytes match and nothing in it must survive (a
  constant, a data input, a graph output); a state may be overwritten only by its own update
  chain (sharing.update_chains), whose values therefore cost nothing.

It is an estimate for ranking choices, not a second memory model: the replay's finer checks (a
chain that cannot finish in place, an op reading the same bytes under another shape) are left to
the replay, so an order's reported peak always comes from lifetimes().
"""

from __future__ import annotations

from dataclasses import dataclass

from planner.ir.graph import Graph
from planner.memory.sharing import state_updates
from planner.memory.zones import persistent_tensors


@dataclass(frozen=True)
class Effect:
    """What running one op next would do: bytes of new storage, bytes of storage whose last
    read it is, and which inputs' storage each output would be written over (None: its own)."""

    allocated: int
    freed: int
    owners: tuple[int | None, ...]

    @property
    def growth(self) -> int:
        return self.allocated - self.freed


class RunningBytes:
    """The live bytes after the ops run so far (`live`), the highest step so far (`peak`)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        sharing = state_updates(graph)
        self._view_source = sharing.view_source
        self._candidates = sharing.candidates
        self._chain_state = {value: state for state, chain in sharing.update_chains.items()
                             for value in chain}
        persistent = persistent_tensors(graph)
        tensors = graph.tensors
        # Every storage takes at least a byte: the arena gives every buffer an address.
        self._bytes = [max(t.nbytes, 1) for t in tensors]
        # Storage owner of every tensor present, and the reads of that storage still to come.
        self.owner: dict[int, int] = {}
        self.pending: dict[int, int] = {}
        # Storages never freed in the step, and storages nothing may be written over.
        self._kept: set[int] = set(persistent)
        self._sealed: set[int] = set(persistent)
        self.live = 0
        self.peak = 0
        unread = 0
        for t in tensors:
            if t.producer is not None:
                continue
            self.owner[t.id] = t.id
            self.pending[t.id] = len(t.consumers)
            self.live += self._bytes[t.id]
            self._sealed.add(t.id)  # constants, data inputs; state only via its chain
            if t.is_graph_output:
                self._kept.add(t.id)
            elif not t.consumers and t.id not in persistent:
                unread += self._bytes[t.id]
        self._unread_inputs = unread  # live at step 0 only

    def effect(self, op_id: int) -> Effect:
        """What running `op_id` next would do (see the module doc); changes nothing."""
        op = self.graph.ops[op_id]
        tensors = self.graph.tensors
        reads: dict[int, int] = {}
        for t in op.input_ids:
            s = self.owner[t]
            reads[s] = reads.get(s, 0) + 1
        after = {s: self.pending[s] - n for s, n in reads.items()}
        read_out = {s for s, left in after.items() if left == 0}
        allocated = 0
        owners: list[int | None] = []
        kept = set()
        for out in op.output_ids:
            tensor = tensors[out]
            owner = self._owner_for(out, read_out - set(owners))
            owners.append(owner)
            if owner is None:
                allocated += self._bytes[out]
            s = out if owner is None else owner
            after[s] = after.get(s, 0) + len(tensor.consumers)
            if tensor.is_graph_output:
                kept.add(s)
        # Storage read last here dies after this step, and so does an output nobody reads.
        freed = sum(self._bytes[s] for s, left in after.items()
                    if left == 0 and s not in self._kept and s not in kept)
        return Effect(allocated=allocated, freed=freed, owners=tuple(owners))

    def step_bytes(self, effect: Effect) -> int:
        """Live bytes in the step that runs an op with this effect."""
        return self.live + effect.allocated

    def run(self, op_id: int, effect: Effect | None = None) -> list[int]:
        """Account for running `op_id` next; returns the storages whose pending reads changed."""
        effect = effect or self.effect(op_id)
        op = self.graph.ops[op_id]
        tensors = self.graph.tensors
        self.peak = max(self.peak, self.step_bytes(effect))
        self.live += effect.growth - self._unread_inputs
        self._unread_inputs = 0
        touched = []
        for t in op.input_ids:
            s = self.owner[t]
            self.pending[s] -= 1
            touched.append(s)
        for out, owner in zip(op.output_ids, effect.owners, strict=True):
            tensor = tensors[out]
            s = out if owner is None else owner
            self.owner[out] = s
            self.pending[s] = self.pending.get(s, 0) + len(tensor.consumers)
            if tensor.is_graph_output:
                self._kept.add(s)
                self._sealed.add(s)
            touched.append(s)
        return touched

    def _owner_for(self, out: int, read_out: set[int]) -> int | None:
        """The storage `out` would sit in if written now, or None for storage of its own.
        `read_out`: the storages this op reads last (and that no other output took)."""
        tensors = self.graph.tensors
        source = self._view_source.get(out)
        if source is not None:
            return self.owner[source]
        state = self._chain_state.get(out)
        options = []
        for x in self._candidates.get(out, ()):
            s = self.owner[x]
            if tensors[s].nbytes != tensors[out].nbytes:
                continue
            if s not in read_out:
                continue
            if s == state:
                return s  # a state's own update chain comes first
            if s not in self._sealed:
                options.append(s)
        return options[0] if options else None
