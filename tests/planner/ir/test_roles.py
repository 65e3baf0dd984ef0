"""Role and region analysis on a training step whose every tensor's role is known by hand."""

from __future__ import annotations

import json

from arenaplan.cli import main
from planner.ir.graph import Region, TensorRole, load_graph
from tests.support.onnx_builders import relu_chain, tiny_momentum_step

EXPECTED_ROLES = {
    "x": TensorRole.DATA, "t": TensorRole.LABEL, "W": TensorRole.PARAMETER,
    "m": TensorRole.OPTIMIZER_STATE, "lr": TensorRole.CONSTANT, "y": TensorRole.ACTIVATION,
    "d": TensorRole.ACTIVATION, "dy": TensorRole.GRADIENT, "gW": TensorRole.GRADIENT,
    "mm": TensorRole.OPTIMIZER_TEMP, "delta": TensorRole.OPTIMIZER_TEMP,
    "loss": TensorRole.OUTPUT, "W_new": TensorRole.OUTPUT, "m_new": TensorRole.OUTPUT,
}


def test_roles_regions_loss_and_updates_by_structure():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 2})
    for name, role in EXPECTED_ROLES.items():
        assert graph.tensor(name).role is role, name
    assert graph.tensors[graph.loss].name == "loss"
    assert graph.tensor("W_new").updates == graph.tensor("W").id
    assert graph.tensor("m").updated_by == graph.tensor("m_new").id
    regions = [op.region for op in graph.ops]
    assert regions == [Region.FORWARD] * 4 + [Region.BACKWARD] * 3 + [Region.OPTIMIZER] * 4
    assert graph.parameter_count() == 12


def test_roles_do_not_depend_on_names():
    model = tiny_momentum_step()
    renamed = {n: f"v{i}" for i, n in enumerate(EXPECTED_ROLES)}
    for node in model.graph.node:
        node.input[:] = [renamed.get(n, n) for n in node.input]
        node.output[:] = [renamed.get(n, n) for n in node.output]
    for v in [*model.graph.input, *model.graph.output, *model.graph.initializer]:
        v.name = renamed.get(v.name, v.name)
    graph = load_graph(model, dims={"batch": 2})
    for name, role in EXPECTED_ROLES.items():
        assert graph.tensor(renamed[name]).role is role, name


def test_inference_graph_has_no_loss_and_is_all_forward():
    graph = load_graph(relu_chain(3))
    assert graph.loss is None
    assert {op.region for op in graph.ops} == {Region.FORWARD}
    assert graph.tensor("t0").role is TensorRole.DATA


def test_ops_and_tensors_are_consistent():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 2})
    for op in graph.ops:
        for t in op.input_ids:
            assert op.id in graph.tensors[t].consumers
        for t in op.output_ids:
            assert graph.tensors[t].producer == op.id


def test_inspect_cli_one_line_and_json(tmp_path, capsys):
    path = tmp_path / "step.onnx"
    path.write_bytes(tiny_momentum_step().SerializeToString())
    assert main(["inspect", str(path), "--dim", "batch=2"]) == 0
    line = capsys.readouterr().out.strip()
    assert "11 ops" in line and "12 parameters" in line and "loss loss" in line
    assert main(["inspect", str(path), "--dim", "batch=2", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["ops"] == 11
    assert summary["ops_by_region"] == {"forward": 4, "backward": 3, "optimizer": 4}
    assert summary["bytes_by_role"]["parameter"] == 48
