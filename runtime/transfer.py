"""Moving bytes between arenas and host memory without allocating in the arenas.

- host -> host (`cpu` <-> `cpu:N`, or a caller's numpy array <-> a host arena): numpy copies
  between views, no temporaries.
- anything touching a CUDA arena: an Identity node on the CUDA provider, its input bound to the
  source pointer and its output to the destination pointer (IOBinding), so onnxruntime's own data
  transfer moves the bytes (for host <-> device it stages through its own device arena, as any
  onnxruntime copy does). The session is made once per GPU and each copy keeps its binding.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from runtime.devices import RuntimeDevice


@dataclass(frozen=True)
class Place:
    """Bytes somewhere: a device, a pointer, and for host memory a uint8 view of them."""

    device: RuntimeDevice
    pointer: int
    nbytes: int
    host_bytes: np.ndarray | None = None


def host_place(array: np.ndarray, device: RuntimeDevice) -> Place:
    """A contiguous host array as a Place (its own bytes, no copy)."""
    if not array.flags.c_contiguous:
        raise ValueError("host_place needs a C-contiguous array")
    raw = array.reshape(-1).view(np.uint8)
    return Place(device, array.ctypes.data, array.nbytes, raw)


def _identity_model() -> bytes:
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])], "arenaplan_copy",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, ["n"])],
        [helper.make_tensor_value_info("y", TensorProto.UINT8, ["n"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    return model.SerializeToString()


class Transfers:
    """Makes copy closures; owns the per-GPU copy sessions."""

    def __init__(self) -> None:
        self._sessions: dict[int, ort.InferenceSession] = {}
        self._run_options = ort.RunOptions()

    def copier(self, src: Place, dst: Place) -> Callable[[], None]:
        """A function that copies src's bytes to dst each time it is called."""
        if src.nbytes != dst.nbytes:
            raise ValueError(f"copy of {src.nbytes} B into {dst.nbytes} B")
        if src.nbytes == 0:
            return _nothing
        if src.host_bytes is not None and dst.host_bytes is not None:
            source, target = src.host_bytes, dst.host_bytes

            def host_copy() -> None:
                np.copyto(target, source)

            return host_copy
        gpu = dst.device if dst.device.is_cuda else src.device
        session = self._session(gpu)
        binding = session.io_binding()
        binding.bind_input("x", *src.device.ort_device, np.uint8, [src.nbytes], src.pointer)
        binding.bind_output("y", *dst.device.ort_device, np.uint8, [dst.nbytes], dst.pointer)
        run, c_binding, options = session._sess.run_with_iobinding, binding._iobinding, \
            self._run_options

        def device_copy() -> None:
            run(c_binding, options)

        # keep the Python binding (and its buffers) alive; mypy knows no attributes on functions
        device_copy.binding = binding  # type: ignore[attr-defined]
        return device_copy

    def _session(self, gpu: RuntimeDevice) -> ort.InferenceSession:
        session = self._sessions.get(gpu.index)
        if session is None:
            options = ort.SessionOptions()
            options.log_severity_level = 3
            session = ort.InferenceSession(_identity_model(), options, providers=gpu.providers())
            self._sessions[gpu.index] = session
        return session


def _nothing() -> None:
    return None
