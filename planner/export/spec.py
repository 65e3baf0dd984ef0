"""What an export is asked for and what it returns: plain data, importable without torch.

`OptimizerSpec` names one of the optimizers the exporter writes into the graph and carries its
hyper-parameters (they become constants of the graph, as in a closure). `ExportResult` holds the
ONNX model, the role of every graph input, which output holds the updated value of which input,
the example values the export was verified on and the measured differences to torch.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from planner.errors import InvalidInputError

OPTIMIZER_NAMES = ("sgd", "momentum", "adam", "adamw")
#: The losses planner.export.losses defines by name (kept here so that no torch is needed).
LOSS_NAMES = ("cross_entropy", "sequence_cross_entropy", "mse")

#: The kinds of graph inputs an export produces, in the order the inputs appear in the graph.
INPUT_KINDS = ("data", "label", "parameter", "buffer", "optimizer_state")

#: Name of the optimizer-wide Adam step counter (a float32 scalar, like torch's state["step"]).
ADAM_STEP_NAME = "optimizer.step"
#: Suffix of every output that holds the updated value of a graph input.
UPDATED_SUFFIX = ".updated"
LOSS_OUTPUT_NAME = "loss"


@dataclass(frozen=True)
class OptimizerSpec:
    """One training-step optimizer and its hyper-parameters (torch.optim semantics).

    name: "sgd" (plain SGD), "momentum" (SGD with a momentum buffer per parameter), "adam" or
    "adamw". Fields that do not apply to the chosen optimizer are ignored. `weight_decay=None`
    means torch's default: 0 for sgd/momentum/adam, 0.01 for adamw.
    """

    name: str
    lr: float = 0.01
    momentum: float = 0.9
    dampening: float = 0.0
    nesterov: bool = False
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float | None = None

    def __post_init__(self) -> None:
        if self.name not in OPTIMIZER_NAMES:
            raise InvalidInputError(
                f"unknown optimizer {self.name!r}: use one of {', '.join(OPTIMIZER_NAMES)}"
            )
        if not self.lr > 0:
            raise InvalidInputError(f"learning rate must be > 0, got {self.lr}")
        if self.name == "momentum" and not 0 < self.momentum < 1:
            raise InvalidInputError(f"momentum must be in (0, 1), got {self.momentum}")
        if self.nesterov and self.dampening != 0:
            raise InvalidInputError("nesterov momentum requires dampening 0 (as in torch)")
        if self.name in ("adam", "adamw"):
            b1, b2 = self.betas
            if not (0 <= b1 < 1 and 0 <= b2 < 1):
                raise InvalidInputError(f"Adam betas must be in [0, 1), got {self.betas}")
            if not self.eps > 0:
                raise InvalidInputError(f"Adam eps must be > 0, got {self.eps}")
        if self.weight_decay is not None and self.weight_decay < 0:
            raise InvalidInputError(f"weight decay must be >= 0, got {self.weight_decay}")

    @property
    def effective_weight_decay(self) -> float:
        if self.weight_decay is not None:
            return float(self.weight_decay)
        return 0.01 if self.name == "adamw" else 0.0

    @property
    def is_adam(self) -> bool:
        return self.name in ("adam", "adamw")

    def state_suffixes(self) -> tuple[str, ...]:
        """Per-parameter state tensors, named `<parameter>.<suffix>` in the graph."""
        if self.name == "momentum":
            return ("momentum_buffer",)
        if self.is_adam:
            return ("exp_avg", "exp_avg_sq")
        return ()

    def to_json(self) -> dict[str, Any]:
        """The hyper-parameters that apply to this optimizer, JSON-ready."""
        out: dict[str, Any] = {"name": self.name, "lr": self.lr}
        if self.name == "momentum":
            out.update(momentum=self.momentum, dampening=self.dampening, nesterov=self.nesterov)
        if self.is_adam:
            out.update(betas=list(self.betas), eps=self.eps)
        out["weight_decay"] = self.effective_weight_decay
        return out


@dataclass
class ExportResult:
    """One exported training step and how well it matches torch.

    - `model`: the flat ONNX graph (IR version 10, standard ops, static shapes).
    - `input_kinds`: every graph input name -> "data" | "label" | "parameter" | "buffer" |
      "optimizer_state", in graph order.
    - `updates`: graph input name -> name of the graph output that holds its value after the step
      (every trainable parameter, every buffer the forward pass mutates, every optimizer state).
    - `loss_output`: name of the output holding the loss (computed before the update).
    - `feeds`: the value of every graph input the export was verified on (optimizer state zero,
      Adam step 0): running the graph on them reproduces `reference_loss`.
    - `reference_loss`: the loss a pure-torch training step computed on these values.
    - `max_abs_diff_loss`, `max_abs_diff_updates`: the largest differences between onnxruntime
      and torch; `update_diffs` has one entry per compared update. For Adam/AdamW the updated
      parameters are compared against torch.optim applied to the gradient recovered from the
      exported first moment (see planner.export.verify), and the raw parameter difference
      against an independent torch step is reported apart in `adam_raw_parameter_diff`.
    """

    model: onnx.ModelProto
    input_kinds: dict[str, str]
    updates: dict[str, str]
    loss_output: str
    feeds: dict[str, np.ndarray]
    optimizer: OptimizerSpec
    reference_loss: float
    torch_parameter_count: int
    max_abs_diff_loss: float
    max_abs_diff_updates: float
    update_diffs: dict[str, float] = field(default_factory=dict)
    adam_raw_parameter_diff: float | None = None
    verifier: Callable[[Mapping[str, np.ndarray]], Any] | None = field(default=None, repr=False)

    def verify(self, feeds: Mapping[str, np.ndarray]) -> Any:
        """Compare the graph with torch again, on other values of the inputs (e.g. the state
        after a first step, see `advance`); returns a planner.export.verify.Comparison."""
        if self.verifier is None:
            raise InvalidInputError("this ExportResult holds no torch model to verify against")
        return self.verifier(feeds)

    def advance(
        self, feeds: Mapping[str, np.ndarray], outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """The feeds of the next training step: every updated input takes its output's value."""
        nxt = dict(feeds)
        for input_name, output_name in self.updates.items():
            nxt[input_name] = np.asarray(outputs[output_name])
        return nxt

    @property
    def op_count(self) -> int:
        return len(self.model.graph.node)

    def input_names(self, kind: str) -> list[str]:
        return [name for name, k in self.input_kinds.items() if k == kind]

    def save(self, path: str | Path) -> None:
        """Write the ONNX model (one self-contained file, no external data)."""
        Path(path).write_bytes(self.model.SerializeToString())

    def save_feeds(self, path: str | Path) -> None:
        """Write every graph input's value to a compressed .npz keyed by graph input name."""
        buffer = io.BytesIO()
        # numpy's stub types **kwds beside `allow_pickle: bool`, so a dict of arrays reads as a bool
        np.savez_compressed(buffer, **self.feeds)  # type: ignore[arg-type]
        Path(path).write_bytes(buffer.getvalue())

    def sidecar(
        self, name: str, description: str, onnx_file: str, inputs_file: str, seed: int
    ) -> dict[str, Any]:
        """The JSON sidecar describing this export (the fixture format in tests/fixtures)."""
        inputs = {}
        for input_name, kind in self.input_kinds.items():
            value = self.feeds[input_name]
            inputs[input_name] = {
                "shape": list(value.shape),
                "dtype": str(value.dtype),
                "kind": kind,
            }
        return {
            "name": name,
            "description": description,
            "onnx": onnx_file,
            "inputs_file": inputs_file,
            "seed": seed,
            "optimizer": self.optimizer.to_json(),
            "inputs": inputs,
            "loss_output": self.loss_output,
            "updates": dict(self.updates),
            "reference_loss": self.reference_loss,
            "torch_parameter_count": self.torch_parameter_count,
            "op_count": self.op_count,
            "max_abs_diff": {"loss": self.max_abs_diff_loss, "updates": self.max_abs_diff_updates},
        }

    def write_bundle(
        self, onnx_path: str | Path, name: str, description: str = "", seed: int = 0
    ) -> tuple[Path, Path, Path]:
        """Write `<stem>.onnx`, `<stem>.inputs.npz` and `<stem>.json` side by side."""
        onnx_path = Path(onnx_path)
        stem = onnx_path.name[: -len(".onnx")] if onnx_path.name.endswith(".onnx") else None
        if stem is None:
            stem = onnx_path.name
        npz_path = onnx_path.with_name(f"{stem}.inputs.npz")
        json_path = onnx_path.with_name(f"{stem}.json")
        self.save(onnx_path)
        self.save_feeds(npz_path)
        meta = self.sidecar(name, description, onnx_path.name, npz_path.name, seed)
        json_path.write_text(json.dumps(meta, indent=2) + "\n")
        return onnx_path, npz_path, json_path
