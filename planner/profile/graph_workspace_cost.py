"""What a whole-graph workspace measurement (planner.profile.graph_workspace) will take, known
before it starts, so that a request whose time cannot pay for it is not made to wait for it.

Its parts, as timed on the development machine (2 shared cores, one thread, ONNX Runtime 1.31,
the fixtures and bench models with the extended rewrite):
- drawing the graph inputs, which cannot be interrupted: GPT-2-small's 1.4 GB at about 1 GB/s
  (INPUT_BYTES_PER_S is half that);
- building the session, which cannot be interrupted either: 0.02-0.6 s, about 0.13 ms per node
  (SESSION_S_PER_NODE is 0.2 ms);
- RUNS runs of the step, which ONNX Runtime's `terminate` run option stops, but only between
  nodes: each op is priced on a one-thread roofline (its FLOPs at FLOPS_PER_S, its operand bytes
  at BYTES_PER_S, the slower of the two) plus S_PER_NODE of the profiler's own cost, and the
  slowest op is how late a stop can come (GPT-2-small's 40-GFLOP logits Gemm: 2 s).

Against measured runs (the slower of two) the step estimate was 1.2x on GPT-2-small (16 s for
13 s), 0.7-1.2x on BERT-small, ResNet-18 (two widths), U-Net, MobileNetV2 and GPT-2-deep, and
0.2x on VGG-11 (its large fully-connected gradients run slower than their bytes suggest), while
ONNX Runtime's FusedMatMul was priced as one operation per output element; priced as the matrix
product it is (planner.profile.estimate.op_flops) GPT-2-small's estimate is 26.5 s (2.0x) and
BERT-small's 11.6 s instead of 10.2 s; the constants here were not refitted. A run the estimate
misjudges is still stopped in time, it only costs the seconds it ran, and a measurement wrongly
judged too slow leaves the plan the conservative bound.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from planner.ir.graph import Graph, Op
from planner.profile.estimate import op_bytes, op_flops

INPUT_BYTES_PER_S = 0.5e9
SESSION_S_PER_NODE = 2e-4
FLOPS_PER_S = 20e9  # per intra-op thread
BYTES_PER_S = 4e9
S_PER_NODE = 40e-6


@dataclass(frozen=True)
class MeasurementCost:
    """Estimated seconds of a whole-graph measurement: drawing inputs and building the session
    (`setup_s`, uninterruptible), one run of the step (`step_s`), and the slowest op
    (`longest_op_s`: how long after a stop is asked for the run may go on)."""

    setup_s: float
    step_s: float
    longest_op_s: float

    def total(self, runs: int) -> float:
        return self.setup_s + runs * self.step_s


def measurement_cost(graph: Graph, threads: int = 1, draw_inputs: bool = True,
                     ops: Sequence[Op] | None = None) -> MeasurementCost:
    """The estimated cost of measuring `graph` on the CPU with `threads` intra-op threads
    (`draw_inputs`: its input values are still to be generated), or of running only `ops` of
    it (the profiler's capture of a chunk's values)."""
    run = graph.ops if ops is None else ops
    per_op = [max(op_flops(graph, op) / (FLOPS_PER_S * threads),
                  op_bytes(graph, op) / BYTES_PER_S) + S_PER_NODE for op in run]
    inputs = sum(graph.tensors[t].nbytes for t in graph.inputs) if draw_inputs else 0
    return MeasurementCost(inputs / INPUT_BYTES_PER_S + SESSION_S_PER_NODE * len(run),
                           sum(per_op), max(per_op, default=0.0))
