"""Profiles on disk: the JSON round trip, refusing a profile of another model, the CLI."""

from __future__ import annotations

import json

import pytest

from arenaplan.cli import main
from planner.errors import InvalidInputError
from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, copy_seconds, load_profile, profile_graph, save_profile
from planner.profile.copies import fit_line
from schemas.optimized_graph import SERVICE_DEFAULT
from schemas.profile import CopyFit, CopySample, Profile
from tests.support.fixture_zoo import FIXTURE_DIR
from tests.support.onnx_builders import relu_chain, tiny_momentum_step


@pytest.fixture(scope="module")
def step_profile():
    graph = load_graph(tiny_momentum_step(), dims={"batch": 8})
    return graph, profile_graph(graph, cache=None, policy=QUICK_POLICY)


def test_save_load_round_trip(tmp_path, step_profile):
    graph, profile = step_profile
    path = tmp_path / "prof.json"
    save_profile(profile, path)
    loaded = load_profile(path, graph)
    assert loaded == profile
    assert json.loads(path.read_text())["model_sha256"] == graph.model_sha256


def test_load_profile_refuses_another_model(tmp_path, step_profile):
    _, profile = step_profile
    path = tmp_path / "prof.json"
    save_profile(profile, path)
    with pytest.raises(InvalidInputError, match="another model"):
        load_profile(path, load_graph(relu_chain(3)))
    # same op count but different op types
    other = load_graph(relu_chain(len(profile.ops)))
    with pytest.raises(InvalidInputError, match="op #0 is MatMul"):
        load_profile(path, other)


def test_load_profile_accepts_a_reexport_with_the_same_ops(tmp_path, step_profile):
    graph, profile = step_profile
    renamed = tiny_momentum_step()
    renamed.graph.name = "renamed"  # different bytes, same ops
    other = load_graph(renamed, dims={"batch": 8})
    assert other.model_sha256 != graph.model_sha256
    path = tmp_path / "prof.json"
    save_profile(profile, path)
    assert load_profile(path, other).model_sha256 == graph.model_sha256


def test_load_profile_refuses_garbage(tmp_path, step_profile):
    graph, profile = step_profile
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(InvalidInputError, match="not a valid arenaplan profile"):
        load_profile(path, graph)
    data = json.loads(profile.model_dump_json())
    data["ops"][0]["costs"]["cpu"]["median_seconds"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(InvalidInputError, match="median_seconds"):
        load_profile(path, graph)
    with pytest.raises(InvalidInputError, match="cannot read"):
        load_profile(tmp_path / "missing.json", graph)


def test_copy_fit_and_copy_seconds(step_profile):
    _, profile = step_profile
    latency, bandwidth = 5e-6, 10e9
    samples = [CopySample(nbytes=n, median_seconds=latency + n / bandwidth, repeats=5)
               for n in (4096, 1 << 20, 8 << 20, 32 << 20)]
    fit_latency, fit_bandwidth = fit_line(samples)
    assert fit_latency == pytest.approx(latency, rel=1e-6)
    assert fit_bandwidth == pytest.approx(bandwidth, rel=1e-6)
    fit = CopyFit(src="cpu", dst="cuda:0", latency_seconds=fit_latency,
                  bytes_per_second=fit_bandwidth, method="synthetic", samples=samples)
    with_copies = profile.model_copy(update={"copies": [fit]})
    assert copy_seconds(with_copies, "cpu", "cuda:0", 10**9) == pytest.approx(0.1 + 5e-6)
    assert copy_seconds(with_copies, "cpu", "cpu", 10**9) == 0.0
    with pytest.raises(InvalidInputError, match="no copy cost from cuda:0 to cpu"):
        copy_seconds(with_copies, "cuda:0", "cpu", 100)
    with pytest.raises(InvalidInputError, match="no copies"):
        copy_seconds(profile, "cpu", "cuda:0", 100)


def test_cli_profile_writes_a_profile_and_uses_its_cache(tmp_path, capsys):
    model = FIXTURE_DIR / "mlp_sgd.onnx"
    out, cache = tmp_path / "prof.json", tmp_path / "cache.sqlite"
    args = ["profile", str(model), "--inputs", str(FIXTURE_DIR / "mlp_sgd.inputs.npz"),
            "--cache", str(cache), "-o", str(out)]
    assert main(args) == 0
    err = capsys.readouterr().err
    assert "profile:" in err and "100%" in err  # plain log lines: stderr is not a TTY here
    profile = Profile.model_validate_json(out.read_text())
    graph = load_graph(model, optimization=SERVICE_DEFAULT)  # the graph the CLI plans
    assert len(profile.ops) == len(graph.ops)
    assert all("cpu" in o.costs for o in profile.ops)
    assert main([*args, "--quiet"]) == 0
    again = Profile.model_validate_json(out.read_text())
    assert again.cache.hits == len(graph.ops) and again.cache.misses == 0
    assert capsys.readouterr().err == ""


def test_cli_no_cache_dims_and_errors(tmp_path, capsys):
    model = tmp_path / "step.onnx"
    model.write_bytes(tiny_momentum_step().SerializeToString())
    out = tmp_path / "p.json"
    assert main(["profile", str(model), "--dim", "batch=4", "--no-cache", "--quiet",
                 "--threads", "2", "-o", str(out)]) == 0
    profile = Profile.model_validate_json(out.read_text())
    assert profile.cache.path is None and profile.machine.threads == 2
    assert main(["profile", str(model), "--dim", "batch=4", "--device", "tpu", "-o",
                 str(out)]) == 2
    assert "unknown device 'tpu'" in capsys.readouterr().err
    assert main(["profile", str(model), "--dim", "batch=4", "--inputs",
                 str(tmp_path / "none.npz"), "-o", str(out)]) == 2
    assert "not found" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["profile", str(model), "--cache", "x", "--no-cache", "-o", str(out)])


def test_cli_memory_allowance_reaches_the_profiler(tmp_path, capsys):
    model = FIXTURE_DIR / "gpt2_tiny_adam.onnx"
    out = tmp_path / "prof.json"
    # 16 KiB: below the inputs of the attention's and the LM head's ops (64 KiB is above all)
    assert main(["profile", str(model), "--no-cache", "--memory-allowance", "16KiB", "-o",
                 str(out)]) == 0
    err = capsys.readouterr().err
    assert "exceed the capture's memory allowance of 16.0 KiB" in err
    profile = Profile.model_validate_json(out.read_text())
    assert any(o.costs["cpu"].source == "estimated" for o in profile.ops)


@pytest.mark.parametrize("size", ["lots", "12XB", "-1MiB", "0"])
def test_cli_memory_allowance_refuses_a_bad_size_with_usage_error(tmp_path, capsys, size):
    with pytest.raises(SystemExit) as exited:
        main(["profile", str(FIXTURE_DIR / "mlp_sgd.onnx"), f"--memory-allowance={size}", "-o",
              str(tmp_path / "p.json")])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "--memory-allowance" in err and "Traceback" not in err
    assert ("positive size" if size == "0" else "expected a size such as 512MiB") in err
