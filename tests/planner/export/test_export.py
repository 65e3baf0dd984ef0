"""The torch training-step exporter (planner.export) and `arenaplan export-torch`.

Every export here is checked against an eager torch step on the same values (dropout off):
loss and every updated parameter / buffer / optimizer state within 1e-4; for Adam the moments
and the update recomputed by torch.optim from the exported first moment (planner.export.verify
says why raw Adam parameter updates are not comparable where gradients vanish).
"""

from __future__ import annotations

import copy
import importlib.util
import json
import sys

import numpy as np
import onnx
import pytest

pytestmark = pytest.mark.export
torch = pytest.importorskip("torch")
pytest.importorskip("onnxscript")

from arenaplan.cli import main  # noqa: E402
from planner.errors import InvalidInputError  # noqa: E402
from planner.export import OptimizerSpec, export_training_graph  # noqa: E402
from planner.export.attention import flash_attention_for_cpu_backward  # noqa: E402
from planner.export.decompositions import (  # noqa: E402
    adaptive_avg_pool2d_backward,
    convolution_backward,
)
from planner.export.pooling import (  # noqa: E402
    avg_pool3d_backward,
    max_pool3d_with_indices_backward,
)
from planner.export.resampling import upsample_backward_decompositions  # noqa: E402
from planner.export.verify import run_onnx  # noqa: E402
from tests.support.fixture_zoo import FIXTURE_DIR  # noqa: E402

TOL = 1e-4


def _load_models():
    spec = importlib.util.spec_from_file_location("arenaplan_fixture_models",
                                                  FIXTURE_DIR / "models.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


models = _load_models()
UPSAMPLE_BACKWARD = upsample_backward_decompositions()
nn = torch.nn


class TinyConvNet(nn.Module):
    """Strided conv with bias, BatchNorm (running stats + num_batches_tracked), grouped conv,
    max pool, non-trivial adaptive average pool, linear head: every decomposition we own."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3, stride=2, padding=1)
        self.bn1 = nn.BatchNorm2d(4)
        self.conv2 = nn.Conv2d(4, 6, 3, padding=1, groups=2, bias=False)
        self.pool = nn.AdaptiveAvgPool2d((3, 2))
        self.head = nn.Linear(36, 5)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.nn.functional.max_pool2d(torch.relu(self.conv2(x)), 2, ceil_mode=False)
        return self.head(self.pool(x).flatten(1))


def _tiny_example(seed: int = 0):
    torch.manual_seed(seed)
    model = TinyConvNet()
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 3, 14, 14, generator=gen)
    y = torch.randint(0, 5, (4,), generator=gen)
    return model, x, y


_EXPORTS: dict[str, object] = {}


def _export(name: str):
    """One export per optimizer for the whole module (each takes a few seconds)."""
    if name not in _EXPORTS:
        model, x, y = _tiny_example()
        lr = {"sgd": 0.1, "momentum": 0.05, "adam": 1e-3, "adamw": 1e-3}[name]
        _EXPORTS[name] = export_training_graph(
            model, (x,), y, "cross_entropy", OptimizerSpec(name, lr=lr), tolerance=None
        )
    return _EXPORTS[name]


# --- decompositions, checked against torch's own autograd (no export) ---------------------

@pytest.mark.parametrize(
    "stride,padding,dilation,groups,transposed,size",
    [
        (1, 1, 1, 1, False, 7),
        (2, 1, 1, 2, False, 8),   # stride that does not divide: weight grad must be cropped
        (2, 0, 2, 1, False, 9),
        (1, 2, 1, 3, False, 5),
        (2, 1, 1, 1, True, 5),
        (2, 0, 1, 2, True, 4),
        # The weight outweighs the activations: its gradient is made in the weight's layout
        (1, 1, 1, 1, False, 3),
        (1, 0, 1, 1, False, 3),
        (1, 1, 1, 1, True, 3),
        (2, 1, 1, 1, False, 4),  # strided, the input cut to the extent the kernel reaches
        (2, 1, 1, 1, False, 5),
        (2, 0, 1, 1, True, 1),
    ],
)
def test_convolution_backward_matches_autograd(stride, padding, dilation, groups, transposed,
                                               size):
    gen = torch.Generator().manual_seed(1)
    cin, cout, k = 6, 6, 3
    x = torch.randn(2, cin, size, size, generator=gen, dtype=torch.float64, requires_grad=True)
    if transposed:
        w = torch.randn(cin, cout // groups, k, k, generator=gen, dtype=torch.float64)
        out_pad = [stride - 1] * 2 if stride > 1 else [0, 0]
    else:
        w = torch.randn(cout, cin // groups, k, k, generator=gen, dtype=torch.float64)
        out_pad = [0, 0]
    w.requires_grad_(True)
    b = torch.randn(cout, generator=gen, dtype=torch.float64, requires_grad=True)
    args = ([stride] * 2, [padding] * 2, [dilation] * 2, transposed, out_pad, groups)
    y = torch.ops.aten.convolution(x, w, b, *args)
    grad_out = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    expected = torch.autograd.grad(y, (x, w, b), grad_out)
    got = convolution_backward(grad_out, x.detach(), w.detach(), [cout], *args,
                               [True, True, True])
    for e, g in zip(expected, got, strict=True):
        assert g.shape == e.shape
        torch.testing.assert_close(g, e, rtol=1e-10, atol=1e-10)


def test_a_weight_larger_than_its_activations_gets_no_weight_sized_transpose():
    """The weight gradient of a stride-1 convolution whose weight outweighs its input and output
    gradient is made in the weight's layout: no Transpose copies a weight-sized tensor (on
    VGG-11 and ResNet-18 such copies of 9.4 MB set the op-footprint bound)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(32 * 4, 3))
    x = torch.randn(2, 32, 2, 2)
    y = torch.randint(0, 3, (2,))
    exported = export_training_graph(model, (x,), y, "cross_entropy",
                                     OptimizerSpec("sgd", lr=0.1), tolerance=1e-4)
    graph = exported.model.graph
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in [*graph.value_info, *graph.output]}
    transposed = [shapes.get(n.output[0]) for n in graph.node if n.op_type == "Transpose"]
    assert [32, 32, 3, 3] not in transposed, transposed
    assert any(n.op_type == "Conv" for n in graph.node)


