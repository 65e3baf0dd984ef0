"""What a process really uses: resident memory now, its peak, and the peak's growth over a span;
and what a plan promises about it.

Linux keeps the peak resident set (VmHWM in /proc/self/status) and lets a process reset it by
writing "5" to /proc/self/clear_refs, so the peak of a span of work (e.g. N training steps) can be
measured in-process. Where that is not possible the peak since process start is reported and
marked as such. glibc's malloc makes these figures noisy (REFERENCES.md: ~10% between identical
runs); the arena bytes the runtime allocates itself are the exact figure.

A plan bounds the host memory of its training steps: each host device's arena plus its
workspace (kernel scratch measured per op, `DevicePlan.workspace_bytes`), plus a fixed
per-process overhead that no plan accounts for: `HOST_OVERHEAD_BYTES` covers what ONNX Runtime
and the interpreter allocate while steps run (per-run bookkeeping, thread-local GEMM packing
buffers, the allocator's page granularity and fragmentation). Kernel scratch that ONNX Runtime
allocates comes from the plan's workspace (on the host one arena of that size,
runtime.host_workspace). What is still malloc'd (scratch of a plan without a measured
workspace, buffers kernels allocate themselves) stays within the overhead only if freed blocks
go back to the OS: glibc's malloc otherwise raises its mmap threshold as large blocks are freed
(up to 32 MiB) and keeps up to twice that of freed heap resident, so the heap grows past what
is live (UNet, malloc'd scratch: 237 MiB during steps against 209 MiB reserved).
`pin_malloc_thresholds` fixes both thresholds, as `arenaplan run --strict-memory` does (UNet:
176 MiB). It costs page faults on every large block malloc'd (5-15% more CPU time on the
convolutional bench models when their scratch was malloc'd), so a plain run leaves glibc as it
is. Measured on the fixtures and the bench-scale models (bench/runtime/results.md) the steps of
pinned processes stay within the reserved bytes plus the overhead.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import resource
from dataclasses import dataclass, field
from pathlib import Path

from runtime.devices import parse_device
from schemas.plan import DevicePlan, Plan

HOST_OVERHEAD_BYTES = 16 << 20  # fixed per-process overhead on top of a plan's host bytes

MALLOC_THRESHOLD_BYTES = 128 << 10  # glibc's own starting mmap threshold
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters (malloc.h)

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def rss_bytes() -> int:
    kib = _status_kib("VmRSS")
    return kib * 1024 if kib is not None else 0


def peak_rss_bytes() -> int:
    kib = _status_kib("VmHWM")
    if kib is not None:
        return kib * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def reset_peak_rss() -> bool:
    """Make the peak equal the current resident set; False where the OS does not allow it."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def pin_malloc_thresholds(threshold: int = MALLOC_THRESHOLD_BYTES) -> bool:
    """Fix glibc's mmap and trim thresholds for this process (allocations from `threshold` up
    are mapped and unmapped on free; a heap top freed beyond it is trimmed). False where the C
    library is not glibc. Process-wide: for the process that runs the steps, not a library."""
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
        mallopt = libc.mallopt if libc is not None else None
    except (OSError, AttributeError):
        return False
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, threshold))


@dataclass
class PeakGrowth:
    """Peak resident set growth over a span of work, sampled after each unit of it."""

    baseline: int = 0
    reset_ok: bool = False
    peaks: list[int] = field(default_factory=list)  # peak after each sample, minus baseline

    @classmethod
    def start(cls) -> PeakGrowth:
        reset_ok = reset_peak_rss()
        return cls(baseline=rss_bytes(), reset_ok=reset_ok)

    def rearm(self) -> None:
        """Reset the peak to the current resident set, keeping the baseline: the next sample
        leaves out transient peaks of work done since the last one (e.g. a reference run)."""
        reset_peak_rss()

    def sample(self) -> int:
        growth = peak_rss_bytes() - self.baseline
        self.peaks.append(growth)
        return growth

    @property
    def growth(self) -> int:
        return max(self.peaks, default=0)


def _is_host(device: str) -> bool:
    return not parse_device(device).is_cuda


def host_devices(plan: Plan) -> list[DevicePlan]:
    """The plan's devices whose arenas are host memory (`cpu`, `cpu:N`)."""
    return [d for d in plan.devices if _is_host(d.device)]


def host_reserved_bytes(plan: Plan) -> int:
    """Host bytes the plan reserves for a step: arenas plus workspaces of its host devices."""
    return sum(d.arena_bytes + d.workspace_bytes for d in host_devices(plan))


def host_budget_bytes(plan: Plan) -> int:
    """The request's budgets of the plan's host devices, summed."""
    return sum(size for device, size in plan.request.budgets.items() if _is_host(device))
