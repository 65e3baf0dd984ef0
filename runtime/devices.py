"""Plan device names (`cpu`, `cpu:N`, `cuda:N`) as ONNX Runtime sees them, and whether they exist.

`cpu:N` is an extra host arena standing in for a second device: its kernels run on the CPU
provider like `cpu`'s. Whether CUDA device N is usable is decided from `session.get_providers()`
of a probe session created on it: onnxruntime-gpu lists CUDAExecutionProvider as available even
on machines without a GPU.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import onnxruntime as ort
from onnx import TensorProto, helper

from runtime.errors import DeviceUnavailableError

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
_DEVICE = re.compile(r"^(cpu|cuda)(?::(\d+))?$")


@dataclass(frozen=True)
class RuntimeDevice:
    name: str  # as the plan spells it
    kind: str  # "cpu" or "cuda"
    index: int  # GPU ordinal; the host arena number for cpu:N (0 for cpu)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    @property
    def ort_device(self) -> tuple[str, int]:
        """(device_type, device_id) for IOBinding and OrtValue; every host arena is ('cpu', 0)."""
        return ("cuda", self.index) if self.is_cuda else ("cpu", 0)

    def providers(self) -> list:
        if self.is_cuda:
            return [(CUDA_PROVIDER, {"device_id": str(self.index)})]
        return [CPU_PROVIDER]


def parse_device(name: str) -> RuntimeDevice:
    match = _DEVICE.match(name)
    if not match:
        raise DeviceUnavailableError(
            f"unknown device '{name}' in the plan: this runtime runs 'cpu', 'cpu:N' and 'cuda:N'"
        )
    kind, index = match.group(1), int(match.group(2) or 0)
    if kind == "cuda" and match.group(2) is None:
        raise DeviceUnavailableError(f"device '{name}': name GPUs with their ordinal, e.g. cuda:0")
    return RuntimeDevice(name=name, kind=kind, index=index)


def _probe_model() -> bytes:
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        [helper.make_node("Add", ["a", "b"], ["c"])], "probe",
        [helper.make_tensor_value_info("a", f, [4]), helper.make_tensor_value_info("b", f, [4])],
        [helper.make_tensor_value_info("c", f, [4])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString()


@functools.cache
def cuda_device_error(index: int) -> str | None:
    """None when a session asking for CUDA device `index` really gets the CUDA provider;
    otherwise why not, in words."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    # A missing GPU makes onnxruntime's default logger print library-loading errors; the answer
    # is given by the return value, so keep the probe quiet and restore the default (warning).
    ort.set_default_logger_severity(4)
    try:
        session = ort.InferenceSession(
            _probe_model(), options,
            providers=[(CUDA_PROVIDER, {"device_id": str(index)}), CPU_PROVIDER],
        )
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises several unrelated types
        text = str(exc).strip()
        return text.splitlines()[0] if text else type(exc).__name__
    finally:
        ort.set_default_logger_severity(2)
    if CUDA_PROVIDER not in session.get_providers():
        return (f"onnxruntime did not grant {CUDA_PROVIDER} (no GPU or no CUDA libraries; the "
                f"session got {session.get_providers()})")
    return None


def require_device(name: str) -> RuntimeDevice:
    """The device for a plan's device name, or DeviceUnavailableError saying why it is missing."""
    device = parse_device(name)
    if device.is_cuda:
        problem = cuda_device_error(device.index)
        if problem is not None:
            raise DeviceUnavailableError(
                f"the plan puts work on {name}, which this machine does not have: {problem}. "
                "Run the plan on a machine with that GPU, or plan for the devices here "
                "(e.g. --budget cpu=...)"
            )
    return device
