"""Every op type the planner may run in place, and every view op, run by ONNX Runtime with the
output bound on the bytes of the input it shares (issue 13).

- In place (planner.ir.aliasing.IN_PLACE_OPS): for each op type a one-node model on
  realistic random float32 inputs runs with the output bound on input k's memory; the bytes
  there afterwards must equal a normal run's output bit for bit, and the other inputs must be
  unchanged. Binary ops also write over input 1 when shapes match, and run with a broadcast
  second (or first) input; variadic Max/Min with three inputs.
- Views (VIEW_OPS): the output bound on the input's bytes holds the reshaped input, at the
  input's address, and the kernel writes nothing: the input sits in read-only memory in a child
  process, where any write would kill it (the control, Neg in place on the same memory, does).
- A fused segment as runtime.segments builds it: producer, view and in-place consumer in one
  session, every graph output bound on the same address.

Sessions use the runtime's own settings (runtime.kernels.session_options). On a GPU machine the
same cases run on cuda:0 (marked `cuda`).
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from planner.ir.aliasing import IN_PLACE_OPS, VIEW_OPS
from planner.pipeline import plan_model
from runtime.devices import RuntimeDevice, cuda_device_error, parse_device
from runtime.errors import PlanCheckError
from runtime.executor import PlanExecutor
from runtime.kernels import KernelOptions, session_options
from schemas.plan import PlanRequest

OPSET = 17
SHAPE = (48, 131)  # not a multiple of any vector width: the kernels' tails run too
RNG_SEED = 13

DEVICES = [
    pytest.param("cpu", id="cpu"),
    pytest.param("cuda:0", id="cuda", marks=[
        pytest.mark.cuda,
        pytest.mark.skipif(cuda_device_error(0) is not None,
                           reason=f"no usable CUDA device: {cuda_device_error(0)}"),
    ]),
]


@dataclass(frozen=True)
class Case:
    """One node `op` over `inputs`, its output written over input `over`."""

    op: str
    inputs: tuple[np.ndarray, ...]
    over: int
    name: str
    attrs: dict = field(default_factory=dict)

    def model(self) -> bytes:
        names = [f"x{i}" for i in range(len(self.inputs))]
        out = self.inputs[self.over]
        graph = helper.make_graph(
            [helper.make_node(self.op, names, ["y"], **self.attrs)], self.name,
            [_info(n, a) for n, a in zip(names, self.inputs, strict=True)], [_info("y", out)],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  ir_version=8)
        return model.SerializeToString()


def _info(name: str, array: np.ndarray):
    return helper.make_tensor_value_info(
        name, helper.np_dtype_to_tensor_dtype(array.dtype), list(array.shape))


def _values(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    """float32 values the op is defined on: any real, positive, or away from zero."""
    if kind == "positive":
        x = rng.uniform(0.05, 4.0, shape)
    elif kind == "nonzero":
        x = rng.choice([-1.0, 1.0], shape) * rng.uniform(0.25, 4.0, shape)
    else:
        x = rng.standard_normal(shape) * 3.0
    return np.asarray(x, dtype=np.float32)  # a 0-d array, not a numpy scalar, for shape ()


UNARY = {"Sqrt": "positive", "Reciprocal": "nonzero", "Log": "positive", "Neg": "any",
         "Abs": "any", "Exp": "any", "Floor": "any", "Ceil": "any", "Relu": "any",
         "Sigmoid": "any", "Tanh": "any", "Erf": "any", "LeakyRelu": "any", "Softplus": "any"}
BINARY = {"Add": ("any", "any"), "Sub": ("any", "any"), "Mul": ("any", "any"),
          "Div": ("any", "nonzero"), "Pow": ("positive", "any"), "Max": ("any", "any"),
          "Min": ("any", "any")}
ATTRIBUTES = {"LeakyRelu": {"alpha": 0.1}}
ROW, COLUMN = (SHAPE[1],), (SHAPE[0], 1)


def in_place_cases() -> list[Case]:
    rng = np.random.default_rng(RNG_SEED)
    cases = []
    for op, kind in UNARY.items():
        cases.append(Case(op, (_values(rng, SHAPE, kind),), 0, op, ATTRIBUTES.get(op, {})))
    for op, (a, b) in BINARY.items():
        full = (_values(rng, SHAPE, a), _values(rng, SHAPE, b))
        cases += [Case(op, full, 0, f"{op}-over-0"), Case(op, full, 1, f"{op}-over-1")]
        cases.append(Case(op, (full[0], _values(rng, ROW, b)), 0, f"{op}-row-broadcast-over-0"))
        cases.append(Case(op, (full[0], _values(rng, (), b)), 0, f"{op}-scalar-over-0"))
        cases.append(Case(op, (_values(rng, COLUMN, a), full[1]), 1,
                          f"{op}-column-broadcast-over-1"))
    for op in ("Max", "Min"):
        three = tuple(_values(rng, SHAPE, "any") for _ in range(3))
        cases += [Case(op, three, k, f"{op}-three-over-{k}") for k in range(3)]
        # broadcast among three inputs: onnxruntime's CUDA kernel zeroes its output first and
        # then accumulates into it, so on a GPU this writes over its input before reading it
        mixed = (three[0], _values(rng, ROW, "any"), three[2])
        cases += [Case(op, mixed, k, f"{op}-three-broadcast-over-{k}") for k in (0, 2)]
    x = _values(rng, SHAPE, "any")
    bounds = (np.float32(-1.5), np.float32(2.0))
    cases.append(Case("Clip", (x, *map(np.asarray, bounds)), 0, "Clip-min-max"))
    cases.append(Case("Clip", (x,), 0, "Clip-unbounded"))
    condition = rng.random(SHAPE) < 0.5
    x, y = _values(rng, SHAPE, "any"), _values(rng, SHAPE, "any")
    cases += [Case("Where", (condition, x, y), 1, "Where-over-x"),
              Case("Where", (condition, x, y), 2, "Where-over-y"),
              Case("Where", (condition, x, _values(rng, (), "any")), 1, "Where-scalar-y-over-x"),
              Case("Where", (condition[:1], x, y), 2, "Where-row-condition-over-y")]
    cases += row_cases(rng) + scatter_cases(rng) + gemm_cases(rng)
    return cases


WIDE = (4, 3001)  # rows longer than the GPU kernels' one-warp softmax (1,024 elements)


def row_cases(rng: np.random.Generator) -> list[Case]:
    """Softmax and LogSoftmax read a whole row (max, sum) before writing it."""
    cases = []
    for op in ("Softmax", "LogSoftmax"):
        x, wide = _values(rng, SHAPE, "any"), _values(rng, WIDE, "any")
        cases += [Case(op, (x,), 0, f"{op}-last-axis", {"axis": -1}),
                  Case(op, (wide,), 0, f"{op}-wide-rows", {"axis": 1}),
                  Case(op, (x,), 0, f"{op}-axis-0", {"axis": 0})]
    return cases


def scatter_cases(rng: np.random.Generator) -> list[Case]:
    """Scatters write over their data input (input 0), which they would otherwise copy first:
    the loss gradient's one-hot ScatterElements along the class axis, a reduction, ScatterND."""
    data = _values(rng, SHAPE, "any")
    picks = np.stack([rng.choice(SHAPE[1], 5, replace=False) for _ in range(SHAPE[0])])
    updates = _values(rng, picks.shape, "any")
    rows = rng.choice(SHAPE[0], 10, replace=False).reshape(10, 1)
    return [
        Case("ScatterElements", (data, picks.astype(np.int64), updates), 0,
             "ScatterElements-axis-1", {"axis": 1}),
        Case("ScatterElements", (data, picks.astype(np.int64), updates), 0,
             "ScatterElements-add", {"axis": 1, "reduction": "add"}),
        Case("ScatterND", (data, rows.astype(np.int64), _values(rng, (10, SHAPE[1]), "any")), 0,
             "ScatterND-rows"),
    ]


