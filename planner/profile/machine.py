"""Describe the machine a profile is measured on, and fingerprint it for the cache key."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from pathlib import Path

import onnxruntime as ort

from planner.profile.devices import Device
from schemas.profile import MachineInfo


def cpu_model() -> str:
    """The CPU's marketing name (Linux /proc/cpuinfo, else what the platform module knows)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Processor", "cpu model") and value.strip():
                return value.strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown cpu"


def gpu_name(index: int) -> str:
    """The name of CUDA GPU `index` from nvidia-smi or the driver's /proc entries."""
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run(
                [smi, "--query-gpu=name", "--format=csv,noheader", "-i", str(index)],
                capture_output=True, text=True, timeout=10, check=True,
            ).stdout.strip()
            if out:
                return out.splitlines()[0].strip()
        except (OSError, subprocess.SubprocessError):
            pass
    entries = sorted(Path("/proc/driver/nvidia/gpus").glob("*/information"))
    if index < len(entries):
        for line in entries[index].read_text(errors="replace").splitlines():
            if line.startswith("Model:"):
                return line.partition(":")[2].strip()
    return f"unknown CUDA GPU {index}"


# A core's own cache when the machine does not say (a common L2 size per core).
DEFAULT_PRIVATE_CACHE_BYTES = 2 * 1024 * 1024
_SIZE_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}


def private_cache_bytes() -> int:
    """The largest cache of CPU 0 that no other core shares (Linux sysfs: its level-2 cache on
    most machines; 2 MiB on this one), else DEFAULT_PRIVATE_CACHE_BYTES."""
    largest = 0
    for index in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*"):
        try:
            shared, size, kind = ((index / name).read_text().strip()
                                  for name in ("shared_cpu_list", "size", "type"))
        except OSError:
            continue
        if shared != "0" or kind == "Instruction":
            continue
        number, unit = (size[:-1], size[-1]) if size[-1:] in _SIZE_UNITS else (size, "")
        if number.isdigit():
            largest = max(largest, int(number) * _SIZE_UNITS.get(unit, 1))
    return largest or DEFAULT_PRIVATE_CACHE_BYTES


def fingerprint(cpu: str, cores: int, gpus: dict[str, str]) -> str:
    text = json.dumps({"cpu": cpu, "cores": cores, "gpus": gpus}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def describe_machine(devices: list[Device], threads: int,
                     providers: dict[str, list[str]]) -> MachineInfo:
    cpu = cpu_model()
    cores = os.cpu_count() or 1
    gpus = {d.name: gpu_name(d.index) for d in devices if d.is_gpu}
    return MachineInfo(
        cpu_model=cpu,
        cpu_cores=cores,
        threads=threads,
        gpus=gpus,
        onnxruntime_version=ort.__version__,
        providers=providers,
        platform=f"{platform.system()} {platform.machine()} python {platform.python_version()}",
        fingerprint=fingerprint(cpu, cores, gpus),
    )
