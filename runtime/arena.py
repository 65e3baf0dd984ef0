"""One contiguous allocation per device, made once; buffers are typed views at planned offsets.

- Host arenas (`cpu`, `cpu:N`): one numpy uint8 array whose start is aligned to `ALIGNMENT`
  bytes (plans align offsets relative to the arena start). `array()` returns a typed numpy view
  of a buffer's bytes: no copy, so whatever a kernel writes through the buffer's pointer is what
  the view shows.
- CUDA arenas (`cuda:N`): one OrtValue of uint8 allocated on the device by onnxruntime; buffers
  are addressed as `data_ptr() + offset` and bound to kernels by pointer. Host code never reads
  device memory directly: runtime.transfer moves bytes in and out.

Kernel workspace (the plan's `workspace_bytes`): on a GPU the allocation holds a workspace zone
after the buffers, and the CUDA provider takes all its memory (cuDNN workspaces, temporaries,
outputs the plan does not keep) from it: `WorkspaceZone` is handed to onnxruntime as the
provider's external allocator (`gpu_external_alloc` / `gpu_external_free`, which replace its
arena), a first-fit allocator over the zone that refuses what does not fit, so the device's
memory during a step is exactly the allocation. The CPU provider takes no external allocator:
on the host the workspace is a separate onnxruntime arena of the same size, allocated on first
use (runtime.host_workspace); runtime.measure checks the process's peak against both.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import onnxruntime as ort

from runtime.devices import RuntimeDevice

ALIGNMENT = 256  # a multiple of every plan alignment up to 256 and of CUDA's own (256)


ZONE_ALIGNMENT = 256  # what the CUDA provider's own allocator aligns to

_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_size_t)
_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_EMPTY_CACHE = ctypes.CFUNCTYPE(None)


class WorkspaceZone:
    """First-fit allocation over [start, start + size) for a kernel provider's scratch.

    Blocks are rounded up to ZONE_ALIGNMENT; freed blocks merge with free neighbours, so a
    zone whose blocks are all freed (every kernel's scratch is freed when it ends) is one free
    block again. A request that fits nowhere gets 0 (NULL): onnxruntime then fails the run
    instead of allocating outside the plan."""

    def __init__(self, start: int, size: int):
        self.start = start
        self.size = size
        self._free: list[tuple[int, int]] = [(start, size)]  # (address, bytes), by address
        self._used: dict[int, int] = {}
        self.in_use = 0
        self.peak = 0
        self._lock = threading.Lock()  # onnxruntime may allocate from its worker threads
        # the C callbacks, kept alive as long as the zone
        self._callbacks = (_ALLOC(self.alloc), _FREE(self.free), _EMPTY_CACHE(lambda: None))

    def alloc(self, nbytes: int) -> int:
        need = -(-max(nbytes, 1) // ZONE_ALIGNMENT) * ZONE_ALIGNMENT
        with self._lock:
            for k, (address, size) in enumerate(self._free):
                if size >= need:
                    if size == need:
                        del self._free[k]
                    else:
                        self._free[k] = (address + need, size - need)
                    self._used[address] = need
                    self.in_use += need
                    self.peak = max(self.peak, self.in_use)
                    return address
        return 0

    def free(self, address: int | None) -> None:
        if not address:
            return
        with self._lock:
            size = self._used.pop(address)
            self.in_use -= size
            k = next((i for i, (a, _) in enumerate(self._free) if a > address), len(self._free))
            self._free.insert(k, (address, size))
            if k + 1 < len(self._free) and address + size == self._free[k + 1][0]:
                self._free[k] = (address, size + self._free.pop(k + 1)[1])
            if k > 0 and self._free[k - 1][0] + self._free[k - 1][1] == address:
                self._free[k - 1] = (self._free[k - 1][0], self._free[k - 1][1]
                                     + self._free.pop(k)[1])

    def provider_options(self) -> dict[str, str]:
        """CUDA provider options that make this zone the provider's allocator."""
        alloc, free, empty = (ctypes.cast(c, ctypes.c_void_p).value for c in self._callbacks)
        return {"gpu_external_alloc": str(alloc), "gpu_external_free": str(free),
                "gpu_external_empty_cache": str(empty)}


class Arena:
    """The bytes of one device; `pointer(offset)` is where a buffer at `offset` starts."""

    device: RuntimeDevice
    size: int
    base_ptr: int
    zone: WorkspaceZone | None = None  # where the device's kernels take their scratch

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
    def __init__(self, device: RuntimeDevice, size: int, workspace: int = 0):
        self.device = device
        self.size = size
        zone_offset = -(-size // ZONE_ALIGNMENT) * ZONE_ALIGNMENT
        self._value = ort.OrtValue.ortvalue_from_shape_and_type(
            [max(zone_offset + workspace, 1)], np.uint8, "cuda", device.index
        )
        self.base_ptr = self._value.data_ptr()
        if workspace > 0:
            self.zone = WorkspaceZone(self.base_ptr + zone_offset, workspace)


def allocate_arena(device: RuntimeDevice, size: int, workspace: int = 0) -> Arena:
    """The one allocation of `device`: host memory for cpu/cpu:N, device memory for cuda:N
    (with its workspace zone after the `size` bytes of buffers)."""
    if device.is_cuda:
        return CudaArena(device, size, workspace)
    return HostArena(device, size)
