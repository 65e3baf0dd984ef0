"""What `arenaplan profile` writes: per-op costs on each device and copy costs between devices.

A profile belongs to one model (its sha256). For every op of the graph it holds, per device, either
a cost (`costs[device]`) or the reason the op cannot run there (`unsupported[device]`). Costs are
seconds of one execution of the op with its inputs already resident on that device, measured by
ONNX Runtime (`source="measured"`), supplied by a user (`"user"`), or, only for ops that no
requested device can run, estimated from FLOPs and bytes on a roofline (`"estimated"`).

Copies between two devices are described by a least-squares line `latency + nbytes / bandwidth`
fitted to a sweep of transfer sizes; the solver turns it into a per-tensor copy time.
"""

from __future__ import annotations

from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

PROFILE_SCHEMA_VERSION: Final = 1

CostSource = Literal["measured", "user", "estimated"]


class OpCost(BaseModel):
    """Time of one execution of an op on one device."""

    model_config = ConfigDict(extra="forbid")

    source: CostSource = Field(
        description="measured by ONNX Runtime, supplied by a user, or a roofline estimate "
        "(only for ops that no requested device can run)"
    )
    median_seconds: float = Field(ge=0, description="median time of one execution")
    spread_seconds: float = Field(
        ge=0, description="interquartile range of the per-execution times (0 when estimated)"
    )
    repeats: int = Field(ge=0, description="timed executions behind the median (0 when estimated)")
    workspace_bytes: int = Field(
        ge=0, description="scratch memory the kernel allocated beyond its inputs and outputs, as "
        "reported by ONNX Runtime's profiler (0 when not reported)"
    )
    cached: bool = Field(
        default=False, description="served from the persistent profile cache, not measured now"
    )
    in_place_seconds: float | None = Field(
        default=None, ge=0,
        description="median time of one execution with the output written over the input whose "
        "storage it may share (a view's source, an in-place op's first candidate input), which "
        "a kernel need not copy first; measured for outputs of at least the profile's in-place "
        "threshold (null: not measured, the op is priced at median_seconds either way)"
    )


class OpProfile(BaseModel):
    """The costs of one op of the graph on every requested device."""

    model_config = ConfigDict(extra="forbid")

    op_id: int = Field(ge=0, description="position of the op in the graph IR (topological order)")
    name: str
    op_type: str
    costs: dict[str, OpCost] = Field(
        default_factory=dict, description="device -> cost, for the devices that can run the op"
    )
    unsupported: dict[str, str] = Field(
        default_factory=dict, description="device -> why the op cannot run there"
    )


class CopySample(BaseModel):
    model_config = ConfigDict(extra="forbid")

    nbytes: int = Field(ge=0)
    median_seconds: float = Field(ge=0)
    repeats: int = Field(ge=1)


class CopyFit(BaseModel):
    """Copy time from `src` to `dst`: `latency_seconds + nbytes / bytes_per_second`."""

    model_config = ConfigDict(extra="forbid")

    src: str
    dst: str
    latency_seconds: float = Field(ge=0)
    bytes_per_second: float = Field(gt=0)
    method: str = Field(description="how the transfers were made and timed")
    samples: list[CopySample] = Field(default_factory=list, description="the measured sweep")


class Roofline(BaseModel):
    """Peak compute and memory bandwidth of a device, for the analytical fallback estimate."""

    model_config = ConfigDict(extra="forbid")

    peak_flops: float = Field(gt=0, description="floating-point operations per second")
    bytes_per_second: float = Field(gt=0, description="memory bandwidth")
    source: Literal["measured", "configured"]


class MachineInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cpu_model: str
    cpu_cores: int = Field(ge=1, description="logical cores of the machine")
    threads: int = Field(ge=1, description="intra-op threads of every profiling session")
    gpus: dict[str, str] = Field(
        default_factory=dict, description="GPU device -> GPU name, for the profiled GPUs"
    )
    onnxruntime_version: str
    providers: dict[str, list[str]] = Field(
        description="device -> execution providers the profiling sessions actually got"
    )
    platform: str
    fingerprint: str = Field(description="hash of cpu model, cores and GPU names (cache key)")


class TimingSettings(BaseModel):
    """How each op was timed, so a profile measured elsewhere can be judged."""

    model_config = ConfigDict(extra="forbid")

    method: str
    warmup_runs: int = Field(ge=0)
    min_repeats: int = Field(ge=1)
    max_repeats: int = Field(ge=1)
    rel_tolerance: float = Field(gt=0)
    max_seconds_per_op: float = Field(gt=0)
    graph_optimizations: Literal["disabled"] = "disabled"
    execution_mode: Literal["sequential"] = "sequential"


class CacheStats(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(description="the SQLite cache file, None when caching was off")
    hits: int = Field(ge=0, description="(op, device) costs served from the cache")
    misses: int = Field(ge=0, description="(op, device) costs measured in this run")
    deduplicated: int = Field(
        ge=0, description="(op, device) costs copied from an identical op of the same graph"
    )


class Profile(BaseModel):
    """Per-op costs on each device plus copy costs: the cost model the solvers consume."""

    model_config = ConfigDict(extra="forbid")

    schema_version: Literal[1] = PROFILE_SCHEMA_VERSION
    model_sha256: str = Field(description="sha256 of the model bytes the profile was made for")
    graph_name: str
    devices: list[str] = Field(description="profiled devices, e.g. ['cpu', 'cuda:0']")
    ops: list[OpProfile] = Field(description="one entry per op of the graph, in op-id order")
    copies: list[CopyFit] = Field(
        default_factory=list, description="copy-cost fits per ordered device pair (empty: CPU only)"
    )
    rooflines: dict[str, Roofline] = Field(
        default_factory=dict, description="device -> roofline used for estimated costs, if any"
    )
    machine: MachineInfo
    timing: TimingSettings
    cache: CacheStats
    total_seconds: float = Field(ge=0, description="wall time of the whole profiling run")