def gemm_cases(rng: np.random.Generator) -> list[Case]:
    """Gemm over its addend C: a fused SGD step `W - lr * A^T @ B` (schemas.update_fusion), with
    a long inner dimension (the CPU kernel accumulates it into the output in several passes) and
    a short one (a batch of 16), transposed as a weight gradient is and not."""
    m, n = SHAPE
    cases = []
    for k in (16, 700):
        weight = _values(rng, SHAPE, "any")
        a_t, b = _values(rng, (k, m), "any"), _values(rng, (k, n), "any")
        cases.append(Case("Gemm", (a_t, b, weight), 2, f"Gemm-sgd-k{k}",
                          {"alpha": -0.01, "beta": 1.0, "transA": 1}))
        cases.append(Case("Gemm", (np.ascontiguousarray(a_t.T), b, weight), 2, f"Gemm-beta-k{k}",
                          {"alpha": 0.5, "beta": 0.9}))
    return cases


CASES = in_place_cases()


def test_every_in_place_op_type_has_cases():
    """A new op in IN_PLACE_OPS needs its own case here before the planner may use it."""
    assert set(IN_PLACE_OPS) <= {case.op for case in CASES}
    binary = [case for case in CASES if case.op in BINARY]
    assert {case.op for case in binary if case.over == 1} == set(BINARY)


