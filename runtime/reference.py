"""The yardstick: the whole training graph in one ONNX Runtime session, stepped like the runtime.

Each step feeds the state values (the previous step's updated outputs, per plan.state_updates)
and the data inputs, and keeps every output. Comparing a plan's run with this, step by step, is
what `arenaplan run --check` reports.

A plan of the model as sent is compared with a session that runs that model unoptimized, like
the runtime's kernels: the results are bit-identical. A plan of ONNX Runtime's optimized graph
(plan.optimized_graph) is compared with what a user would run instead, ONNX Runtime's default
session (all optimizations) on the model as sent; fusions and other kernels round differently,
so the check accepts `OPTIMIZED_TOLERANCE` there (`check_reference`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping

import numpy as np
import onnxruntime as ort

from runtime.kernels import OPTIMIZATION_LEVELS
from runtime.model import RuntimeModel
from schemas.plan import Plan

# Largest max-abs difference `--check` accepts by default: with the plan's graph as sent (the
# same kernels, the same order: bit-identical, up to this), and with an optimized graph against
# ONNX Runtime's default session (measured: bench/runtime/optimized_graphs.md).
EXACT_TOLERANCE = 1e-5
OPTIMIZED_TOLERANCE = 1e-4


def check_reference(plan: Plan, kernel_optimization: str = "disable") -> tuple[str, float]:
    """The reference session's optimization level and the default tolerance for `plan`."""
    if plan.optimized_graph is not None:
        return "all", OPTIMIZED_TOLERANCE
    return kernel_optimization, EXACT_TOLERANCE


def reference_options(threads: int = 1, optimization: str = "disable",
                      memory_arena: bool = True, memory_pattern: bool = True
                      ) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.graph_optimization_level = OPTIMIZATION_LEVELS[optimization]
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.enable_cpu_mem_arena = memory_arena
    options.enable_mem_pattern = memory_pattern
    options.log_severity_level = 3
    return options


class ReferenceSession:
    def __init__(self, model: RuntimeModel, state_updates: Mapping[str, str], *,
                 threads: int = 1, optimization: str = "disable", memory_arena: bool = True,
                 memory_pattern: bool = True):
        self.session = ort.InferenceSession(
            model.data, reference_options(threads, optimization, memory_arena, memory_pattern),
            providers=["CPUExecutionProvider"],
        )
        self.state_updates = dict(state_updates)
        self.output_names = [o.name for o in self.session.get_outputs()]
        self.feeds: dict[str, np.ndarray] = {}
        self.last: dict[str, np.ndarray] = {}

    def load_inputs(self, values: Mapping[str, np.ndarray]) -> None:
        self.feeds.update(values)

    def step(self, data: Mapping[str, np.ndarray] | None = None) -> float:
        if data:
            self.feeds.update(data)
        started = time.perf_counter()
        if self.last:
            for state, output in self.state_updates.items():
                self.feeds[state] = self.last[output]
        values = self.session.run(self.output_names, self.feeds)
        seconds = time.perf_counter() - started
        self.last = dict(zip(self.output_names, values, strict=True))
        return seconds


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """Largest |a - b| (NaN where exactly one side is NaN counts as infinite; equal NaNs as 0)."""
    a64 = np.asarray(a, dtype=np.float64)
    b64 = np.asarray(b, dtype=np.float64)
    if a64.shape != b64.shape:
        return float("inf")
    if a64.size == 0:
        return 0.0
    nan_a, nan_b = np.isnan(a64), np.isnan(b64)
    if (nan_a != nan_b).any():
        return float("inf")
    with np.errstate(invalid="ignore"):  # inf - inf: equal infinities count as 0 below
        diff = np.abs(a64 - b64)
    diff = np.where((a64 == b64) | nan_a, 0.0, diff)
    return float(diff.max())


def compare_outputs(actual: Mapping[str, np.ndarray], expected: Mapping[str, np.ndarray]
                    ) -> dict[str, float]:
    """Max abs difference per output name (every name of `expected`)."""
    return {name: max_abs_diff(actual[name], value) for name, value in expected.items()}
