"""Access to the committed fixture training graphs (tests/fixtures/NAME.{onnx,json,inputs.npz})."""

from __future__ import annotations

import json
from pathlib import Path

FIXTURE_DIR = Path(__file__).resolve().parents[1] / "fixtures"
REQUIRED = (
    "mlp_sgd", "cnn_bn_momentum", "unet_small", "resnet_cifar", "gpt2_tiny_adam",
    "resnet18_narrow",
)


def fixture_names() -> list[str]:
    return sorted(p.stem for p in FIXTURE_DIR.glob("*.json"))


def sidecar(name: str) -> dict:
    return json.loads((FIXTURE_DIR / f"{name}.json").read_text())


def model_path(name: str) -> Path:
    return FIXTURE_DIR / sidecar(name)["onnx"]


def inputs_path(name: str) -> Path:
    return FIXTURE_DIR / f"{name}.inputs.npz"
