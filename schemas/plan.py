"""The plan contract: what a client asks for (`PlanRequest`) and what it gets back (`Plan`).

A plan is a straight-line program for one training step over fixed arenas, one per device:

- `buffers`: every value the step holds, with its device, byte offset in that device's arena,
  size, dtype, shape and the step range it is live in. A tensor recomputed or copied to another
  device has one buffer per materialization.
- storage (schema version 2): every buffer names the storage its bytes are in (`storage`, the id
  of the buffer that owns those bytes; an owner names itself) and where in it
  (`storage_offset`). Buffers share a storage two ways (`shares`): a `view` is the same bytes
  under another shape (Reshape, Flatten, Squeeze, Unsqueeze, Identity: the op writes nothing),
  and `in_place` is a value an op wrote over the bytes of an input that dies at that op (an
  elementwise op, or an updated state over its old value). A storage's bytes are live from the
  first step of any of its buffers to the last step of any of them; only owners are laid out.
- `steps`: `compute` (run one op on one device, reading and writing buffers; `recompute` marks a
  rematerialization), `copy` (buffer to buffer, usually across devices) and `free` (end of a
  buffer's life; nothing is deallocated).
- `graph_inputs` / `graph_outputs` / `constants`: which buffer holds each graph input before step
  0, each graph output after the last step, and each initializer of the model.
- `state_updates`: state input -> output with its new value; the next training step feeds that
  output's value as the input (the runtime keeps both in the persistent zone).
- `optimized_graph`: with `request.graph_optimization` on, the plan is made for the graph ONNX
  Runtime rewrites the model into (schemas.optimized_graph), named by its sha256; the runtime
  rebuilds it from the model and refuses a mismatch.

Plan ids are deterministic (`compute_plan_id`): the same model bytes, canonical request and
planner version always give the same id, so CI can compute the id it wants and fetch it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator

from schemas.optimized_graph import GraphOptimization, OptimizedGraph
from schemas.profile import Profile

PLAN_SCHEMA_VERSION = 2
# `cpu:N` is an extra host arena (a second NUMA node, or a stand-in for a second device when no
# GPU is at hand); it runs on the CPU and shares the CPU's costs.
DEVICE_PATTERN = re.compile(r"cpu(:\d+)?|cuda:\d+")  # the whole name: fullmatch, no "\n"
# Ops that may write their output over one input only (op type -> that input's index), and only
# when no other input shares its bytes. Scatters over their data input (0): ONNX Runtime's kernels
# copy the data into the output unless both are the same address, then write the updates at their
# indices (the loss gradient's one-hot scatter is a logits-sized buffer). Gemm over its addend C
# (2): the kernel copies C into the output (nothing to do at the same address), then accumulates
# alpha * A @ B into it, each element reading only its own element of C; A and B are read
# throughout, so they must not share the output's bytes. That is how a weight gradient's matrix
# product becomes the SGD update itself (schemas.update_fusion).
SINGLE_INPUT_IN_PLACE_OP_TYPES: Mapping[str, int] = MappingProxyType(
    {"ScatterElements": 0, "ScatterND": 0, "Gemm": 2})
# Ops that may write their output over an input of the same shape and dtype: an `in_place`
# buffer is written by one of these over a buffer it reads. Elementwise ops read element i of
# every input before writing element i of the output; Softmax and LogSoftmax read a whole row
# before writing it; SINGLE_INPUT_IN_PLACE_OP_TYPES only over their one input.
IN_PLACE_OP_TYPES = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Reciprocal", "Neg", "Abs", "Exp", "Log",
    "Max", "Min", "Clip", "Where", "Floor", "Ceil", "Relu", "Sigmoid", "Tanh", "Erf",
    "LeakyRelu", "Softplus", "Softmax", "LogSoftmax",
}) | frozenset(SINGLE_INPUT_IN_PLACE_OP_TYPES)
# Sizes the solvers and ONNX shapes can hold (int64); a JSON `true` is no number of bytes.
WholeNumber = Annotated[int, Strict(), Field(lt=2**63)]
SolverStatus = Literal["OPTIMAL", "FEASIBLE", "INFEASIBLE", "UNKNOWN"]


def check_device_name(name: str) -> str:
    if not DEVICE_PATTERN.fullmatch(name):
        raise ValueError(
            f"unknown device {name!r}: use 'cpu', 'cuda:N' (e.g. cuda:0) or 'cpu:N' for an extra "
            "host arena"
        )
    return name


class PlanRequest(BaseModel):
    """What to plan for: a budget per device and how hard to try."""

    model_config = ConfigDict(extra="forbid")

    budgets: dict[str, WholeNumber] = Field(
        min_length=1,
        description="device ('cpu', 'cuda:N', 'cpu:N') -> bytes its arena may use for the whole "
        "step: "
        "parameters, optimizer state, gradients, activations, workspace",
    )
    dims: dict[str, WholeNumber] = Field(
        default_factory=dict, description="values for the model's symbolic dims, e.g. batch"
    )
    objective: Literal["time"] = Field(
        default="time", description="minimize the predicted step time within the budgets"
    )
    time_limit_s: float = Field(default=30.0, gt=0, le=3600, strict=True,
                                description="solver time limit")
    workers: int = Field(default=1, ge=1, le=64, strict=True, description="CP-SAT worker threads")
    seed: int = Field(default=0, ge=0, lt=2**31, strict=True,
                      description="CP-SAT random seed (int32)")
    alignment: int = Field(default=64, ge=1, le=4096, strict=True,
                           description="byte alignment of offsets")
    profile: Profile | None = Field(
        default=None, description="per-op costs measured elsewhere (arenaplan profile -o)"
    )
    graph_optimization: GraphOptimization = Field(
        default="disable", description="plan the graph ONNX Runtime would run: its 'basic' "
        "rewrites (standard ops) or also its 'extended' fusions (FusedConv, FusedMatMul, ...) "
        "for the devices' providers; 'disable' plans the model as sent (the service and the "
        "CLI plan 'extended' when a request does not say)"
    )

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, budgets: dict[str, int]) -> dict[str, int]:
        for device, size in budgets.items():
            check_device_name(device)
            if size <= 0:
                raise ValueError(f"budget for {device} must be a positive number of bytes")
        return budgets

    @field_validator("dims")
    @classmethod
    def _dims(cls, dims: dict[str, int]) -> dict[str, int]:
        for name, value in dims.items():
            if value <= 0:
                raise ValueError(f"dim '{name}' must be a positive integer")
        return dims

    @field_validator("alignment")
    @classmethod
    def _alignment(cls, alignment: int) -> int:
        if alignment & (alignment - 1):
            raise ValueError("alignment must be a power of two")
        return alignment


def canonical_request_json(request: PlanRequest) -> str:
    """The request as canonical JSON: sorted keys, no whitespace, defaults spelled out."""
    return json.dumps(request.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def compute_plan_id(model_sha256: str, request: PlanRequest, planner_version: str) -> str:
    """Deterministic plan id: hash of the model's sha256, the canonical request (a profile the
    request carries is in it, every cost of it) and the planner version. A profile measured at
    plan time is not in the id: the service stores it with the plan (GET /plans/{id}/profile),
    so the id names the first plan made for a request; send a profile to pin the costs."""
    text = f"{model_sha256}\n{canonical_request_json(request)}\n{planner_version}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class BufferSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    tensor: str = Field(description="name of the ONNX tensor this buffer holds")
    device: str
    offset: int = Field(ge=0, description="byte offset in the device's arena")
    size: int = Field(ge=0, description="bytes of the tensor")
    dtype: str
    shape: list[int]
    first_step: int = Field(ge=0, description="first step the buffer is live in")
    last_step: int = Field(ge=0, description="last step the buffer is live in (inclusive)")
    role: str = Field(description="tensor role (planner.ir.graph.TensorRole)")
    zone: Literal["persistent", "transient"] = Field(
        description="persistent: state and constants, at fixed offsets across training steps"
    )
    preloaded: bool = Field(
        default=False, description="holds a graph input or constant before step 0"
    )
    storage: str = Field(
        description="id of the buffer that owns this buffer's bytes (its own id for an owner)"
    )
    storage_offset: int = Field(
        default=0, ge=0, description="byte offset of this buffer within its storage"
    )
    shares: Literal["view", "in_place"] | None = Field(
        default=None, description="how a buffer that is not the owner came to share the "
        "storage: 'view' (the same bytes reinterpreted, nothing written) or 'in_place' (written "
        "over a value that dies at the writing step)"
    )

    @property
    def owns_storage(self) -> bool:
        return self.storage == self.id


class ComputeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["compute"] = "compute"
    op_id: int = Field(ge=0)
    op_name: str
    op_type: str
    device: str
    inputs: list[str | None] = Field(description="buffer per positional input (None: omitted)")
    outputs: list[str | None] = Field(description="buffer per positional output (None: unused)")
    recompute: bool = Field(default=False, description="a rematerialization of an earlier op")


class CopyStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["copy"] = "copy"
    src: str
    dst: str


class FreeStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: Literal["free"] = "free"
    buffer: str


Step = Annotated[ComputeStep | CopyStep | FreeStep, Field(discriminator="kind")]


class SolverReport(BaseModel):
    """One solver phase as it ran: what it proved and how long it took."""

    model_config = ConfigDict(extra="forbid")

    phase: Literal["order", "remat", "layout"]
    device: str | None = None
    method: str
    status: SolverStatus
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    baseline: float | None = Field(
        default=None, description="the objective's value for the naive alternative: the file "
        "order's peak for ordering, keep-everything time for rematerialization"
    )
    seconds: float = Field(ge=0)
    notes: list[str] = Field(default_factory=list)


class DevicePlan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    device: str
    budget_bytes: int
    arena_bytes: int = Field(description="size of the one allocation the runtime makes")
    lower_bound_bytes: int = Field(
        description="max over steps of live bytes (aligned): no layout of this schedule is smaller"
    )
    persistent_bytes: int = Field(description="bytes of the persistent zone (state, constants)")
    workspace_bytes: int = Field(
        default=0, ge=0, description="kernel scratch reserved beside the arena: the most one op "
        "placed here allocates while it runs (ONNX Runtime's profiler, planner.profile), plus "
        "the outputs the plan does not keep; 0 when not measured. The runtime bounds a GPU's "
        "kernel scratch to it; arena_bytes + workspace_bytes + a fixed overhead (runtime.measure) "
        "bound the process's peak"
    )


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    schema_version: int = PLAN_SCHEMA_VERSION
    plan_id: str
    planner_version: str
    model_sha256: str = Field(description="sha256 of the model the user sent (plan ids use it)")
    optimized_graph: OptimizedGraph | None = Field(
        default=None, description="the ONNX Runtime-optimized graph the plan was made for (its "
        "op ids index that graph's nodes); None: the model as sent"
    )
    request: PlanRequest
    devices: list[DevicePlan]
    buffers: list[BufferSpec]
    steps: list[Step]
    graph_inputs: dict[str, str]
    graph_outputs: dict[str, str]
    constants: dict[str, str]
    state_updates: dict[str, str]
    predicted_seconds: float | None = Field(
        default=None, description="step time predicted from the profile (None without costs)"
    )
    solvers: list[SolverReport] = Field(default_factory=list)
