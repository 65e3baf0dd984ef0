"""Compute a cheap elementwise value again for readers far away, instead of holding it: where a
value is read in the forward and again in the backward, and what it is computed from lives until
then anyway, the backward's readers get a copy of the elementwise nodes that make it, placed
right before them.

Why: GPT-2-small's GELU (`0.5 * x * (1 + tanh(c * (x + 0.044715 * x^3)))`, written out in the
model) is read in the forward and again in the backward: its output by the next matrix product
and by that product's weight gradient, its sum, its tanh and its `0.5 * x` by the GELU's own
backward. The exported step holds all four from the forward to the backward, 6 MB each in each of
its 12 blocks, where PyTorch's GELU backward holds only x; with this rewrite the whole GELU is
made again from x, which the backward reads anyway. The same holds for LayerNorm outputs
(`xhat * w + b`, from the centred input and scale held for the LayerNorm's backward) and
BatchNorm(-ReLU) outputs read again by a weight gradient through a view, for attention
probabilities after dropout (from the probabilities and the mask, held for the softmax's
backward), and for dropout's float masks (from their boolean, a quarter of the bytes, held in
their place, as PyTorch's dropout saves its mask). Made again late, they take 4-23% off the
keep-everything arena of 10 of the 12 bench models (GPT-2-small 2,298.8 -> 1,895.1 MB, -17.6%;
BERT-small -13.1%), for 0.7-5.4% more predicted step time (1.1% on GPT-2-small), measured
0.95-1.04x on 11 models and 1.10x on MobileNetV2 (bench/memory/late_recompute.md). PyTorch's
compiled partitioner makes the same choice: it recomputes pointwise ops whose inputs are saved
anyway. The copies free bytes in the graph's own order (another order may free their inputs
earlier: with the max-pool index idiom kept, cnn_bn's best quick order peaks higher; on every
default graph of the bench the keep-everything arena fell or stayed) and cost a few passes over
each value, so they are a graph the planner may choose: a budget that holds the keep-everything
plan of the graph without them gets that plan (planner.pipeline); recomputation that trades more
time for memory stays the remat search's choice.

Matched: a standard-domain node of ELEMENTWISE or a view (schemas.graph_rewrite.VIEW_OP_TYPES)
with one output of static shape of at least MIN_BYTES, not a graph output, whose readers in graph
order leave a gap of more than GAP_SHARE of the nodes (and MIN_GAP) after some reader (the late
readers are those after the first such gap). Candidates are taken by their first late reader,
earliest first. A candidate's chain (_chain) is it and, for each input not held at the copies'
place anyway (an initializer, a value some node or copy reads there or later, or a copy made
earlier and read there or later) nor small (at most 1/SMALLER of the value's bytes, then held up
to the copies), the chain of that input's node: at most MAX_CHAIN nodes besides views (which
cost nothing), all of ELEMENTWISE or views, none already copied. The copies' place is the first
late reader or, when what they need is no longer held there, the latest of the NEAR nodes
before it where it is. The chain then grows (_grown) into the cheap nodes that make its held
inputs while it stays within MAX_CHAIN, and every reader at or after the copies' place of a
value the chain makes reads the copy, so the originals are freed after the forward. The copies'
results are bit-identical to the originals.
"""

from __future__ import annotations

import onnx

from schemas.graph_rewrite import DEFAULT_DOMAINS, VIEW_OP_TYPES, GraphIndex, splice

# One pass over their inputs, no reduction, no state: computing them again costs a read and a
# write of the value.
ELEMENTWISE = frozenset({
    "Abs", "Add", "Cast", "Div", "Erf", "Exp", "Log", "Mul", "Neg", "Pow", "Reciprocal", "Relu",
    "Sigmoid", "Sqrt", "Sub", "Tanh",
})
# What a chain may hold: elementwise ops and views (no bytes of their own, no work).
CHAIN_OPS = ELEMENTWISE | VIEW_OP_TYPES
# Smaller values are not worth a node; longer chains are not cheap any more.
MIN_BYTES = 4096
MAX_CHAIN = 8
# A gap between two reads of more than this share of the graph's nodes separates the forward's
# readers from the backward's (GPT-2-small's sums: read at nodes 630-1,055, again at 1,498-2,738
# of 4,245).
GAP_SHARE = 0.1
# ... and of more than this many nodes in any graph (in a small one, a tenth is a few nodes).
MIN_GAP = 8
# The copies may run up to this many nodes (and half the gap) before the first late reader, where
# what they are made from is still held: GPT-2-small's attention probabilities after dropout are
# read by the backward's value-gradient product 8-11 nodes after the softmax backward last reads
# the probabilities and the dropout mask.
NEAR = 16
# A chain may also read a value not held anyway that has at most 1/SMALLER of the bytes of the
# value it makes, which is then held in its place: a dropout's boolean mask (1 byte an element)
# instead of the float mask made from it (4), as PyTorch's dropout saves its mask.
SMALLER = 4


