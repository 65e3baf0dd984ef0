"""The machine's cache of ONNX Runtime's rewrites (planner.ir.rewrite_cache): a hit gives the very
bytes a fresh rewrite gives, a damaged entry is a miss, an unwritable cache only costs time, and
the directory stays within its size."""

from __future__ import annotations

import hashlib

from planner.ir import rewrite_cache
from planner.ir.graph import load_graph
from planner.ir.rewrite_cache import DIRECTORY_NAME, cached_optimized_model, entry_key
from schemas.optimized_graph import CPU_PROVIDER, optimized_model
from tests.support.fixture_zoo import model_path

PROVIDERS = [CPU_PROVIDER]


def _entries(directory, name="mlp_sgd"):
    """The entries of `name`'s extended rewrite with the late copies."""
    key = entry_key(model_path(name).read_bytes(), "extended", PROVIDERS, {})
    return sorted((directory / DIRECTORY_NAME).glob(f"{key}-*.onnx"))


def test_a_second_request_reads_the_entry_the_first_wrote(tmp_path):
    data = model_path("mlp_sgd").read_bytes()
    fresh = optimized_model(data, "extended", PROVIDERS)
    assert cached_optimized_model(data, "extended", PROVIDERS, directory=tmp_path) == fresh
    [entry] = _entries(tmp_path)
    assert entry.name.endswith(f"-{hashlib.sha256(fresh).hexdigest()}.onnx")
    before = entry.stat().st_mtime_ns
    assert cached_optimized_model(data, "extended", PROVIDERS, directory=tmp_path) == fresh
    assert _entries(tmp_path) == [entry]  # read, not written again
    assert entry.stat().st_mtime_ns >= before


def test_a_damaged_entry_is_a_miss_and_is_made_again(tmp_path):
    data = model_path("mlp_sgd").read_bytes()
    fresh = cached_optimized_model(data, "extended", PROVIDERS, directory=tmp_path)
    [entry] = _entries(tmp_path)
    entry.write_bytes(fresh[: len(fresh) // 2])  # a truncated file under the right name
    assert cached_optimized_model(data, "extended", PROVIDERS, directory=tmp_path) == fresh
    assert entry.read_bytes() == fresh


def test_the_key_follows_everything_the_bytes_depend_on():
    data = model_path("mlp_sgd").read_bytes()
    base = entry_key(data, "extended", PROVIDERS, {})
    assert len({base, entry_key(data, "basic", PROVIDERS, {}),
                entry_key(data, "extended", ["CUDAExecutionProvider", CPU_PROVIDER], {}),
                entry_key(data, "extended", PROVIDERS, {"batch": 2}),
                entry_key(data + b" ", "extended", PROVIDERS, {}),
                entry_key(data, "extended", PROVIDERS, {}, late_recompute=False)}) == 6
    assert entry_key(data, "extended", PROVIDERS, {}) == base


def test_one_rewrite_keeps_the_graph_with_and_without_the_late_copies(tmp_path):
    data = model_path("gpt2_tiny_adam").read_bytes()
    made = cached_optimized_model(data, "extended", PROVIDERS, directory=tmp_path)
    held = optimized_model(data, "extended", PROVIDERS, late_recompute=False)
    assert made == optimized_model(data, "extended", PROVIDERS) != held
    key = entry_key(data, "extended", PROVIDERS, {}, late_recompute=False)
    [entry] = (tmp_path / DIRECTORY_NAME).glob(f"{key}-*.onnx")
    assert entry.read_bytes() == held
    assert cached_optimized_model(data, "extended", PROVIDERS, directory=tmp_path,
                                  late_recompute=False) == held


def test_an_unwritable_cache_only_costs_time(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    data = model_path("mlp_sgd").read_bytes()
    assert cached_optimized_model(data, "extended", PROVIDERS, directory=blocker) == \
        optimized_model(data, "extended", PROVIDERS)


def test_the_least_recently_used_entries_go_past_the_size_limit(tmp_path, monkeypatch):
    first = model_path("mlp_sgd").read_bytes()
    second = model_path("cnn_bn_momentum").read_bytes()
    kept = cached_optimized_model(second, "extended", PROVIDERS, directory=tmp_path)
    monkeypatch.setattr(rewrite_cache, "MAX_TOTAL_BYTES", len(kept) + 1)
    cached_optimized_model(first, "extended", PROVIDERS, directory=tmp_path)
    left = {path.name.split("-")[0] for path in (tmp_path / DIRECTORY_NAME).glob("*.onnx")}
    newer = {entry_key(first, "extended", PROVIDERS, {}, copies) for copies in (True, False)}
    assert left and left <= newer  # the older model's entries went, with and without copies


def test_a_graph_loaded_from_the_cache_is_the_graph_loaded_fresh(tmp_path, monkeypatch):
    monkeypatch.setenv("ARENAPLAN_CACHE_DIR", str(tmp_path))
    path = model_path("cnn_bn_momentum")
    cold = load_graph(path, optimization="extended")
    assert _entries(tmp_path, "cnn_bn_momentum")
    warm = load_graph(path, optimization="extended")
    assert warm.optimized == cold.optimized
    assert [(o.op_type, o.input_ids, o.output_ids) for o in warm.ops] == \
        [(o.op_type, o.input_ids, o.output_ids) for o in cold.ops]
