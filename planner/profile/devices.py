"""Devices a profile can name (`cpu`, `cuda:N`) and ONNX Runtime sessions pinned to them.

Whether a device is usable is decided from `session.get_providers()` of a session actually
created with that device's provider, never from `onnxruntime.get_available_providers()` (the GPU
build lists CUDA even on machines without a GPU or without the CUDA libraries).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

import onnxruntime as ort
from onnx import ModelProto, TensorProto, helper

from planner.errors import InvalidInputError

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
_DEVICE_RE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


@dataclass(frozen=True)
class Device:
    """A profiling target: `kind` is "cpu" or "cuda", `index` the GPU ordinal (0 for cpu)."""

    kind: str
    index: int = 0

    @property
    def name(self) -> str:
        return "cpu" if self.kind == "cpu" else f"cuda:{self.index}"

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"

    @property
    def provider(self) -> str:
        return CUDA_PROVIDER if self.is_gpu else CPU_PROVIDER

    @property
    def ortvalue_device(self) -> tuple[str, int]:
        """(device_type, device_id) as OrtValue and IOBinding name this device."""
        return ("cuda", self.index) if self.is_gpu else ("cpu", 0)

    def providers(self) -> list:
        """The provider list for InferenceSession; the device id goes through provider options."""
        if self.is_gpu:
            return [(CUDA_PROVIDER, {"device_id": str(self.index)}), CPU_PROVIDER]
        return [CPU_PROVIDER]


def parse_device(text: str) -> Device:
    """`cpu`, `cuda`, `cuda:1` -> Device; anything else is an InvalidInputError."""
    match = _DEVICE_RE.match(str(text).strip().lower())
    if not match:
        raise InvalidInputError(
            f"unknown device {text!r}; name devices as 'cpu' or 'cuda:N' (e.g. cuda:0)"
        )
    kind, index = match.group(1), match.group(2)
    if kind == "cpu":
        if index not in (None, "0"):
            raise InvalidInputError(f"device {text!r}: there is one CPU device, name it 'cpu'")
        return Device("cpu")
    return Device("cuda", int(index or 0))


def parse_devices(texts: Iterable[str]) -> list[Device]:
    """Parse and de-duplicate device names, keeping the order given."""
    devices = list(dict.fromkeys(parse_device(t) for t in texts))
    if not devices:
        raise InvalidInputError("no device to profile on; name at least one (e.g. 'cpu')")
    return devices


def session_options(threads: int, *, gpu: bool = False, profile_prefix: str | None = None
                    ) -> ort.SessionOptions:
    """Options of every profiling session: no graph optimizations, one explicit intra-op thread
    count, sequential execution; on a GPU, no silent fallback of nodes to the CPU provider."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.log_severity_level = 4  # failures come back as exceptions and are recorded
    if gpu:
        options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if profile_prefix is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile_prefix
    return options


def create_session(model: ModelProto | bytes, device: Device, threads: int,
                   profile_prefix: str | None = None) -> ort.InferenceSession:
    """A session on `device`. Raises RuntimeError when the device's provider was not granted."""
    data = model if isinstance(model, bytes) else model.SerializeToString()
    session = ort.InferenceSession(
        data, session_options(threads, gpu=device.is_gpu, profile_prefix=profile_prefix),
        providers=device.providers(),
    )
    if device.provider not in session.get_providers():
        raise RuntimeError(
            f"onnxruntime did not grant {device.provider} (session providers: "
            f"{session.get_providers()})"
        )
    return session


def probe_model(opset: int = 17, ir_version: int = 10) -> ModelProto:
    """A one-node model (Add of two floats) used to check that a device can run anything."""
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "probe",
        [helper.make_tensor_value_info("a", f, [4]), helper.make_tensor_value_info("b", f, [4])],
        [helper.make_tensor_value_info("c", f, [4])],
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=ir_version
    )


def check_device(device: Device, threads: int) -> list[str]:
    """The providers a session on `device` really gets; InvalidInputError if it is unusable."""
    try:
        session = create_session(probe_model(), device, threads)
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidInputError(
            f"device {device.name} cannot be used on this machine: {first}. Profile on the "
            "devices this machine has (e.g. --device cpu) or on a machine with that GPU and the "
            "CUDA libraries onnxruntime-gpu needs"
        ) from None
    return list(session.get_providers())


def cuda_really_available(index: int = 0) -> bool:
    """True when a session asking for CUDA device `index` really gets the CUDA provider."""
    try:
        check_device(Device("cuda", index), 1)
    except InvalidInputError:
        return False
    return True
