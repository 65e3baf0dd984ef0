"""Plans the runtime must refuse, each with its own error type and CLI exit code 2."""

from __future__ import annotations

import json

import numpy as np
import pytest

from arenaplan.cli import main
from runtime.devices import cuda_device_error
from runtime.errors import (
    ArenaBudgetError,
    DeviceUnavailableError,
    InputValuesError,
    ModelMismatchError,
    PlanCheckError,
    RuntimePlanError,
    UnsupportedPlanVersionError,
)
from runtime.executor import PlanExecutor
from runtime.plan_io import parse_plan
from schemas.errors import ArenaplanError
from schemas.plan import IN_PLACE_OP_TYPES, ComputeStep, FreeStep, Plan
from tests.support.fixture_zoo import FIXTURE_DIR, model_path
from tests.support.runtime_plans import full_budget_plan

NAME = "mlp_sgd"


def plan_dict(name: str = NAME) -> dict:
    return json.loads(full_budget_plan(name).model_dump_json())


def cli(tmp_path, capsys, plan: dict | str, *extra: str, model: str = NAME) -> tuple[int, str]:
    path = tmp_path / "plan.json"
    path.write_text(plan if isinstance(plan, str) else json.dumps(plan))
    code = main(["run", str(model_path(model)), "--plan", str(path), *extra])
    return code, capsys.readouterr().err


def refused(plan: dict | Plan, error: type[Exception], name: str = NAME) -> Exception:
    with pytest.raises(error) as info:
        PlanExecutor(model_path(name), plan if isinstance(plan, Plan) else parse_plan(plan))
    assert isinstance(info.value, ArenaplanError)
    return info.value


def test_errors_are_typed_arenaplan_errors():
    for error in (ArenaBudgetError, DeviceUnavailableError, ModelMismatchError, PlanCheckError,
                  UnsupportedPlanVersionError, InputValuesError):
        assert issubclass(error, RuntimePlanError) and issubclass(error, ArenaplanError)


def test_a_plan_for_another_model(tmp_path, capsys):
    plan = plan_dict()
    with pytest.raises(ModelMismatchError, match="another model"):
        PlanExecutor(model_path("cnn_bn_momentum"), parse_plan(plan))
    code, err = cli(tmp_path, capsys, plan, model="cnn_bn_momentum")
    assert code == 2 and "another model" in err


def version_1(plan: dict) -> dict:
    """The plan as version 1 wrote it: `alias_of` instead of explicit storage."""
    for b in plan["buffers"]:
        b["alias_of"] = None if b["storage"] == b["id"] else b["storage"]
        for key in ("storage", "storage_offset", "shares"):
            del b[key]
    plan["schema_version"] = 1
    return plan


@pytest.mark.parametrize("version", [1, 3, 99])
def test_an_unknown_schema_version(version, tmp_path, capsys):
    plan = plan_dict()
    if version == 1:
        plan = version_1(plan)
    else:
        plan["schema_version"] = version
        plan["a_field_from_the_future"] = True
    with pytest.raises(UnsupportedPlanVersionError, match=f"schema_version {version} ") as info:
        parse_plan(plan)
    assert "runs version 2 only" in str(info.value)
    assert "re-plan the model with this arenaplan" in str(info.value)
    with pytest.raises(UnsupportedPlanVersionError):  # a Plan object built in code, too
        PlanExecutor(model_path(NAME), full_budget_plan(NAME).model_copy(
            update={"schema_version": version}))
    code, err = cli(tmp_path, capsys, plan)
    assert code == 2 and f"schema_version {version} " in err and "re-plan" in err


def test_an_arena_over_its_budget(tmp_path, capsys):
    plan = plan_dict()
    plan["devices"][0]["arena_bytes"] = plan["request"]["budgets"]["cpu"] + 1
    error = refused(plan, ArenaBudgetError)
    assert "budget" in str(error)
    code, err = cli(tmp_path, capsys, plan)
    assert code == 2 and "budget" in err


@pytest.mark.skipif(cuda_device_error(0) is None, reason="this machine has a GPU")
def test_a_device_that_is_not_there(tmp_path, capsys):
    text = full_budget_plan(NAME).model_dump_json().replace('"cpu"', '"cuda:0"')
    text = text.replace('@cpu', '@cuda:0')
    plan = json.loads(text)
    assert plan["request"]["budgets"] == {"cuda:0": plan["devices"][0]["budget_bytes"]}
    error = refused(plan, DeviceUnavailableError)
    assert "cuda:0" in str(error) and "does not have" in str(error)
    code, err = cli(tmp_path, capsys, plan)
    assert code == 2 and "cuda:0" in err


