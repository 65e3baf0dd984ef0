"""What `arenaplan inspect --json` prints: a summary of a training graph as the planner sees it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class GraphSummary(BaseModel):
    """One line of facts about a model: sizes by role, regions, the loss."""

    model_config = ConfigDict(extra="forbid")

    name: str
    model_sha256: str = Field(description="sha256 of the model bytes; plans name it")
    ir_version: int
    opset: int
    ops: int = Field(description="number of ONNX nodes")
    tensors: int
    parameters: int = Field(description="number of parameter elements (trainable weights)")
    parameter_tensors: int
    loss: str | None = Field(description="name of the loss output, None for inference graphs")
    ops_by_region: dict[str, int] = Field(description="forward / backward / optimizer op counts")
    bytes_by_role: dict[str, int] = Field(description="total bytes of the tensors of each role")
    activation_bytes: int = Field(description="bytes of all forward activations")
    total_bytes: int = Field(description="bytes of all tensors (an upper bound for keep-all)")