def recompute_for_late_readers(data: bytes) -> bytes:
    """`data` (a serialized model) with copies of every matched chain (the module doc) before its
    late readers, which read the copy; the bytes unchanged when nothing matches, so the digest
    of a graph without one stays the same."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    index = GraphIndex(graph)
    gap = max(GAP_SHARE * len(graph.node), MIN_GAP)
    candidates = []  # (first late reader, node)
    for k, node in enumerate(graph.node):
        if not _cheap(node):
            continue
        out = node.output[0]
        size = index.nbytes(out)
        if size is None or size < MIN_BYTES or out in index.outputs:
            continue
        late = _late_readers(index.readers(out), gap)
        if late:
            candidates.append((late[0], k))
    reads = _Reads(index)
    # Outputs of copied nodes: a chain through one is not copied again (its late readers read
    # the first copy, and a second copy would hold the original up to them again).
    matched: set[str] = set()
    copies: dict[int, list[onnx.NodeProto]] = {}  # position -> the copies made right before it
    renamed: dict[int, dict[str, str]] = {}  # late reader -> {original value: its copy}
    near = min(NEAR, gap / 2)
    for first, k in sorted(candidates):
        if graph.node[k].output[0] in matched:
            continue  # made again by an earlier chain, which its late readers read already
        # The latest place, from the first late reader back to `near` nodes before it, where the
        # value can be made from what is held there.
        placed = next(((p, c) for p in range(first, int(first - near) - 1, -1)
                       if (c := _chain(index, reads, k, p, matched)) is not None), None)
        if placed is None:
            continue
        position, chain = placed
        chain = _grown(index, reads, chain, position, matched)
        names: dict[str, str] = {}
        for j in chain:
            copy = onnx.NodeProto()
            copy.CopyFrom(graph.node[j])
            copy.name = f"{copy.name or copy.output[0]}/LateRecompute"
            for i, name in enumerate(copy.input):
                if name in names:
                    copy.input[i] = names[name]
                elif name:
                    copy.input[i] = reads.held_form(name, position)
                    reads.copy_reads(copy.input[i], position)
            names[copy.output[0]] = copy.output[0] = f"{copy.output[0]}/late"
            copies.setdefault(position, []).append(copy)
        for original, copied in names.items():
            matched.add(original)
            for reader in reads.move_late_readers(original, copied, position):
                renamed.setdefault(reader, {})[original] = copied
    if not copies:
        return data
    replaced: dict[int, tuple[onnx.NodeProto, ...]] = {}
    for k in copies.keys() | renamed.keys():
        node = onnx.NodeProto()
        node.CopyFrom(graph.node[k])
        by_name = renamed.get(k, {})
        for i, name in enumerate(node.input):
            node.input[i] = by_name.get(name, name)
        replaced[k] = (*copies.get(k, ()), node)
    return splice(model, replaced, ())


class _Reads:
    """Where each value is last read as the rewrite goes: a late reader moved to a copy no longer
    holds the original, and a copy holds its inputs up to its place."""

    def __init__(self, index: GraphIndex):
        self._index = index
        self._moved: dict[str, set[int]] = {}  # value -> its readers that read a copy now
        self._by_copies: dict[str, int] = {}  # value -> the last place a copy reads it
        # value -> (its copy, where the copy is made, the copy's last reader)
        self._copies: dict[str, tuple[str, int, int]] = {}

    def last(self, name: str) -> int:
        moved = self._moved.get(name, set())
        kept = [k for k in self._index.readers(name) if k not in moved]
        return max(kept + [self._by_copies.get(name, -1)])

    def held_form(self, name: str, position: int) -> str:
        """What a copy at `position` reads for `name`: its own copy when the original is no
        longer held there but the copy is (the dropout mask made again for the softmax's
        backward, read again by the value gradient's product right after)."""
        if self.last(name) >= position or name not in self._copies:
            return name
        copy, made, last = self._copies[name]
        return copy if made <= position <= max(last, self._by_copies.get(copy, -1)) else name

    def copy_reads(self, name: str, position: int) -> None:
        self._by_copies[name] = max(self._by_copies.get(name, -1), position)

    def move_late_readers(self, name: str, copy: str, position: int) -> list[int]:
        """`name`'s readers at or after `position`, which from now on read `copy`, made there."""
        late = [k for k in self._index.readers(name) if k >= position]
        self._moved.setdefault(name, set()).update(late)
        self._copies[name] = (copy, position, max(late, default=position))
        return late


def _cheap(node: onnx.NodeProto) -> bool:
    return node.op_type in CHAIN_OPS and node.domain in DEFAULT_DOMAINS and \
        len(node.output) == 1


def _late_readers(readers: list[int], gap: float) -> list[int]:
    """The readers after the first gap of more than `gap` nodes between two reads."""
    for i in range(1, len(readers)):
        if readers[i] - readers[i - 1] > gap:
            return readers[i:]
    return []


def _chain(index: GraphIndex, reads: _Reads, node: int, position: int, matched: set[str]
           ) -> list[int] | None:
    """The nodes, in graph order, that compute `node`'s output again at `position` from values
    held there anyway (_alive_at); None when that takes a node not cheap, one already copied, or
    more than MAX_CHAIN nodes."""
    chain: set[int] = set()
    passes = 0  # the chain's nodes that are no views
    pending = [node]
    small = (index.nbytes(index.graph.node[node].output[0]) or 0) // SMALLER
    while pending:
        k = pending.pop()
        if k in chain:
            continue
        chain.add(k)
        passes += index.graph.node[k].op_type not in VIEW_OP_TYPES
        if passes > MAX_CHAIN:
            return None
        for name in index.graph.node[k].input:
            if not name or _alive_at(index, reads, name, position):
                continue
            if name not in matched and (index.nbytes(name) or small + 1) <= small:
                continue  # held up to the copy instead: it costs a fraction of the value
            producer = index.producer.get(name)
            if name in matched or producer is None or not _cheap(index.graph.node[producer]):
                return None
            pending.append(producer)
    return sorted(chain)


def _grown(index: GraphIndex, reads: _Reads, chain: list[int], position: int, matched: set[str]
           ) -> list[int]:
    """`chain` with the chains of its cheap inputs added while it stays within MAX_CHAIN: an input
    held at `position` only for late readers of its own is then made again too, and those
    readers read its copy, so the original is freed after the forward (GPT-2's GELU: its output
    is made from `0.5 * x` and `1 + tanh(...)`, both held for the GELU's backward, and with them
    the whole GELU is made again from x, as PyTorch's GELU backward does)."""
    nodes = set(chain)
    while (more := _growth(index, reads, nodes, position, matched)) is not None:
        nodes |= more
    return sorted(nodes)


def _growth(index: GraphIndex, reads: _Reads, nodes: set[int], position: int,
            matched: set[str]) -> set[int] | None:
    """The chain of the first input of `nodes` made by a cheap node that fits within MAX_CHAIN
    with them, or None."""
    made = {out for k in nodes for out in index.graph.node[k].output}
    for k in sorted(nodes):
        for name in index.graph.node[k].input:
            producer = index.producer.get(name)
            if name in made or name in matched or producer is None or \
                    not _cheap(index.graph.node[producer]) or \
                    (index.nbytes(name) or 0) < MIN_BYTES:
                continue  # a small one (a BatchNorm's scale) frees too little for its node
            more = _chain(index, reads, producer, position, matched)
            if more is not None and _passes(index, nodes | set(more)) <= MAX_CHAIN:
                return set(more)
    return None


def _passes(index: GraphIndex, nodes: set[int]) -> int:
    """Passes over a value that computing `nodes` takes (views take none)."""
    return sum(index.graph.node[k].op_type not in VIEW_OP_TYPES for k in nodes)


def _alive_at(index: GraphIndex, reads: _Reads, name: str, position: int) -> bool:
    """Whether `name` is held at `position` anyway: an initializer (a constant), or read by a node
    at or after `position` (a graph input too: a batch's data may be freed after its last read,
    and a state's last read is its update at the end of the step)."""
    return name in index.initializers or reads.last(name) >= position or \
        reads.held_form(name, position) != name
