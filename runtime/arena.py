"""One contiguous allocation per device, made once; buffers are typed views at planned offsets.

- Host arenas (`cpu`, `cpu:N`): one numpy uint8 array whose start is aligned to `ALIGNMENT`
  bytes (plans align offsets relative to the arena start). `array()` returns a typed numpy view
  of a buffer's bytes: no copy, so whatever a kernel writes through the buffer's pointer is what
  the view shows.
- CUDA arenas (`cuda:N`): one OrtValue of uint8 allocated on the device by onnxruntime; buffers
  are addressed as `data_ptr() + offset` and bound to kernels by pointer. Host code never reads
  device memory directly: runtime.transfer moves bytes in and out.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

from runtime.devices import RuntimeDevice

ALIGNMENT = 256  # a multiple of every plan alignment up to 256 and of CUDA's own (256)


class Arena:
    """The bytes of one device; `pointer(offset)` is where a buffer at `offset` starts."""

    device: RuntimeDevice
    size: int
    base_ptr: int

    def pointer(self, offset: int) -> int:
        return self.base_ptr + offset

    @property
    def is_host(self) -> bool:
        return not self.device.is_cuda


class HostArena(Arena):
    def __init__(self, device: RuntimeDevice, size: int):
        self.device = device
        self.size = size
        self._storage = np.empty(size + ALIGNMENT, dtype=np.uint8)
        start = (-self._storage.ctypes.data) % ALIGNMENT
        self.bytes = self._storage[start:start + size]
        self.base_ptr = self.bytes.ctypes.data

    def array(self, offset: int, dtype: np.dtype | str, shape: tuple[int, ...] | list[int]
              ) -> np.ndarray:
        """A typed view (no copy) of the bytes at `offset`."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        nbytes = count * dtype.itemsize
        if offset < 0 or offset + nbytes > self.size:
            raise IndexError(f"{self.device.name}: [{offset}, {offset + nbytes}) is outside the "
                             f"arena of {self.size} B")
        return self.bytes[offset:offset + nbytes].view(dtype).reshape(tuple(shape))

    def fill(self, byte: int) -> None:
        self.bytes.fill(byte)


class CudaArena(Arena):
    def __init__(self, device: RuntimeDevice, size: int):
        self.device = device
        self.size = size
        self._value = ort.OrtValue.ortvalue_from_shape_and_type(
            [max(size, 1)], np.uint8, "cuda", device.index
        )
        self.base_ptr = self._value.data_ptr()


def allocate_arena(device: RuntimeDevice, size: int) -> Arena:
    """The one allocation of `device`: host memory for cpu/cpu:N, device memory for cuda:N."""
    if device.is_cuda:
        return CudaArena(device, size)
    return HostArena(device, size)
