"""`arenaplan validate MODEL PLAN`: exit 0 valid, 1 invalid with the reasons, 2 bad input."""

from __future__ import annotations

import json

import pytest

from arenaplan.cli import main
from tests.support.fixture_zoo import model_path


@pytest.fixture(autouse=True)
def _private_profile_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def planned(tmp_path):
    model = str(model_path("mlp_sgd"))
    out = tmp_path / "plan.json"
    assert main(["plan", model, "--budget", "cpu=1GiB", "--time-limit", "1", "-o", str(out)]) == 0
    return model, out


def test_a_valid_plan_exits_0(planned, capsys):
    model, plan = planned
    capsys.readouterr()
    assert main(["validate", model, str(plan)]) == 0
    assert "is valid" in capsys.readouterr().out


def test_an_invalid_plan_exits_1_with_the_reasons(planned, tmp_path, capsys):
    model, plan = planned
    data = json.loads(plan.read_text())
    for buffer in data["buffers"]:  # every buffer at offset 0: live ones overlap
        buffer["offset"] = 0
    data["request"]["budgets"]["cpu"] = 1024  # and the plan is far over this budget
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(data))
    capsys.readouterr()
    assert main(["validate", model, str(bad)]) == 1
    out = capsys.readouterr().out
    assert "INVALID" in out and "overlap" in out and "budget" in out


def test_bad_input_exits_2(planned, tmp_path, capsys):
    model, plan = planned
    not_a_plan = tmp_path / "other.json"
    not_a_plan.write_text('{"hello": 1}')
    for args, message in [
        ([model, str(tmp_path / "missing.json")], "cannot read plan"),
        ([model, str(not_a_plan)], "not an arenaplan plan"),
        ([str(tmp_path / "missing.onnx"), str(plan)], "not found"),
        ([str(model_path("cnn_bn_momentum")), str(plan)], "another model"),
    ]:
        capsys.readouterr()
        assert main(["validate", *args]) == 2, args
        assert message in capsys.readouterr().err, args