def _session(model: bytes, device: RuntimeDevice, threads: int = 1) -> ort.InferenceSession:
    return ort.InferenceSession(model, session_options(KernelOptions(threads=threads), device),
                                providers=device.providers())


def run_bound(model: bytes, inputs: tuple[np.ndarray, ...], over: int, device: RuntimeDevice,
              threads: int = 1) -> tuple[list[np.ndarray], int, int]:
    """Run with the inputs in OrtValues on `device` and the output bound on input `over`'s
    bytes; returns every input's bytes after the run, the address the output was bound to and
    the address onnxruntime's output value has."""
    session = _session(model, device, threads)
    dev_type, dev_id = device.ort_device
    values = [ort.OrtValue.ortvalue_from_numpy(np.array(a, copy=True), dev_type, dev_id)
              for a in inputs]
    binding = session.io_binding()
    for info, value in zip(session.get_inputs(), values, strict=True):
        binding.bind_ortvalue_input(info.name, value)
    target = values[over]
    output = session.get_outputs()[0].name
    binding.bind_output(output, dev_type, dev_id, inputs[over].dtype.type,
                        target.shape(), target.data_ptr())
    session.run_with_iobinding(binding)
    actual = binding.get_outputs()[0].data_ptr()
    # copies: a CPU OrtValue's numpy() may be a view of memory freed with the OrtValue
    return [np.array(value.numpy(), copy=True) for value in values], target.data_ptr(), actual


def reference(model: bytes, inputs: tuple[np.ndarray, ...], threads: int = 1) -> np.ndarray:
    """The op's output from a normal run (onnxruntime allocates the output) with as many
    threads (a multi-threaded Gemm splits its work, and so its rounding, differently)."""
    session = _session(model, parse_device("cpu"), threads)
    feeds = {info.name: a for info, a in zip(session.get_inputs(), inputs, strict=True)}
    return session.run(None, feeds)[0]


def _same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    return actual.dtype == expected.dtype and actual.shape == expected.shape and \
        actual.tobytes() == expected.tobytes()


@pytest.mark.parametrize("threads", [1, 4])
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_in_place_op_writes_its_output_over_its_input(case, device, threads):
    model = case.model()
    after, bound, actual = run_bound(model, case.inputs, case.over, parse_device(device), threads)
    assert actual == bound, "onnxruntime did not write the output into the input's bytes"
    expected = reference(model, case.inputs, threads)
    if device == "cpu":
        assert _same_bits(after[case.over], expected), "in place differs from a normal run"
    else:  # GPU kernels may round differently from the CPU reference, not from themselves
        np.testing.assert_allclose(after[case.over], expected, rtol=1e-5, atol=1e-6)
    for k, (before, now) in enumerate(zip(case.inputs, after, strict=True)):
        if k != case.over:
            assert _same_bits(now, before), f"input {k} changed"


def test_the_check_catches_an_op_that_cannot_run_in_place():
    """The control: MatMul reads a whole row and column for each output element, so writing
    over its input corrupts later elements; the same harness sees the difference."""
    rng = np.random.default_rng(RNG_SEED)
    case = Case("MatMul", (_values(rng, (64, 64), "any"), _values(rng, (64, 64), "any")), 0, "mm")
    after, bound, actual = run_bound(case.model(), case.inputs, 0, parse_device("cpu"))
    assert actual == bound
    assert not _same_bits(after[0], reference(case.model(), case.inputs))


# ------------------------------------------------------------------------------------------ views

