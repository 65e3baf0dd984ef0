"""The ordering bench's scale case: a deep tiny GPT-2 of about 5,000 ops, exported on demand.

Issue 13 asks for the quick orders to finish in under a second up to 5,000 ops. The fixture zoo
stops at 1,804 ops, so this is the zoo's GPT-2 (same blocks, dim 32, 4x16 tokens, Adam) with
15 blocks instead of 2, exported once with the fixture generator (bench.scale_models) into
bench/models/ (not committed) and reused. Its state, update chains and attention are those of
a real transformer training step, only deeper.
"""

from __future__ import annotations

from pathlib import Path

from bench.scale_models import EXPORT_TOLERANCE, MODELS, _generator

NAME = "gpt2_deep_adam"
LAYERS = 15


def scale_graph_path() -> Path:
    """bench/models/gpt2_deep_adam.onnx, exported first if missing (a minute or two)."""
    path = MODELS / f"{NAME}.onnx"
    if path.exists():
        return path
    gen = _generator()

    def build(rng):
        vocab, seq, batch = 96, 16, 4
        tokens = gen.torch.randint(0, 64, (batch, seq + 1), generator=rng)
        model = gen.models.GPT2Tiny(vocab=vocab, seq=seq, dim=32, heads=2, layers=LAYERS)
        return (model, (tokens[:, :-1].contiguous(),), (tokens[:, 1:].contiguous(),),
                "sequence_cross_entropy")

    fixture = gen.Fixture(NAME, f"tiny GPT-2 as in the fixture zoo with {LAYERS} blocks "
                          "(dim 32, 2 heads, vocab 96, 4x16 tokens), next-token cross entropy, "
                          "Adam", build, gen.OptimizerSpec("adam", lr=1e-3))
    MODELS.mkdir(parents=True, exist_ok=True)
    gen.generate(fixture, MODELS, tolerance=EXPORT_TOLERANCE)
    return path


if __name__ == "__main__":
    print(scale_graph_path())
