"""Repeat a measurement until it is stable, and time a kernel without the cost of a session run.

A `session.run` costs a fixed few microseconds beyond the kernel (binding, execution frame), which
would swamp the many sub-microsecond ops of a training graph. Cheap ops are therefore timed
differentially: one session runs the op once, another runs k identical copies of it on the same
inputs; (t_k - t_1) / (k - 1) is the time of one kernel execution, with the run's fixed cost
cancelled out (including any input copies that the run makes). Ops slower than a threshold are
timed from the one-copy session minus the device's calibrated run overhead.

The threshold is low (20 us, or ten run overheads where a run costs more, as on a GPU) because
the differential figure is biased for any op whose operands outgrow the first-level cache:
copies 2..k find the inputs the first copy just read in L1, while in a training step they come
from L2 or further, written long before. On the fixtures and bench models (1 thread, the
runtime's fused step of the keep-everything plan over the per-op sum), a 200 us threshold
predicted UNet-small's step 1.12-1.15x too fast, ResNet-18-narrow's 1.20-1.23x, MobileNetV2's
1.14x; at 20 us: 1.07-1.08x, 1.14-1.19x, 1.06x (GPT-2-small, mostly large ops: 0.99x,
then 0.90x, predicted too slow). The one-copy figure minus a run overhead a tenth
its size or less loses little to that overhead's noise. `METHOD_REVISION` names the rule in
the profile cache's key, so costs measured under another rule are measured again.

An op whose output may share an input's storage in a plan (planner.memory.sharing: a view, an
in-place op) is also timed with its output on that input's bytes (planner.profile.op_runner), from
`in_place_above_bytes` of output: a view's kernel then copies nothing, a scatter skips copying its
data, an elementwise kernel writes lines it has just read. Priced at the out-of-place figure,
GPT-2-small's keep-everything step was predicted 1.10x the runtime's; with the in-place figure
where the plan shares storage, 1.04x (same profile run, planner.profile.costs.CostTable).

Timed directly on the CPU, each run starts with the op's operands pushed out of the core's own
cache (planner.profile.op_runner: twice that cache's bytes written first, untimed). Run after run,
they would stay there, which no step gives them: other ops run between an operand's writing and
its reading. ResNet-18-narrow's convolutions took 1.12x, its transposed convolutions 1.21x their
hot isolated time inside ONNX Runtime's whole step (its profiler); after a 4 MiB write (this
host's core has 2 MiB) isolated: 1.08x and 1.19x. That raised the predicted keep-everything step
of ResNet-18-narrow 9.6% and of MobileNetV2 7.3%, which the runtime measured 1.13-1.17x their
hot-timed predictions.

Stopping rule: after warm-up runs, samples are taken in batches; after each batch the median of
all samples so far is recorded, and sampling stops once the last three medians agree within a
relative tolerance (or an absolute floor for sub-microsecond ops), or the repeat count or the
per-op time cap is reached (an op slower than the cap still gets 3 timed runs). The result is the
median and the interquartile range of the samples.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Runner = Callable[[], None]
Clock = Callable[[], int]  # nanoseconds
WALL_CLOCK: Clock = time.perf_counter_ns
# One thread's CPU time: what a kernel run on the calling thread costs, however many other
# processes share the cores (a wall clock on a loaded machine measures their turns too).
THREAD_CLOCK: Clock = time.thread_time_ns
CLOCKS: dict[str, Clock] = {"wall": WALL_CLOCK, "thread-cpu": THREAD_CLOCK}
# The rule that picks the differential or the direct figure (see the module docstring); a cached
# cost measured under another revision is measured again.
METHOD_REVISION = "direct-above-20us-or-10-overheads;in-place-from-512KiB;operands-out-of-L2"
_MIN_SAMPLES = 3  # even an op slower than the time cap is timed this many times


@dataclass(frozen=True)
class TimingPolicy:
    warmup_runs: int = 3
    batch: int = 5
    min_repeats: int = 10
    max_repeats: int = 200
    rel_tolerance: float = 0.05
    abs_tolerance_seconds: float = 2e-7
    max_seconds_per_op: float = 0.5
    copies: int = 4
    direct_above_seconds: float = 2e-5
    direct_above_overheads: float = 10.0  # ... or this many run overheads, whichever is more
    max_copies_bytes: int = 64 * 1024 * 1024
    # Ops whose output may share an input's storage are timed that way too from this many output
    # bytes (planner.profile.op_runner): below, both runs stay in the caches and cost the same
    # (a 256 KiB Mul: 9.6 us and 11.7 us; 1 MiB: 103 us and 44 us; 16 MiB: 1.8 ms and 1.2 ms).
    in_place_above_bytes: int = 512 * 1024

    def __post_init__(self) -> None:
        if self.copies < 2 or self.batch < 1 or self.min_repeats < 1:
            raise ValueError("copies must be >= 2, batch and min_repeats >= 1")
        if self.max_repeats < self.min_repeats:
            raise ValueError("max_repeats must be >= min_repeats")


DEFAULT_POLICY = TimingPolicy()
# For tests and quick looks: fewer repeats, a tighter time cap.
QUICK_POLICY = TimingPolicy(warmup_runs=2, batch=5, min_repeats=5, max_repeats=40,
                            rel_tolerance=0.1, max_seconds_per_op=0.1)


@dataclass(frozen=True)
class Timing:
    median: float
    spread: float  # interquartile range
    repeats: int


def timed(run: Runner, clock: Clock = WALL_CLOCK, prepare: Runner | None = None) -> float:
    """One run of `run` on `clock`, after an untimed `prepare` (say, restoring an input that the
    previous run wrote over)."""
    if prepare is not None:
        prepare()
    start = clock()
    run()
    return (clock() - start) * 1e-9


def median_time(run: Runner, n: int, clock: Clock = WALL_CLOCK) -> float:
    return statistics.median(timed(run, clock) for _ in range(n))


def sample_until_stable(sample: Callable[[], float], policy: TimingPolicy) -> Timing:
    """Call `sample` (one timing in seconds) in batches until the running median is stable."""
    samples: list[float] = []
    medians: list[float] = []
    deadline = time.perf_counter() + policy.max_seconds_per_op
    while True:
        for _ in range(policy.batch):
            samples.append(sample())
            if len(samples) >= _MIN_SAMPLES and time.perf_counter() >= deadline:
                break
        medians.append(statistics.median(samples))
        if len(samples) >= policy.max_repeats or time.perf_counter() >= deadline:
            break
        if len(samples) >= policy.min_repeats and len(medians) >= 3:
            recent = medians[-3:]
            allowed = max(policy.rel_tolerance * statistics.median(recent),
                          policy.abs_tolerance_seconds)
            if max(recent) - min(recent) <= allowed:
                break
    q1, q3 = np.percentile(samples, [25, 75])
    return Timing(median=statistics.median(samples), spread=float(q3 - q1),
                  repeats=len(samples))


def time_kernel(run_one: Runner, make_run_copies: Callable[[], tuple[Runner, int] | None],
                overhead: float, policy: TimingPolicy, clock: Clock = WALL_CLOCK,
                prepare: Runner | None = None, evict: Runner | None = None) -> Timing:
    """Time one execution of a kernel on `clock`; `run_one` runs it once per call
    (synchronized), each run after an untimed `prepare` if given.

    `make_run_copies()` returns (a runner of k copies, k), or None when copies are not possible;
    it is only called for ops cheap enough to need the differential measurement. `evict` (untimed)
    runs before each sample timed directly, after `prepare`: on the CPU it pushes the operands
    out of the core's own cache (planner.profile.op_runner), as the ops run in between do in a
    training step.
    """
    # Warm-up and the probe that picks the method get at most a quarter of the time cap each, so
    # an op that takes seconds is not run a dozen times.
    budget = policy.max_seconds_per_op / 4
    start = time.perf_counter()
    for _ in range(policy.warmup_runs):
        timed(run_one, clock, prepare)
        if time.perf_counter() - start > budget:
            break
    probes = [timed(run_one, clock, prepare)]
    while len(probes) < 3 and probes[-1] * len(probes) < budget:
        probes.append(timed(run_one, clock, prepare))
    probe = statistics.median(probes)
    direct_above = max(policy.direct_above_seconds, policy.direct_above_overheads * overhead)
    copies = None if probe >= direct_above else make_run_copies()
    if copies is None:
        def before() -> None:
            if prepare is not None:
                prepare()
            if evict is not None:
                evict()

        def sample() -> float:
            return max(0.0, timed(run_one, clock, before) - overhead)
    else:
        run_k, k = copies
        for _ in range(policy.warmup_runs):
            run_k()

        def sample() -> float:
            return max(0.0, (timed(run_k, clock, prepare) - timed(run_one, clock, prepare))
                       / (k - 1))
    return sample_until_stable(sample, policy)
