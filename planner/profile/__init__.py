"""Per-operator costs of a training graph on each device, and copy costs between devices.

`profile_graph(graph, devices)` measures every op with ONNX Runtime (each op in its own session on
real captured inputs, cached in SQLite per machine); `load_profile(path, graph)` reads a profile
measured elsewhere; `copy_seconds(profile, src, dst, nbytes)` is the copy cost the solvers use.

Modules, one job each: devices (device names, sessions), machine (fingerprint), inputs (values),
capture_plan (which captured values are held at once), host_memory (available memory and the
capture's allowance), single_node (one-op models), timing (stable repeats), op_runner (one op on
one device), signature and cache (persistent SQLite cache), copies (transfer sweep and fit),
estimate (calibrated roofline fallback), progress (callbacks, console), storage (JSON in and
out), runner (the orchestration).
"""

from planner.profile.cache import ProfileCache, default_cache_path
from planner.profile.copies import copy_seconds
from planner.profile.progress import ConsoleProgress, ProgressEvent
from planner.profile.runner import DEFAULT_CACHE, profile_graph
from planner.profile.storage import load_profile, save_profile
from planner.profile.timing import DEFAULT_POLICY, QUICK_POLICY, TimingPolicy
from schemas.profile import Profile

__all__ = [
    "DEFAULT_CACHE",
    "DEFAULT_POLICY",
    "QUICK_POLICY",
    "ConsoleProgress",
    "Profile",
    "ProfileCache",
    "ProgressEvent",
    "TimingPolicy",
    "copy_seconds",
    "default_cache_path",
    "load_profile",
    "profile_graph",
    "save_profile",
]