def view_case(op: str) -> tuple[bytes, tuple[np.ndarray, ...]]:
    """A one-node model of view op `op` whose output is input 0's bytes under another shape."""
    rng = np.random.default_rng(RNG_SEED)
    x = _values(rng, (6, 1, 35), "any")
    extra: dict[str, tuple[np.ndarray, ...]] = {
        "Reshape": (np.array([35, 6], dtype=np.int64),),
        "Squeeze": (np.array([1], dtype=np.int64),),
        "Unsqueeze": (np.array([0, 3], dtype=np.int64),),
    }
    inputs = (x, *extra.get(op, ()))
    attrs = {"axis": 2} if op == "Flatten" else {}
    expected = reference_shape(op, x)
    names = [f"x{i}" for i in range(len(inputs))]
    graph = helper.make_graph(
        [helper.make_node(op, names, ["y"], **attrs)], op,
        [_info(n, a) for n, a in zip(names, inputs, strict=True)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(expected))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=8)
    return model.SerializeToString(), inputs


def reference_shape(op: str, x: np.ndarray) -> tuple[int, ...]:
    return {"Reshape": (35, 6), "Flatten": (6, 35), "Squeeze": (6, 35),
            "Unsqueeze": (1, 6, 1, 1, 35), "Identity": x.shape}[op]


def test_every_view_op_type_has_a_case():
    assert set(VIEW_OPS) == {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("op", sorted(VIEW_OPS))
def test_view_op_output_is_its_input_bytes(op, device):
    model, inputs = view_case(op)
    x = inputs[0]
    session = _session(model, parse_device(device))
    dev_type, dev_id = parse_device(device).ort_device
    value = ort.OrtValue.ortvalue_from_numpy(np.array(x, copy=True), dev_type, dev_id)
    binding = session.io_binding()
    binding.bind_ortvalue_input("x0", value)
    for k, extra in enumerate(inputs[1:], 1):
        binding.bind_cpu_input(f"x{k}", extra)  # shapes and axes: host values, as in any plan
    shape = list(reference_shape(op, x))
    binding.bind_output("y", dev_type, dev_id, np.float32, shape, value.data_ptr())
    session.run_with_iobinding(binding)
    out = binding.get_outputs()[0]
    assert out.data_ptr() == value.data_ptr()
    assert _same_bits(out.numpy(), x.reshape(shape))
    assert _same_bits(value.numpy(), x), "the view changed its input's bytes"


READ_ONLY_RUN = """
import sys
import numpy as np
import onnxruntime as ort
model, data, op_input_count = sys.argv[1], sys.argv[2], int(sys.argv[3])
extras = [np.load(f"{data}.{k}.npy") for k in range(1, op_input_count)]
x = np.memmap(data, dtype=np.float32, mode="r")  # mapped read-only: a write is SIGSEGV
so = ort.SessionOptions()
so.enable_cpu_mem_arena = False
session = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
binding = session.io_binding()
inp, out = session.get_inputs()[0], session.get_outputs()[0]
binding.bind_input(inp.name, "cpu", 0, np.float32, inp.shape, x.ctypes.data)
for info, extra in zip(session.get_inputs()[1:], extras):
    binding.bind_cpu_input(info.name, extra)
binding.bind_output(out.name, "cpu", 0, np.float32, out.shape, x.ctypes.data)
session.run_with_iobinding(binding)
print("ran without writing")
"""


def run_on_read_only_memory(model: bytes, inputs: tuple[np.ndarray, ...], tmp_path
                            ) -> subprocess.CompletedProcess:
    """Run the model in a child process with input 0 and the output bound on read-only pages."""
    (tmp_path / "model.onnx").write_bytes(model)
    data = tmp_path / "x.bin"
    data.write_bytes(inputs[0].tobytes())
    for k, extra in enumerate(inputs[1:], 1):
        np.save(tmp_path / f"x.bin.{k}.npy", extra)
    return subprocess.run(
        [sys.executable, "-c", READ_ONLY_RUN, str(tmp_path / "model.onnx"), str(data),
         str(len(inputs))], capture_output=True, text=True, timeout=120,
    )


@pytest.mark.parametrize("op", sorted(VIEW_OPS))
def test_view_op_writes_nothing(op, tmp_path):
    model, inputs = view_case(op)
    result = run_on_read_only_memory(model, inputs, tmp_path)
    assert result.returncode == 0 and "ran without writing" in result.stdout, result.stderr[-500:]


def test_a_write_to_read_only_memory_is_caught(tmp_path):
    """The control: an op that does write (Neg in place) dies on the read-only input."""
    x = _values(np.random.default_rng(RNG_SEED), (6, 35), "any")
    result = run_on_read_only_memory(Case("Neg", (x,), 0, "neg").model(), (x,), tmp_path)
    assert result.returncode != 0 and "ran without writing" not in result.stdout


# ------------------------------------------------------------------------------ a fused segment

def test_a_segment_shares_one_address_between_producer_view_and_in_place_consumer():
    """a = Relu(x); v = Reshape(a); c = Add(v, b): the runtime binds a, v and c (all graph
    outputs of the segment's session) on one arena slice. The Reshape copies nothing (its
    output is bound where its input is) and c is bit-identical to a normal run."""
    rng = np.random.default_rng(RNG_SEED)
    x, b = _values(rng, (6, 35), "any"), _values(rng, (35, 6), "any")
    shape = np.array([35, 6], dtype=np.int64)
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["a"]),
         helper.make_node("Reshape", ["a", "shape"], ["v"]),
         helper.make_node("Add", ["v", "b"], ["c"])], "segment",
        [helper.make_tensor_value_info("x", f, [6, 35]), _info("shape", shape),
         helper.make_tensor_value_info("b", f, [35, 6])],
        [helper.make_tensor_value_info(n, f, s) for n, s in
         (("a", [6, 35]), ("v", [35, 6]), ("c", [35, 6]))],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                              ir_version=8).SerializeToString()
    expected = dict(zip(("a", "v", "c"), reference_all(model, {"x": x, "shape": shape, "b": b}),
                        strict=True))
    slice_ = np.full(x.size, np.nan, dtype=np.float32)  # the arena slice of a, v and c
    xs, bs = np.array(x, copy=True), np.array(b, copy=True)
    session = _session(model, parse_device("cpu"))
    binding = session.io_binding()
    binding.bind_input("x", "cpu", 0, np.float32, [6, 35], xs.ctypes.data)
    binding.bind_cpu_input("shape", shape)
    binding.bind_input("b", "cpu", 0, np.float32, [35, 6], bs.ctypes.data)
    for name, dims in (("a", [6, 35]), ("v", [35, 6]), ("c", [35, 6])):
        binding.bind_output(name, "cpu", 0, np.float32, dims, slice_.ctypes.data)
    session.run_with_iobinding(binding)
    assert [o.data_ptr() for o in binding.get_outputs()] == [slice_.ctypes.data] * 3
    assert _same_bits(slice_.reshape(35, 6), expected["c"])
    assert _same_bits(xs, x) and _same_bits(bs, b)


