"""Whether a device still runs as fast as when its cached costs were measured.

A shared or virtual host's speed drifts, and the machine fingerprint in the cache key (CPU model,
core count, GPU name) cannot see it: this development machine ran GPT-2-tiny's ops 2-3x slower
one day than two days before (the step predicted from the cached profile: 0.62 ms then, 1.2-1.9
ms measured again), so every cached cost, and every plan's predicted step time, was off by that
much. So each device's costs are kept per *speed epoch*: a reference kernel (a REFERENCE_N^3
float MatMul, timed on the clock the device's ops are) is timed at most every RECHECK_S seconds
per process, and the cached costs of an epoch are used only while the reference time recorded
when that epoch began is within SPEED_TOLERANCE of it either way (the closest such epoch when
several are). Otherwise a new epoch begins under a new random name, and the ops are measured
again; the profile's progress says by how much the speed moved.

Epochs are recorded in the cache file (ProfileCache.put_value). Two processes that begin an
epoch at once may each write the record without the other's epoch; the costs measured under the
lost one are then never asked for again (measured again later, never misused).
"""

from __future__ import annotations

import json
import math
import secrets
import time
from dataclasses import dataclass

import onnxruntime as ort

from planner.profile.cache import ProfileCache
from planner.profile.devices import Device
from planner.profile.estimate import matmul_seconds
from planner.profile.op_runner import kernel_clock

# Cached costs are reused while the reference kernel runs within this factor of its time when
# they were measured (either way). On this shared host its timings lie within 0.46-0.55 ms for
# minutes, then at 0.90-0.95 ms for a while (20 timings in five processes): the factor keeps
# those states apart, and a step predicted 25% off is outside the 15% plans are held to.
SPEED_TOLERANCE = 1.25
REFERENCE_N = 256  # about 1 ms on one core of the development machine
# A process (the service) times the reference again after this long.
RECHECK_S = 600.0

_timed: dict[tuple[str, int], tuple[float, float]] = {}  # (device, threads) -> (when, seconds)


@dataclass(frozen=True)
class SpeedEpoch:
    name: str  # goes into the cache key's machine field (planner.profile.runner)
    # the reference time now over the closest recorded epoch's, when a new epoch began beside
    # older ones (None: an existing epoch was reused, or none existed)
    drift: float | None = None


def reference_seconds(device: Device, threads: int) -> float:
    """The reference kernel's time on `device` now (timed at most every RECHECK_S)."""
    key = (device.name, threads)
    found = _timed.get(key)
    if found is None or time.monotonic() - found[0] > RECHECK_S:
        found = (time.monotonic(), matmul_seconds(device, threads, REFERENCE_N))
        _timed[key] = found
    return found[1]


def speed_epoch(store: ProfileCache, fingerprint: str, device: Device, threads: int
                ) -> SpeedEpoch:
    """The epoch whose cached costs `device` may reuse now, begun now if none is close enough
    (see the module doc)."""
    now = reference_seconds(device, threads)
    key = json.dumps(["speed-epochs", fingerprint, device.provider, threads, ort.__version__,
                      kernel_clock(device, threads)])
    epochs = _recorded(store.get_value(key))
    closest = min(epochs.items(), key=lambda e: abs(math.log(e[1] / now)), default=None)
    if closest is not None and abs(math.log(closest[1] / now)) <= math.log(SPEED_TOLERANCE):
        return SpeedEpoch(closest[0])
    name = secrets.token_hex(6)  # never an earlier epoch's name, whose costs it must not reuse
    epochs[name] = now
    store.put_value(key, json.dumps(epochs))
    return SpeedEpoch(name, None if closest is None else now / closest[1])


def _recorded(text: str | None) -> dict[str, float]:
    """The epochs a cache file records (name -> reference seconds); a record this code cannot
    read (a damaged file, another version's format) counts as none, so its costs are measured
    again rather than the profile failing."""
    try:
        found = json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(k): float(v) for k, v in found.items()
            if isinstance(v, int | float) and math.isfinite(v) and v > 0}
