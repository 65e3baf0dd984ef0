"""Small hand-built ONNX models for tests of the loader and the role analysis.

`tiny_momentum_step()` is a complete training step written out by hand (linear model, MSE loss,
SGD with momentum), so the expected role of every tensor is known exactly.
"""

from __future__ import annotations

from onnx import ModelProto, TensorProto, helper

F = TensorProto.FLOAT


def make_model(nodes, inputs, outputs, initializers=(), opset=17, ir_version=10) -> ModelProto:
    graph = helper.make_graph(list(nodes), "test", list(inputs), list(outputs), list(initializers))
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )


def value(name: str, shape, elem_type=F):
    return helper.make_tensor_value_info(name, elem_type, shape)


def scalar(name: str, x: float):
    return helper.make_tensor(name, F, [], [x])


def tiny_momentum_step(batch="batch", late_reader_of_w: bool = False) -> ModelProto:
    """loss = mean((x@W - t)^2); m' = 0.9 m + dL/dW; W' = W - 0.1 m'.

    `late_reader_of_w` appends an op reading the old W after the update in file order (its
    result `W_probe` is an extra output), which blocks the in-place update in that order.
    """
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["y"]),
        helper.make_node("Sub", ["y", "t"], ["d"]),
        helper.make_node("Mul", ["d", "d"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["loss"], keepdims=0),
        helper.make_node("Mul", ["d", "two_over_n"], ["dy"]),
        helper.make_node("Transpose", ["x"], ["xT"]),
        helper.make_node("MatMul", ["xT", "dy"], ["gW"]),
        helper.make_node("Mul", ["m", "mom"], ["mm"]),
        helper.make_node("Add", ["mm", "gW"], ["m_new"]),
        helper.make_node("Mul", ["m_new", "lr"], ["delta"]),
        helper.make_node("Sub", ["W", "delta"], ["W_new"]),
    ]
    outputs = [value("loss", []), value("W_new", [3, 4]), value("m_new", [3, 4])]
    if late_reader_of_w:
        nodes.append(helper.make_node("ReduceSum", ["W"], ["W_probe"], keepdims=0))
        outputs.append(value("W_probe", []))
    return make_model(
        nodes,
        [value("x", [batch, 3]), value("t", [batch, 4]), value("W", [3, 4]), value("m", [3, 4])],
        outputs,
        [scalar("two_over_n", 0.25), scalar("mom", 0.9), scalar("lr", 0.1)],
    )


def relu_chain(n: int = 2) -> ModelProto:
    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    return make_model(nodes, [value("t0", [2, 2])], [value(f"t{n}", [2, 2])])


def random_dag(seed: int, n_ops: int = 7, rows=(1, 9)) -> ModelProto:
    """A random DAG of Relu / Concat / Add ops over [k, 4] float tensors of varied sizes.

    Tensors of many sizes and fan-outs make ordering matter, and small graphs can be solved by
    enumerating every topological order.
    """
    import random

    rng = random.Random(seed)
    sources = rng.randint(1, 2)
    shapes = {f"in{i}": rng.randint(*rows) for i in range(sources)}
    inputs = [value(name, [k, 4]) for name, k in shapes.items()]
    nodes, names = [], list(shapes)
    for i in range(n_ops):
        out = f"v{i}"
        kind = rng.choice(["Relu", "Concat", "Add"])
        if kind == "Concat":
            picked = rng.sample(names, min(len(names), rng.randint(1, 3)))
            nodes.append(helper.make_node("Concat", picked, [out], axis=0))
            shapes[out] = sum(shapes[p] for p in picked)
        elif kind == "Add" and any(
            shapes[a] == shapes[b] for a in names for b in names if a != b
        ):
            a, b = rng.choice(
                [(a, b) for a in names for b in names if a != b and shapes[a] == shapes[b]]
            )
            nodes.append(helper.make_node("Add", [a, b], [out]))
            shapes[out] = shapes[a]
        else:
            picked = rng.choice(names)
            nodes.append(helper.make_node("Relu", [picked], [out]))
            shapes[out] = shapes[picked]
        names.append(out)
    consumed = {i for n in nodes for i in n.input}
    outputs = [value(n, [shapes[n], 4]) for n in names if n not in consumed]
    return make_model(nodes, inputs, outputs)


def calling_local_functions(*names: str) -> ModelProto:
    """One node calls model-local function names[0], which calls names[1], ..., and the last
    calls names[0] again: recursion (f -> f, or f -> g -> f) that no inliner can unfold."""
    functions = [
        helper.make_function("local", name, ["x"], ["y"],
                             [helper.make_node(names[(i + 1) % len(names)], ["x"], ["y"],
                                               domain="local")],
                             [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
        for i, name in enumerate(names)
    ]
    model = make_model([helper.make_node(names[0], ["x"], ["y"], domain="local")],
                       [value("x", [2])], [value("y", [2])])
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.extend(functions)
    return model


def negative_dim_input() -> ModelProto:
    """A graph input declared with dimension -3: no tensor has a negative size."""
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [value("x", [-3, 2])],
                      [value("y", [-3, 2])])


def no_nodes() -> ModelProto:
    """A graph whose output is its input: it computes nothing, so there is no step to plan."""
    return make_model([], [value("x", [2])], [value("x", [2])])
