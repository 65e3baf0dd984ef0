"""Training graphs at realistic scale for the benches, exported on demand (not committed).

The fixture zoo keeps its graphs tiny so that tests run in seconds; `resnet18_narrow` has the
ResNet-18 topology (1,804 ops) but a batch of 4 at base width 8, so its parameters and momentum
are a third of its keep-everything peak and no plan of any planner goes far below half of it.
The scale models here are the same topologies at the batch sizes people train with, where
activations dominate as they do in practice. They are exported once with the fixture generator
(tests/fixtures/generate.py, needs the `export` extra) into bench/models/ and reused.

Batch-32 reductions in float32 make the exported momentum buffers differ from torch's by up to
~5e-4 (summation order), so these are checked against torch at 1e-3 instead of the zoo's 1e-4.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "bench" / "models"
EXPORT_TOLERANCE = 1e-3

# name -> (ResNet base width, batch): the fixture's ResNet-18 topology, CIFAR-sized input.
SCALE_MODELS = {"resnet18_w16_b32": (16, 32)}


def _generator():
    spec = importlib.util.spec_from_file_location(
        "arenaplan_fixture_generator", ROOT / "tests" / "fixtures" / "generate.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def export_cached(fixture, tolerance: float = EXPORT_TOLERANCE) -> Path:
    """bench/models/NAME.onnx (with NAME.inputs.npz and NAME.json beside it) for a generator
    fixture, exported and checked against torch (within `tolerance`) first if missing."""
    path = MODELS / f"{fixture.name}.onnx"
    if not path.exists():
        MODELS.mkdir(parents=True, exist_ok=True)
        _generator().generate(fixture, MODELS, tolerance=tolerance)
    return path


def scale_model_path(name: str) -> Path:
    """bench/models/NAME.onnx, exported first if missing (takes a couple of minutes)."""
    path = MODELS / f"{name}.onnx"
    if path.exists():
        return path
    width, batch = SCALE_MODELS[name]
    gen = _generator()

    def build(rng):
        return (gen.models.resnet18_narrow(width), (gen._image(rng, batch, 3, 32, 32),),
                (gen._classes(rng, (batch,), 10),), "cross_entropy")

    fixture = gen.Fixture(name, f"ResNet-18 topology (BasicBlocks [2,2,2,2], BN, CIFAR 3x3 "
                          f"stem) at base width {width}, {batch}x3x32x32 input, cross entropy, "
                          "SGD momentum 0.9", build,
                          gen.OptimizerSpec("momentum", lr=0.05, momentum=0.9))
    return export_cached(fixture)
