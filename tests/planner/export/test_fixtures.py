"""The committed fixture zoo, checked without torch: every sidecar is true of its files.

Each tests/fixtures/NAME.json describes NAME.onnx and NAME.inputs.npz (see
tests/fixtures/generate.py, which regenerates them with torch). Running the graph with plain
onnxruntime on the committed inputs must reproduce the loss torch computed.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests.support.fixture_zoo import FIXTURE_DIR

REQUIRED = {"mlp_sgd", "cnn_bn_momentum", "unet_small", "resnet_cifar", "gpt2_tiny_adam",
            "resnet18_narrow"}
SIDECAR_KEYS = {"name", "description", "onnx", "inputs_file", "seed", "optimizer", "inputs",
                "loss_output", "updates", "reference_loss", "torch_parameter_count", "op_count",
                "max_abs_diff"}
KINDS = {"data", "label", "parameter", "buffer", "optimizer_state"}
MAX_TOTAL_BYTES = 25 * 1024 * 1024
SIDECARS = sorted(p for p in FIXTURE_DIR.glob("*.json") if p.with_suffix(".onnx").is_file())

_ORT_TYPES = {"tensor(float)": "float32", "tensor(int64)": "int64", "tensor(double)": "float64",
              "tensor(int32)": "int32", "tensor(bool)": "bool", "tensor(float16)": "float16"}


def test_required_fixtures_are_committed():
    names = {p.stem for p in SIDECARS}
    assert REQUIRED <= names, f"missing fixtures: {sorted(REQUIRED - names)}"


def test_fixture_directory_is_small():
    total = sum(p.stat().st_size for p in FIXTURE_DIR.rglob("*") if p.is_file())
    assert total < MAX_TOTAL_BYTES, f"tests/fixtures holds {total} bytes"


@pytest.fixture(scope="module", params=SIDECARS, ids=[p.stem for p in SIDECARS])
def fixture(request):
    meta = json.loads(request.param.read_text())
    model = onnx.load(FIXTURE_DIR / meta["onnx"])
    with np.load(FIXTURE_DIR / meta["inputs_file"]) as npz:
        feeds = {key: npz[key] for key in npz.files}
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    outputs = dict(zip(names, session.run(names, feeds), strict=True))
    return meta, model, feeds, session, outputs


def test_sidecar_shape(fixture):
    meta, model, feeds, _, _ = fixture
    assert set(meta) == SIDECAR_KEYS
    assert meta["onnx"] == f"{meta['name']}.onnx"
    assert meta["inputs_file"] == f"{meta['name']}.inputs.npz"
    assert meta["optimizer"]["name"] in {"sgd", "momentum", "adam", "adamw"}
    assert isinstance(meta["seed"], int)
    assert meta["torch_parameter_count"] > 0
    assert set(meta["max_abs_diff"]) == {"loss", "updates"}
    assert max(meta["max_abs_diff"].values()) <= 1e-4


def test_inputs_match_graph_and_npz(fixture):
    meta, model, feeds, session, _ = fixture
    graph_inputs = [v.name for v in model.graph.input]
    assert list(meta["inputs"]) == graph_inputs
    assert set(feeds) == set(graph_inputs)
    for value in session.get_inputs():
        info = meta["inputs"][value.name]
        assert info["kind"] in KINDS
        assert list(feeds[value.name].shape) == info["shape"] == list(value.shape)
        assert str(feeds[value.name].dtype) == info["dtype"] == _ORT_TYPES[value.type]
    kinds = [info["kind"] for info in meta["inputs"].values()]
    for kind in ("data", "label", "parameter"):
        assert kind in kinds
    # torch counts each parameter element once, like the parameter inputs.
    count = sum(int(np.prod(info["shape"])) for info in meta["inputs"].values()
                if info["kind"] == "parameter")
    assert count == meta["torch_parameter_count"]


def test_updates_name_outputs_of_the_same_type(fixture):
    meta, model, feeds, session, outputs = fixture
    output_names = [v.name for v in model.graph.output]
    assert meta["loss_output"] in output_names
    assert sorted([meta["loss_output"], *meta["updates"].values()]) == sorted(output_names)
    for input_name, output_name in meta["updates"].items():
        assert meta["inputs"][input_name]["kind"] in {"parameter", "buffer", "optimizer_state"}
        assert outputs[output_name].shape == feeds[input_name].shape
        assert outputs[output_name].dtype == feeds[input_name].dtype
    for name, info in meta["inputs"].items():
        if info["kind"] in {"parameter", "optimizer_state"}:
            assert name in meta["updates"], f"{name} is never updated"


def test_graph_is_valid_static_and_flat(fixture):
    meta, model, _, _, _ = fixture
    assert meta["op_count"] == len(model.graph.node)
    assert model.ir_version <= 10
    assert not model.functions
    onnx.checker.check_model(model)
    inferred = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    shapes = {v.name: v.type.tensor_type.shape for v in (*inferred.graph.value_info,
                                                          *inferred.graph.output)}
    for node in inferred.graph.node:
        for name in node.output:
            assert name in shapes, name
            assert all(d.HasField("dim_value") for d in shapes[name].dim), name


def test_onnxruntime_reproduces_the_torch_loss(fixture):
    meta, _, _, _, outputs = fixture
    loss = float(outputs[meta["loss_output"]])
    assert loss == pytest.approx(meta["reference_loss"], rel=1e-4)
    for name, value in outputs.items():
        assert np.isfinite(value).all(), f"{name} has NaN/inf"


def test_a_step_changes_parameters_and_state(fixture):
    meta, _, feeds, _, outputs = fixture
    for input_name, output_name in meta["updates"].items():
        if meta["inputs"][input_name]["kind"] == "parameter":
            before, after = feeds[input_name], outputs[output_name]
            assert np.abs(after - before).max() <= 0.5, input_name  # one small step
    changed = [name for name, out in meta["updates"].items()
               if not np.array_equal(outputs[out], feeds[name])]
    assert len(changed) >= len(meta["updates"]) // 2