@pytest.mark.parametrize("in_hw,out_hw", [((7, 5), (3, 2)), ((6, 6), (1, 1)), ((8, 4), (4, 4))])
def test_adaptive_avg_pool2d_backward_matches_autograd(in_hw, out_hw):
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 3, *in_hw, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.adaptive_avg_pool2d(x, out_hw)
    grad_out = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    (expected,) = torch.autograd.grad(y, x, grad_out)
    torch.testing.assert_close(adaptive_avg_pool2d_backward(grad_out, x.detach()), expected)


@pytest.mark.parametrize("causal,mask", [(False, None), (True, None), (False, "bool"),
                                         (False, "float")])
def test_flash_attention_backward_matches_autograd(causal, mask):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, 3, 5, 4, generator=gen, dtype=torch.float64, requires_grad=True)
               for _ in range(3))
    attn_mask = None
    if mask == "bool":
        attn_mask = torch.rand(5, 5, generator=gen) > 0.3
        attn_mask[:, 0] = True  # every row attends somewhere
    elif mask == "float":
        attn_mask = torch.randn(5, 5, generator=gen, dtype=torch.float64)
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                                           is_causal=causal, scale=0.7)
    grad_out = torch.randn(out.shape, generator=gen, dtype=torch.float64)
    expected = torch.autograd.grad(out, (q, k, v), grad_out)
    got = flash_attention_for_cpu_backward(grad_out, q.detach(), k.detach(), v.detach(),
                                           out.detach(), None, 0.0, causal, attn_mask=attn_mask,
                                           scale=0.7)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)


