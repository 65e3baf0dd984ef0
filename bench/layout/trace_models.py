"""The training steps behind the layout bench's real traces (needs torch and the export extra).

Each case is a fixture of the zoo generator (tests/fixtures/generate.py), exported once into
bench/models/ (bench.scale_models.export_cached, not committed). The buffer count of a trace is
set by the depth of the network (one storage per tensor that owns bytes, about 90 to 150 per
block with backward and optimizer); the batch size sets the sizes. So the cases span depth for
1,000 to 15,000 buffers and batch 16 to 128 for realistic size mixes:

- resnet18 / resnet50 / resnet101 / resnet152: torchvision's ResNets (BasicBlock for 18,
  Bottleneck [3,4,6,3] / [3,4,23,3] / [3,8,36,3] for the others), 64x64 images, SGD momentum;
- mobilenet_v2: MobileNetV2 (width 1.0) at 96x96, SGD momentum;
- gpt2_d48 / gpt2_d96: the zoo's GPT-2 blocks (pre-norm, causal attention, GELU MLP, tied LM
  head) 48 and 96 deep at width 128, 4 heads, 64 tokens over a 1,024-token vocabulary, Adam.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from bench.memory.models import BasicBlock, MobileNetV2, OptimizerSpec, _conv_bn, gen

# The export is compared with torch but not rejected on the difference (None): a trace needs
# the graph's structure and sizes only, and first-step momentum buffers of deep batch-norm
# networks differ from torch's by up to ~0.2 (MobileNetV2 0.08, see bench.memory.models;
# ResNet-50 at batch 32 0.19), which is the exporter's business, not the layout bench's.
EXPORT_TOLERANCE = None


class Bottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5: the stride on the 3x3 convolution), expansion 4."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.body = nn.Sequential(_conv_bn(cin, width, 1), _conv_bn(width, width, 3, stride),
                                  _conv_bn(width, cout, 1, act=None))
        self.down = (_conv_bn(cin, cout, 1, stride, act=None)
                     if stride != 1 or cin != cout else nn.Identity())
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.body(x) + self.down(x))


class ResNet(nn.Module):
    """torchvision's ResNet layout: 7x7 stride-2 stem, 3x3 max pool, four stages."""

    def __init__(self, blocks: tuple[int, int, int, int], bottleneck: bool, classes: int = 1000):
        super().__init__()
        self.stem = nn.Sequential(_conv_bn(3, 64, 7, 2), nn.MaxPool2d(3, 2, 1))
        layers: list[nn.Module] = []
        cin = 64
        for stage, (count, width) in enumerate(zip(blocks, (64, 128, 256, 512), strict=True)):
            for k in range(count):
                stride = 2 if stage > 0 and k == 0 else 1
                if bottleneck:
                    layers.append(Bottleneck(cin, width, stride))
                    cin = 4 * width
                else:
                    layers.append(BasicBlock(cin, width, stride))
                    cin = width
        self.blocks = nn.Sequential(*layers)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.stem(x))
        return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))


RESNETS = {"resnet18": ((2, 2, 2, 2), False), "resnet50": ((3, 4, 6, 3), True),
           "resnet101": ((3, 4, 23, 3), True), "resnet152": ((3, 8, 36, 3), True)}
GPT2_DEPTHS = {"gpt2_d48": 48, "gpt2_d96": 96}


@dataclass(frozen=True)
class TraceCase:
    """One trace: a model family at one batch size."""

    model: str
    batch: int

    @property
    def name(self) -> str:
        return f"{self.model}_b{self.batch}"


def _images(model: Callable[[], nn.Module], batch: int, size: int):
    def build(rng: torch.Generator):
        return (model(), (torch.randn((batch, 3, size, size), generator=rng),),
                (torch.randint(0, 1000, (batch,), generator=rng),), "cross_entropy")
    return build


def _gpt2(layers: int, batch: int, vocab: int = 1024, seq: int = 64):
    def build(rng: torch.Generator):
        tokens = torch.randint(0, vocab, (batch, seq + 1), generator=rng)
        model = gen.models.GPT2Tiny(vocab=vocab, seq=seq, dim=128, heads=4, layers=layers)
        return (model, (tokens[:, :-1].contiguous(),), (tokens[:, 1:].contiguous(),),
                "sequence_cross_entropy")
    return build


def fixture(case: TraceCase) -> Any:
    """The zoo generator's fixture for ``case`` (exported as ``trace_<name>``)."""
    momentum = OptimizerSpec("momentum", lr=0.05, momentum=0.9)
    if case.model in RESNETS:
        blocks, bottleneck = RESNETS[case.model]
        return gen.Fixture(f"trace_{case.name}", f"{case.model} (torchvision layout), "
                           f"{case.batch}x3x64x64, cross entropy, SGD momentum 0.9",
                           _images(lambda: ResNet(blocks, bottleneck), case.batch, 64), momentum)
    if case.model == "mobilenet_v2":
        return gen.Fixture(f"trace_{case.name}", f"MobileNetV2 (width 1.0), {case.batch}x3x96x96,"
                           " cross entropy, SGD momentum 0.9",
                           _images(MobileNetV2, case.batch, 96), momentum)
    layers = GPT2_DEPTHS[case.model]
    return gen.Fixture(f"trace_{case.name}", f"GPT-2 blocks x{layers} (dim 128, 4 heads), "
                       f"{case.batch}x64 tokens, vocab 1024, next-token cross entropy, Adam",
                       _gpt2(layers, case.batch), OptimizerSpec("adam", lr=1e-4))