def _broken(kind: str) -> dict:
    plan = plan_dict()
    steps, buffers = plan["steps"], {b["id"]: b for b in plan["buffers"]}
    computes = [i for i, s in enumerate(steps) if s["kind"] == "compute"]
    if kind == "dropped-step":  # an op whose output others read is missing
        del steps[computes[3]]
    elif kind == "read-after-free":  # a free moved before the read it precedes
        first_free = next(i for i, s in enumerate(steps) if s["kind"] == "free"
                          and not buffers[s["buffer"]]["preloaded"])
        freed = steps[first_free]["buffer"]
        producer = next(i for i, s in enumerate(steps) if s["kind"] == "compute"
                        and freed in s["outputs"])
        steps.insert(producer + 1, steps.pop(first_free))
    elif kind == "overlap":  # two storages live at once share bytes
        shared = {b["storage"] for b in plan["buffers"] if b["storage"] != b["id"]}
        transient = [b for b in plan["buffers"] if b["zone"] == "transient" and b["size"] >= 64
                     and b["storage"] == b["id"] and b["id"] not in shared]
        a = transient[0]
        b = next(b for b in transient[1:] if b["first_step"] <= a["last_step"]
                 and a["offset"] + b["size"] <= plan["devices"][0]["arena_bytes"])
        b["offset"] = a["offset"]
    elif kind == "outside-arena":
        plan["buffers"][-1]["offset"] = plan["devices"][0]["arena_bytes"]
    elif kind == "wrong-shape":
        b = next(b for b in plan["buffers"] if b["zone"] == "transient" and len(b["shape"]) == 2)
        b["shape"] = [b["shape"][1], b["shape"][0] * 2]
        b["size"] *= 2
    elif kind == "wrong-op":  # the first compute step names another type's op
        first = steps[computes[0]]
        first["op_id"] = next(steps[i]["op_id"] for i in computes
                              if steps[i]["op_type"] != first["op_type"])
    return plan


@pytest.mark.parametrize("kind,says", [
    ("dropped-step", "before it is written"),
    ("read-after-free", "after its life ended"),
    ("overlap", "overlap in address while both are live"),
    ("outside-arena", "lies outside"),
    ("wrong-shape", "but tensor"),
    ("wrong-op", ", not "),  # "op N is Gemm, not Unsqueeze'
])
def test_a_broken_plan(kind, says, tmp_path, capsys):
    plan = _broken(kind)
    error = refused(plan, PlanCheckError)
    assert any(says in problem for problem in error.problems), error.problems
    code, err = cli(tmp_path, capsys, plan, "--no-validate")
    assert code == 2 and "structural check" in err


def _first(plan: dict, shares: str | None) -> dict:
    return next(b for b in plan["buffers"] if b["shares"] == shares)


def _overwrite_a_live_view(plan: dict) -> set[str]:
    """Hand-made: the output of an elementwise op, an owner of its bytes until now, declared
    in place over an input whose storage a view still has a later reader of. Returns the
    buffers of that storage read later."""
    buffers = {b["id"]: b for b in plan["buffers"]}
    members: dict[str, list[str]] = {}
    for b in plan["buffers"]:
        members.setdefault(b["storage"], []).append(b["id"])
    read_at: dict[str, list[int]] = {}
    for i, s in enumerate(plan["steps"]):
        for b_id in s.get("inputs", []):
            read_at.setdefault(b_id, []).append(i)
    for w, s in enumerate(plan["steps"]):
        if s["kind"] != "compute" or s["op_type"] not in IN_PLACE_OP_TYPES:
            continue
        out = buffers[s["outputs"][0]]
        if members.get(out["id"]) != [out["id"]]:  # an owner with no other buffers
            continue
        for src in (buffers[b] for b in s["inputs"] if b and buffers[b]["size"] == out["size"]):
            later = {m for m in members[src["storage"]] if max(read_at.get(m, [-1])) > w}
            if any(buffers[m]["shares"] == "view" for m in later):
                out.update(storage=src["storage"], offset=src["offset"],
                           storage_offset=src["storage_offset"], shares="in_place")
                return later
    raise AssertionError("no elementwise op reads a storage a view reads later")


def test_a_plan_that_overwrites_a_live_view():
    plan = plan_dict("cnn_bn_momentum")
    read_later = _overwrite_a_live_view(plan)
    error = refused(plan, PlanCheckError, "cnn_bn_momentum")
    assert any(f"reads buffer {b} after its life ended" in problem
               for problem in error.problems for b in read_later), error.problems