def reference_all(model: bytes, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = _session(model, parse_device("cpu"))
    return session.run(None, feeds)


# ------------------------------------------------------------- the runtime's check of a scatter

def test_the_runtime_refuses_a_scatter_written_over_its_updates(tmp_path):
    """A scatter reads its updates while it writes: the plan check accepts its output only over
    its data input (input 0), even where the updates have the same size."""
    n = 256
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Exp", ["x"], ["a"]), helper.make_node("Neg", ["x"], ["u"]),
         helper.make_node("ScatterElements", ["a", "idx", "u"], ["s"], axis=0),
         helper.make_node("ReduceSum", ["s"], ["loss"], keepdims=0)], "scatter",
        [helper.make_tensor_value_info("x", f, [n]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [n])],
        [helper.make_tensor_value_info("loss", f, [])])
    path = tmp_path / "scatter.onnx"
    path.write_bytes(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                       ir_version=8).SerializeToString())
    plan = plan_model(path, PlanRequest(budgets={"cpu": 1 << 20}, time_limit_s=1))
    by_tensor = {b.tensor: b for b in plan.buffers}
    assert by_tensor["s"].shares == "in_place" and by_tensor["s"].storage == by_tensor["a"].id
    PlanExecutor(path, plan)  # as planned: over its data input
    moved = by_tensor["s"].model_copy(update={"storage": by_tensor["u"].id,
                                              "offset": by_tensor["u"].offset})
    wrong = plan.model_copy(update={"buffers": [moved if b.id == moved.id else b
                                                for b in plan.buffers]})
    with pytest.raises(PlanCheckError) as refused:
        PlanExecutor(path, wrong)
    assert any("reads other inputs from the same storage" in p for p in refused.value.problems), \
        refused.value.problems
