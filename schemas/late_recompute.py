"""Compute a cheap elementwise value again for readers far away, instead of holding it: where a
value is read in the forward and again in the backward, and what it is computed from lives until
then anyway, the backward's readers get a copy of the elementwise nodes that make it, placed
right before them.

Why: GPT-2-small's GELU (`0.5 * x * (1 + tanh(...))`, written out in the model) has its
`1 + tanh(...)` read by the forward's product and again by the backward, which also reads the
`tanh(...)` itself: the exported step holds both from the forward to the backward, 6 MB each
in each of its 12 blocks. With the sum computed again from the held tanh, the keep-everything
order's peak drops from 2,286.8 to 2,217.5 MB (-3.0%), and so does the floor no order can beat.
The same holds for a value a weight gradient reads through a view: GPT-2's GELU output
(`gelu(x)`, its input x held for the GELU's own backward) and a LayerNorm's output (`xhat * w +
b`, its centred input and scale held for the LayerNorm's backward), read by the next matrix
product in the forward and by that product's weight gradient in the backward; a BatchNorm's
ReLU output the same way. Made again from what is held, they take 9-23% off the keep-everything
arena of GPT-2-tiny, BERT-small, UNet-small, ResNet-18-narrow, UNet-Adam and ResNet-CIFAR and
4-6% off four more models, for 0.4-5.4% more predicted step time, measured 0.98-1.04x
(bench/memory/late_recompute.md). PyTorch's compiled partitioner makes the same choice: it
recomputes pointwise ops whose inputs are saved anyway. This is no rematerialization decision:
the copies free bytes in the graph's own order (another order may free their inputs earlier:
with the max-pool index idiom kept, cnn_bn's best quick order peaks higher; on every default
graph of the bench the keep-everything arena fell or stayed) and cost a few passes over the
value, so the graph the planner and the runtime see has them; recomputation that trades more
time for memory stays the remat search's choice.

Matched: a standard-domain node of ELEMENTWISE or a view (schemas.graph_rewrite.VIEW_OP_TYPES)
with one output of static shape of at least MIN_BYTES, not a graph output, whose readers in graph
order leave a gap of more than GAP_SHARE of the nodes (and MIN_GAP) after some reader (the late
readers are those after the first such gap). Its chain (_chain) is it and, for each input not
held at the first late reader anyway (an initializer, or a value some node reads there or
later), the chain of that input's node: at most MAX_CHAIN nodes besides views (which cost
nothing), all of ELEMENTWISE or views, none already copied. The copies run right before the
first late reader, reading only values held there anyway; their results are bit-identical to
the originals.
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


def recompute_for_late_readers(data: bytes) -> bytes:
    """`data` (a serialized model) with copies of every matched chain (the module doc) before its
    late readers, which read the copy; the bytes unchanged when nothing matches, so the digest
    of a graph without one stays the same."""
    model = onnx.ModelProto()
    model.ParseFromString(data)
    graph = model.graph
    index = GraphIndex(graph)
    gap = max(GAP_SHARE * len(graph.node), MIN_GAP)
    # Outputs of copied nodes: a chain through one is not copied again (its late readers read
    # the first copy, and a second copy would hold the original up to them again).
    matched: set[str] = set()
    copies: dict[int, list[onnx.NodeProto]] = {}  # first late reader -> the copies before it
    renamed: dict[int, dict[str, str]] = {}  # late reader -> {original value: its copy}
    for k, node in enumerate(graph.node):
        if not _cheap(node):
            continue
        out = node.output[0]
        size = index.nbytes(out)
        if size is None or size < MIN_BYTES or out in index.outputs:
            continue
        late = _late_readers(index.readers(out), gap)
        chain = _chain(index, k, late[0], matched) if late else None
        if chain is None:
            continue
        names: dict[str, str] = {}
        for j in chain:
            copy = onnx.NodeProto()
            copy.CopyFrom(graph.node[j])
            copy.name = f"{copy.name or copy.output[0]}/LateRecompute"
            for i, name in enumerate(copy.input):
                copy.input[i] = names.get(name, name)
            names[copy.output[0]] = copy.output[0] = f"{copy.output[0]}/late"
            matched.add(graph.node[j].output[0])
            copies.setdefault(late[0], []).append(copy)
        for reader in late:
            renamed.setdefault(reader, {})[out] = names[out]
    if not copies:
        return data
    replaced: dict[int, tuple[onnx.NodeProto, ...]] = {}
    for reader, by_name in renamed.items():
        node = onnx.NodeProto()
        node.CopyFrom(graph.node[reader])
        for i, name in enumerate(node.input):
            node.input[i] = by_name.get(name, name)
        replaced[reader] = (*copies.get(reader, ()), node)
    return splice(model, replaced, ())


def _cheap(node: onnx.NodeProto) -> bool:
    return node.op_type in CHAIN_OPS and node.domain in DEFAULT_DOMAINS and \
        len(node.output) == 1


def _late_readers(readers: list[int], gap: float) -> list[int]:
    """The readers after the first gap of more than `gap` nodes between two reads."""
    for i in range(1, len(readers)):
        if readers[i] - readers[i - 1] > gap:
            return readers[i:]
    return []


def _chain(index: GraphIndex, node: int, position: int, matched: set[str]) -> list[int] | None:
    """The nodes, in graph order, that compute `node`'s output again at `position` from values
    held there anyway (_alive_at); None when that takes a node not cheap, one already copied, or
    more than MAX_CHAIN nodes."""
    chain: set[int] = set()
    passes = 0  # the chain's nodes that are no views
    pending = [node]
    while pending:
        k = pending.pop()
        if k in chain:
            continue
        chain.add(k)
        passes += index.graph.node[k].op_type not in VIEW_OP_TYPES
        if passes > MAX_CHAIN:
            return None
        for name in index.graph.node[k].input:
            if not name or _alive_at(index, name, position):
                continue
            producer = index.producer.get(name)
            if name in matched or producer is None or not _cheap(index.graph.node[producer]):
                return None
            pending.append(producer)
    return sorted(chain)


def _alive_at(index: GraphIndex, name: str, position: int) -> bool:
    """Whether `name` is held at `position` anyway: an initializer (a constant), or read by a node
    at or after `position` (a graph input too: a batch's data may be freed after its last read,
    and a state's last read is its update at the end of the step)."""
    readers = index.readers(name)
    return name in index.initializers or bool(readers) and readers[-1] >= position
