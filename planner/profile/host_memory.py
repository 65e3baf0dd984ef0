"""How much host memory the profiler may fill: what the kernel says is available, and the share
of it a cold profile's captured input values may hold.

Measurements that run a whole graph on the CPU (the per-op profiler's capture, the whole-graph
workspace session) check these first: a planning machine smaller than the training one would
otherwise have the process killed by the kernel's OOM killer, with no message.
"""

from __future__ import annotations

from pathlib import Path

_MEMINFO = Path("/proc/meminfo")
# The share of available memory the captured values of a cold profile may hold at once; the rest
# is for the capture session's own working values (the live set of a training step, freed as the
# run goes) and for measuring one op (its inputs and outputs bound to the device).
CAPTURE_FRACTION = 0.5


def available_host_bytes() -> int | None:
    """The host memory the kernel says is available now (None where it does not say)."""
    try:
        for line in _MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def capture_allowance_bytes(still_to_allocate: int = 0) -> int | None:
    """The bytes of captured values a cold profile may hold at once: CAPTURE_FRACTION of the
    available memory once `still_to_allocate` bytes (graph inputs not drawn yet) are taken from
    it; None where the kernel does not say (no bound, as before the allowance existed)."""
    available = available_host_bytes()
    if available is None:
        return None
    return max(0, int(CAPTURE_FRACTION * (available - still_to_allocate)))
