"""Copy costs between devices: a sweep of transfer sizes, fitted by least squares to
`latency + nbytes / bandwidth` (the solver's per-tensor copy cost, XEngine's w[e, d, d']).

Host -> device writes a host array into a preallocated device OrtValue (`update_inplace`, a
synchronous copy); device -> host reads a device OrtValue into host memory (`numpy()`, also
synchronous). Both directions are measured, because they differ. A copy between two GPUs is
modelled as going through the host (device -> host then host -> device). Only pairs with a GPU are
measured (the host is always
there, so a GPU-only profile still gets its host copies); a CPU-only profile has no copies.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import onnxruntime as ort

from planner.errors import InvalidInputError
from planner.profile.devices import Device
from planner.profile.timing import median_time
from schemas.profile import CopyFit, CopySample, Profile

DEFAULT_SIZES = (4 << 10, 64 << 10, 1 << 20, 8 << 20, 32 << 20)


def fit_line(samples: Sequence[CopySample]) -> tuple[float, float]:
    """Least-squares (latency_seconds, bytes_per_second) through (nbytes, seconds) samples;
    the latency is clamped at 0 and the slope kept positive."""
    if not samples:
        raise ValueError("no copy samples to fit")
    x = np.array([s.nbytes for s in samples], dtype=float)
    y = np.array([s.median_seconds for s in samples], dtype=float)
    if len(samples) == 1 or np.ptp(x) == 0:
        slope, latency = float(y.mean() / max(x.mean(), 1.0)), 0.0
    else:
        design = np.stack([np.ones_like(x), x], axis=1)
        (latency, slope), *_ = np.linalg.lstsq(design, y, rcond=None)
        if latency < 0:  # refit through the origin
            latency, slope = 0.0, float((x @ y) / (x @ x))
    slope = max(float(slope), 1e-15)
    return max(0.0, float(latency)), 1.0 / slope


def _sweep(copy_fn_for: Callable[[int], Callable[[], None]], sizes: Sequence[int],
           repeats: int) -> list[CopySample]:
    samples = []
    for nbytes in sizes:
        run = copy_fn_for(nbytes)
        run()  # warm-up: first-touch of host pages, allocator growth
        samples.append(CopySample(nbytes=nbytes, median_seconds=median_time(run, repeats),
                                  repeats=repeats))
    return samples


def _host_to_device(gpu: Device) -> Callable[[int], Callable[[], None]]:
    def make(nbytes: int) -> Callable[[], None]:
        host = np.ones(max(1, nbytes // 4), np.float32)
        target = ort.OrtValue.ortvalue_from_shape_and_type(list(host.shape), np.float32, "cuda",
                                                           gpu.index)
        return lambda: target.update_inplace(host)
    return make


def _device_to_host(gpu: Device) -> Callable[[int], Callable[[], None]]:
    def make(nbytes: int) -> Callable[[], None]:
        source = ort.OrtValue.ortvalue_from_numpy(np.ones(max(1, nbytes // 4), np.float32),
                                                  "cuda", gpu.index)
        return lambda: source.numpy()
    return make


def _fit(src: str, dst: str, samples: list[CopySample], method: str) -> CopyFit:
    latency, bandwidth = fit_line(samples)
    return CopyFit(src=src, dst=dst, latency_seconds=latency, bytes_per_second=bandwidth,
                   method=method, samples=samples)


def measure_copies(devices: Sequence[Device], sizes: Sequence[int] = DEFAULT_SIZES,
                   repeats: int = 9) -> list[CopyFit]:
    """Fits for every ordered pair of distinct devices with a GPU among them."""
    gpus = [d for d in devices if d.is_gpu]
    if not gpus:
        return []
    fits: dict[tuple[str, str], CopyFit] = {}
    for gpu in gpus:
        fits[("cpu", gpu.name)] = _fit("cpu", gpu.name, _sweep(_host_to_device(gpu), sizes,
                                                              repeats),
                                       "OrtValue.update_inplace host->device, synchronous")
        fits[(gpu.name, "cpu")] = _fit(gpu.name, "cpu", _sweep(_device_to_host(gpu), sizes,
                                                              repeats),
                                       "OrtValue.numpy device->host, synchronous")
    for a in gpus:
        for b in gpus:
            if a != b:
                down, up = fits[(a.name, "cpu")], fits[("cpu", b.name)]
                fits[(a.name, b.name)] = CopyFit(
                    src=a.name, dst=b.name,
                    latency_seconds=down.latency_seconds + up.latency_seconds,
                    bytes_per_second=1.0 / (1.0 / down.bytes_per_second
                                            + 1.0 / up.bytes_per_second),
                    method="via host: device->host fit + host->device fit", samples=[])
    return list(fits.values())


def copy_seconds(profile: Profile, src: str, dst: str, nbytes: int) -> float:
    """Time to copy `nbytes` from device `src` to device `dst` under the profile's fits."""
    if src == dst or nbytes <= 0:
        return 0.0
    for fit in profile.copies:
        if fit.src == src and fit.dst == dst:
            return fit.latency_seconds + nbytes / fit.bytes_per_second
    raise InvalidInputError(
        f"the profile has no copy cost from {src} to {dst} (it covers "
        f"{', '.join(f'{f.src}->{f.dst}' for f in profile.copies) or 'no copies'}); profile with "
        "both devices, e.g. --device cpu --device cuda:0"
    )