@pytest.mark.parametrize("kind,says", [
    ("unknown-storage", "which is no buffer of the plan"),
    ("off-its-storage", "not at its storage"),
    ("owner-that-shares", "owns its storage but says it shares one"),
    ("sharing-without-saying-how", "does not say how it shares it"),
    ("view-written-by-elementwise", "is not a view op"),
    ("in-place-written-by-view", "is not an op that may write over its input"),
])
def test_a_plan_with_broken_storage(kind, says, tmp_path, capsys):
    plan = plan_dict()
    if kind == "unknown-storage":
        _first(plan, "view")["storage"] = "nowhere@cpu"
    elif kind == "off-its-storage":
        _first(plan, "view")["storage_offset"] = 64
    elif kind == "owner-that-shares":
        _first(plan, None)["shares"] = "view"
    elif kind == "sharing-without-saying-how":
        _first(plan, "in_place")["shares"] = None
    elif kind == "view-written-by-elementwise":
        _first(plan, "in_place")["shares"] = "view"
    elif kind == "in-place-written-by-view":
        _first(plan, "view")["shares"] = "in_place"
    error = refused(plan, PlanCheckError)
    assert any(says in problem for problem in error.problems), error.problems
    code, err = cli(tmp_path, capsys, plan, "--no-validate")
    assert code == 2 and says in err


def test_the_injected_validator_is_consulted(tmp_path, capsys):
    plan = full_budget_plan(NAME)
    with pytest.raises(PlanCheckError, match="fails validation: no thanks"):
        PlanExecutor(model_path(NAME), plan, validator=lambda p: ["no thanks"])
    PlanExecutor(model_path(NAME), plan, validator=lambda p: [])  # a happy validator passes


def test_the_cli_runs_the_planner_validator(tmp_path, capsys):
    """A buffer moved off the plan's 64-byte alignment (still element-aligned, inside the arena
    and overlapping nothing) passes the runtime's structural check but not the planner's
    validator, which the CLI injects."""
    plan = plan_dict()
    top = max((b for b in plan["buffers"] if b["storage"] == b["id"]),
              key=lambda b: b["offset"] + b["size"])
    for b in plan["buffers"]:  # the storage ending highest moves, with every buffer in it
        if b["storage"] == top["id"]:
            b["offset"] += 8  # element-aligned for every dtype of the fixture
    plan["devices"][0]["arena_bytes"] += 64
    PlanExecutor(model_path(NAME), parse_plan(plan))  # fine for the runtime itself
    code, err = cli(tmp_path, capsys, plan)
    assert code == 2 and "fails validation" in err and "multiple of 64" in err
    code, _ = cli(tmp_path, capsys, plan, "--no-validate")
    assert code == 0


def test_plan_files_that_are_not_plans(tmp_path, capsys):
    code, err = cli(tmp_path, capsys, "not json at all")
    assert code == 2 and "not JSON" in err
    code, err = cli(tmp_path, capsys, {"hello": "world"})
    assert code == 2 and "not an arenaplan plan" in err
    code = main(["run", str(model_path(NAME)), "--plan", str(tmp_path / "missing.json")])
    assert code == 2


def test_bad_inputs(tmp_path, capsys):
    values = dict(np.load(FIXTURE_DIR / f"{NAME}.inputs.npz"))
    executor = PlanExecutor(model_path(NAME), full_budget_plan(NAME))
    with pytest.raises(InputValuesError, match="no value"):
        executor.step()
    with pytest.raises(InputValuesError, match="float64"):
        executor.load_inputs({"input": values["input"].astype(np.float64)})
    with pytest.raises(InputValuesError, match="not inputs"):
        executor.load_inputs({"nonsense": values["input"]})
    partial = tmp_path / "partial.npz"
    np.savez(partial, input=values["input"])
    code, err = cli(tmp_path, capsys, plan_dict(), "--inputs", str(partial))
    assert code == 2 and "missing" in err


def test_the_structural_check_accepts_every_valid_plan_shape():
    """No false alarms: the pipeline's plan has frees, views, in-place values and reused bytes."""
    plan = full_budget_plan("gpt2_tiny_adam")
    assert any(isinstance(s, FreeStep) for s in plan.steps)
    assert {b.shares for b in plan.buffers} == {None, "view", "in_place"}
    assert sum(isinstance(s, ComputeStep) for s in plan.steps) > 100
    PlanExecutor(model_path("gpt2_tiny_adam"), plan)
