"""Host kernel scratch from one arena the size of the plan's workspace (`workspace_bytes`).

Without it, the CPU kernels of the runtime's sessions malloc their scratch and free it when they
end (no session keeps a memory pool). Large blocks are then mapped fresh and page-faulted on
every step, depending on glibc's thresholds: on MobileNetV2 (96x96, batch 4) the two 3.5 MB
select temporaries of its largest Where cost 1,700 minor faults per step and made that node 5x
slower than in ONNX Runtime's default session (0.9 ms there, 4.7 ms here), which keeps its
scratch in its arena; bench/runtime/optimized_graphs.md has the step times.

ONNX Runtime lets a process register an allocator in its environment that sessions opt into
(`session.use_env_allocators`). Registered as a BFC arena whose first region is the workspace,
it is one allocation of the plan's workspace bytes, made when a kernel first asks for scratch
and kept: every later step reuses pages already resident. The arena may grow past it: the
profile's per-op figure (ONNX Runtime's arena peak around the node) is not a bound the arena
can be held to, since its bins fragment (GPT-2-tiny, basic rewrite: measured 9,216 bytes, the
run needs more than 13,312 with the arena capped). Growth doubles the region size, and the
process's peak is what `arenaplan run --strict-memory` checks (runtime.measure).

A registration replaces the environment's CPU allocator for sessions created after it; sessions
keep the allocator they were created with. So an executor registers its arena and creates all
its host sessions while holding `REGISTRATION_LOCK` (`host_workspace`): two executors built in
one process, even concurrently, each get their own arena. One arena serves all of an executor's
host devices: they run one op at a time, so it starts at the largest of their workspaces.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import onnxruntime as ort

# The session option that makes a session take its CPU memory from the environment's allocator.
USE_ENV_ALLOCATORS = "session.use_env_allocators"
_NEXT_POWER_OF_TWO = 0  # BFC arena extend strategy: the first region is initial_chunk_size_bytes

REGISTRATION_LOCK = threading.Lock()


def arena_config(nbytes: int) -> ort.OrtArenaCfg:
    """A BFC arena whose first region, allocated on first use, is `nbytes` (no limit: 0)."""
    return ort.OrtArenaCfg({
        "max_mem": 0,
        "arena_extend_strategy": _NEXT_POWER_OF_TWO,
        "initial_chunk_size_bytes": nbytes,
    })


def register_host_workspace(nbytes: int) -> None:
    """Make an arena starting at `nbytes` the CPU allocator of sessions that opt in from now on."""
    memory = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0,
                               ort.OrtMemType.DEFAULT)
    ort.create_and_register_allocator(memory, arena_config(nbytes))


@contextmanager
def host_workspace(nbytes: int) -> Iterator[bool]:
    """Hold the registration for the sessions created inside; yields whether host sessions
    should opt in (False for 0: a plan without a measured workspace keeps malloc'd scratch)."""
    with REGISTRATION_LOCK:
        if nbytes > 0:
            register_host_workspace(nbytes)
        yield nbytes > 0