@pytest.mark.parametrize(
    "mode,size,kwargs",
    [
        ("nearest", (7,), {"scale_factor": 2}),
        ("nearest", (5, 6), {"size": (9, 13)}),
        ("nearest-exact", (5, 6), {"scale_factor": 1.7}),
        ("nearest", (3, 4, 5), {"size": (5, 8, 7)}),
        ("linear", (6,), {"size": 11, "align_corners": True}),
        ("bilinear", (5, 6), {"scale_factor": 2, "align_corners": False}),
        ("bilinear", (5, 6), {"size": (3, 14), "align_corners": False}),
        ("bilinear", (5, 6), {"scale_factor": 1.5, "align_corners": True}),
        ("trilinear", (3, 4, 5), {"size": (6, 7, 9), "align_corners": False}),
    ],
)
def test_upsample_backward_matches_autograd(mode, size, kwargs):
    gen = torch.Generator().manual_seed(4)
    x = torch.randn(2, 3, *size, generator=gen, dtype=torch.float64, requires_grad=True)
    y = torch.nn.functional.interpolate(x, mode=mode, **kwargs)
    grad_out = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    (expected,) = torch.autograd.grad(y, x, grad_out)
    calls = []

    class Record(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in UPSAMPLE_BACKWARD:
                calls.append((func, args, kwargs or {}))
            return func(*args, **(kwargs or {}))

    with Record():
        torch.autograd.grad(torch.nn.functional.interpolate(x, mode=mode, **kwargs), x,
                            grad_out)
    ((func, args, call_kwargs),) = calls
    got = UPSAMPLE_BACKWARD[func](*args, **call_kwargs)
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "kind,kwargs",
    [
        ("avg", {"kernel_size": 2}),
        ("avg", {"kernel_size": 3, "stride": 2, "padding": 1}),
        ("avg", {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
        ("avg", {"kernel_size": 2, "stride": 2, "ceil_mode": True}),
        ("avg", {"kernel_size": (2, 3, 2), "divisor_override": 5}),
        ("max", {"kernel_size": 2}),
        ("max", {"kernel_size": 3, "stride": 2, "padding": 1}),
        ("max", {"kernel_size": 2, "stride": 1, "dilation": 2}),
    ],
)
def test_pool3d_backward_matches_autograd(kind, kwargs):
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(2, 3, 5, 6, 7, generator=gen, dtype=torch.float64, requires_grad=True)
    pool = torch.nn.functional.avg_pool3d if kind == "avg" else torch.nn.functional.max_pool3d
    y = pool(x, **kwargs)
    grad_out = torch.randn(y.shape, generator=gen, dtype=torch.float64)
    (expected,) = torch.autograd.grad(y, x, grad_out)
    if kind == "avg":
        k = kwargs["kernel_size"]
        got = avg_pool3d_backward(grad_out, x.detach(), [k] if isinstance(k, int) else list(k),
                                  [kwargs["stride"]] if "stride" in kwargs else [],
                                  [kwargs.get("padding", 0)], kwargs.get("ceil_mode", False),
                                  kwargs.get("count_include_pad", True),
                                  kwargs.get("divisor_override"))
    else:
        _, indices = torch.nn.functional.max_pool3d(x.detach(), return_indices=True, **kwargs)
        got = max_pool3d_with_indices_backward(grad_out, x.detach(), [], [], [], [], False,
                                               indices)
    torch.testing.assert_close(got, expected)


# --- whole exports -----------------------------------------------------------------------

def _assert_graph_contract(result):
    model = result.model
    assert model.ir_version == 10
    assert not model.functions
    onnx.checker.check_model(model)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    graph_inputs = [v.name for v in model.graph.input]
    graph_outputs = [v.name for v in model.graph.output]
    assert graph_inputs == list(result.input_kinds)
    assert set(result.feeds) == set(graph_inputs)
    assert graph_outputs[0] == result.loss_output == "loss"
    assert sorted(graph_outputs[1:]) == sorted(result.updates.values())
    for kind in ("data", "label", "parameter"):
        assert result.input_names(kind)
    assert set(result.input_names("parameter")) <= set(result.updates)
    domains = {node.domain for node in model.graph.node}
    assert domains <= {"", "ai.onnx"}
    # ONNX Runtime would expand CastLike into new nodes out of the graph's order.
    assert "CastLike" not in {node.op_type for node in model.graph.node}


@pytest.mark.parametrize("name", ["sgd", "momentum", "adam", "adamw"])
def test_export_matches_torch(name):
    result = _export(name)
    _assert_graph_contract(result)
    assert result.max_abs_diff_loss <= TOL
    assert result.max_abs_diff_updates <= TOL
    assert set(result.update_diffs) == set(result.updates)
    assert all(d <= TOL for d in result.update_diffs.values())
    kinds = result.input_kinds
    assert kinds["bn1.running_mean"] == kinds["bn1.num_batches_tracked"] == "buffer"
    assert result.updates["bn1.running_var"] == "bn1.running_var.updated"
    states = result.input_names("optimizer_state")
    if name == "sgd":
        assert states == []
    elif name == "momentum":
        assert "conv1.weight.momentum_buffer" in states
    else:
        assert {"conv1.weight.exp_avg", "conv1.weight.exp_avg_sq", "optimizer.step"} <= set(
            states)
    # The graph really trains: a second run from the updated values lowers the loss.
    outputs = run_onnx(result.model, result.feeds)
    second = run_onnx(result.model, result.advance(result.feeds, outputs))
    assert float(second["loss"]) < float(outputs["loss"])


def test_adam_consecutive_steps_use_the_step_counter():
    result = _export("adamw")
    feeds = result.feeds
    for expected_step in (1.0, 2.0, 3.0):
        outputs = run_onnx(result.model, feeds)
        assert float(outputs["optimizer.step.updated"]) == expected_step
        comparison = result.verify(feeds)  # torch.optim from the same state, same step
        assert comparison.max_abs_diff_loss <= TOL
        assert comparison.max_abs_diff_updates <= TOL
        feeds = result.advance(feeds, outputs)


def test_adam_with_dead_units_has_no_nan():
    torch.manual_seed(0)
    model = models.DeadUnitsMLP(in_features=8, hidden=16, classes=4, dead=6)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(8, 8, generator=gen)
    y = torch.randint(0, 4, (8,), generator=gen)
    result = export_training_graph(model, (x,), y, "cross_entropy",
                                   OptimizerSpec("adam", lr=1e-2), tolerance=TOL)
    outputs = run_onnx(result.model, result.feeds)
    for name, value in outputs.items():
        assert np.isfinite(value).all(), name
    # Dead rows have exactly zero gradient: zero first moment, parameters unchanged.
    assert np.all(outputs["fc1.weight.exp_avg.updated"][:6] == 0)
    np.testing.assert_array_equal(outputs["fc1.weight.updated"][:6],
                                  result.feeds["fc1.weight"][:6])
    assert not np.array_equal(outputs["fc1.weight.updated"][6:], result.feeds["fc1.weight"][6:])


class DropoutNet(nn.Module):
    """Dropout as a module and called functionally, on two tensors of the same shape."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.drop = nn.Dropout(0.3)
        self.fc2 = nn.Linear(16, 16)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        h = self.drop(torch.relu(self.fc1(x)))
        h = torch.nn.functional.dropout(torch.relu(self.fc2(h)), 0.5, training=self.training)
        return self.head(h)


def test_dropout_masks_are_drawn_in_the_graph_and_verified_with_the_same_masks():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(6, 8, generator=gen)
    y = torch.randint(0, 4, (6,), generator=gen)
    result = export_training_graph(DropoutNet(), (x,), y, "cross_entropy",
                                   OptimizerSpec("momentum", lr=0.1), tolerance=TOL)
    random_nodes = [n for n in result.model.graph.node if n.op_type == "RandomUniformLike"]
    assert len(random_nodes) == 2
    seeds = [next(a.f for a in n.attribute if a.name == "seed") for n in random_nodes]
    assert len(set(seeds)) == 2
    # Seeded: a fresh session draws the same masks, a second run of one session new ones.
    first = run_onnx(result.model, result.feeds)
    assert float(run_onnx(result.model, result.feeds)["loss"]) == float(first["loss"])
    no_dropout = result.verify(result.feeds)
    assert no_dropout.max_abs_diff_loss <= TOL and no_dropout.max_abs_diff_updates <= TOL
    # The masks really drop: torch without dropout gives another loss.
    plain = copy.deepcopy(DropoutNet())
    plain.load_state_dict({k: torch.from_numpy(result.feeds[k]) for k in plain.state_dict()})
    plain.eval()
    with torch.no_grad():
        eval_loss = torch.nn.functional.cross_entropy(plain(x), y)
    assert abs(float(eval_loss) - float(first["loss"])) > 1e-3


def test_bad_inputs_are_user_errors():
    model, x, y = _tiny_example()
    with pytest.raises(InvalidInputError, match="optimizer"):
        OptimizerSpec("rmsprop")
    with pytest.raises(InvalidInputError, match="failed on the example inputs"):
        export_training_graph(model, (torch.randn(4, 5),), y, "cross_entropy",
                              OptimizerSpec("sgd"))
    with pytest.raises(InvalidInputError, match="scalar"):
        export_training_graph(model, (x,), y, lambda out, lab: out.sum(1), OptimizerSpec("sgd"))


# --- the command line --------------------------------------------------------------------

def test_cli_export_torch_end_to_end(tmp_path, capsys):
    out = tmp_path / "mlp.onnx"
    code = main([
        "export-torch", f"{FIXTURE_DIR / 'models.py'}:MLP", "--input-shape", "4,32",
        "--loss", "cross_entropy", "--optimizer", "momentum", "--lr", "0.05",
        "-o", str(out), "--sidecar",
    ])
    assert code == 0
    printed = capsys.readouterr().out
    assert "ops" in printed and "max abs diff" in printed
    model = onnx.load(out)
    onnx.checker.check_model(model)
    meta = json.loads((tmp_path / "mlp.json").read_text())
    assert meta["optimizer"]["name"] == "momentum"
    assert meta["op_count"] == len(model.graph.node)
    assert meta["inputs"]["input"] == {"shape": [4, 32], "dtype": "float32", "kind": "data"}
    assert meta["inputs"]["label"]["dtype"] == "int64"
    assert meta["updates"]["fc1.weight.momentum_buffer"] == "fc1.weight.momentum_buffer.updated"
    feeds = dict(np.load(tmp_path / "mlp.inputs.npz"))
    assert set(feeds) == {v.name for v in model.graph.input}
    assert feeds["label"].max() < 10
    loss = run_onnx(model, feeds)[meta["loss_output"]]
    assert float(loss) == pytest.approx(meta["reference_loss"], rel=1e-4)


UNSUPPORTED_MODEL = """
import torch
from torch import nn


class Upscale(nn.Module):
    def forward(self, x):
        return nn.functional.interpolate(x, scale_factor=2, mode="bicubic")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.decoder = nn.Sequential(nn.ReLU(), Upscale())
        self.head = nn.Conv2d(4, 3, 1)

    def forward(self, x):
        return self.head(self.decoder(self.conv(x)))
"""


def test_cli_op_without_onnx_translation_names_op_module_and_remedy(tmp_path, capsys):
    model_file = tmp_path / "bicubic_net.py"
    model_file.write_text(UNSUPPORTED_MODEL)
    code = main(["export-torch", f"{model_file}:Net", "--input-shape", "2,3,6,6",
                 "--loss", "mse", "-o", str(tmp_path / "m.onnx")])
    assert code == 2
    err = capsys.readouterr().err
    assert "aten.upsample_bicubic2d_backward (gradient of aten.upsample_bicubic2d)" in err
    assert "in module decoder.1 (Upscale)" in err
    assert "what to do: interpolate with mode 'nearest'" in err
    assert len(err.strip().splitlines()) <= 5
    for torch_advice in ("Traceback", "register it", "PyTorch", "github"):
        assert torch_advice not in err
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize(
    "factory,message",
    [
        ("no_such_module_xyz:make", "cannot import module"),
        ("missing_file.py:Net", "does not exist"),
        (f"{FIXTURE_DIR / 'models.py'}:NoSuchFactory", "has no attribute"),
        ("json:dumps", "failed"),
        ("not-a-reference", "MODULE:FACTORY"),
    ],
)
def test_cli_bad_factory_is_exit_2(tmp_path, capsys, factory, message):
    code = main(["export-torch", factory, "--input-shape", "4,32", "-o",
                 str(tmp_path / "m.onnx")])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert not (tmp_path / "m.onnx").exists()


def test_cli_without_torch_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    code = main(["export-torch", f"{FIXTURE_DIR / 'models.py'}:MLP", "--input-shape", "4,32",
                 "-o", str(tmp_path / "m.onnx")])
    assert code == 2
    assert "install arenaplan[export]" in capsys.readouterr().err
