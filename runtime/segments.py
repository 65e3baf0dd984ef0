"""Grouping consecutive compute steps into segments, each run by one ONNX Runtime session.

A session per op pays onnxruntime's per-run overhead (a few microseconds) for every op; a
segment of consecutive compute steps on one device runs as one session whose every node output
is a graph output bound to its planned arena slice, so every value is still written in place.

What may change is the order of the segment's nodes, and with it the plan's reuse of addresses
(a value written over bytes another value still needs). Two cases:

- Order kept (host devices, graph optimizations off, `ExecutionOrder.PRIORITY_BASED`):
  onnxruntime then runs Kahn's algorithm popping the smallest node index among ready nodes,
  except that `Shape` and `Size` nodes jump ahead as soon as they are ready. The segment's nodes
  are added in plan order, which is topological, so every other node runs exactly in plan order
  and a Shape/Size node can only run earlier than planned. Any step may join, except that a
  Shape/Size step is checked as in the general case below.
- General case (e.g. CUDA, where onnxruntime may split a graph over streams): a step joins the
  current segment only if, for every buffer it writes, each buffer of the segment sharing those
  bytes is used only by steps the writer depends on (its ancestors inside the segment): every
  topological order finishes those uses before the write. The step's own read of the input it
  writes over in place is the kernel-level in-place write per-op execution does too.

Storage shared inside a segment (schema version 2) needs nothing special: a view's output and an
in-place output are graph outputs of the session bound on the same arena slice as the input they
share it with. A view op's kernel then sees equal addresses and copies nothing (onnxruntime's
Reshape, Flatten, Squeeze, Unsqueeze and Identity, CPU and CUDA, copy only when the addresses
differ), so a view step neither writes nor reads those bytes: it never splits a segment, and
only the steps reading its output count as uses of them. An elementwise kernel reads each
element before writing it (tests/runtime/test_in_place_kernels.py checks every such op type).

Copy steps end a segment; free steps are transparent (they only end a life); a change of device
starts a new segment. Nothing else does: a segment has no size cap by default (MobileNetV2's
4683 compute steps run as one session, five under the former cap of 1024). Each segment costs
one session run per step, onnxruntime's fixed cost of a run: 2-6 us of CPU time measured in
bench/runtime/results.md, which matters for small graphs split into many segments.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, field

from schemas.plan import BufferSpec, ComputeStep, CopyStep, FreeStep, Step


@dataclass
class Segment:
    """Consecutive compute steps on one device (plan step indices, in plan order)."""

    device: str
    steps: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class CopyUnit:
    step: int


Unit = Segment | CopyUnit

# Ops onnxruntime's priority-based order runs as soon as they are ready.
EARLY_OPS = frozenset({"Shape", "Size"})


class _Builder:
    def __init__(self, device: str, buffers: dict[str, BufferSpec], order_kept: bool):
        self.segment = Segment(device)
        self.order_kept = order_kept
        self.buffers = buffers
        self.ancestors: list[int] = []  # bitmask of segment-local ancestors per local step
        self.producer: dict[str, int] = {}  # buffer written in the segment -> local step
        self.uses: dict[str, list[int]] = {}  # buffer -> local steps reading or writing it
        self.regions: list[tuple[int, int, str]] = []  # (start, end, buffer) touched so far

    def _region(self, b_id: str) -> tuple[int, int]:
        b = self.buffers[b_id]
        return b.offset, b.offset + max(b.size, 1)

    def accepts(self, step: ComputeStep) -> bool:
        if self.order_kept and step.op_type not in EARLY_OPS:
            return True
        ancestors = self._ancestors_of(step)
        for out in step.outputs:
            if out is None or self.buffers[out].shares == "view":
                continue  # a view writes nothing: its bytes are its input's
            start, end = self._region(out)
            for r_start, r_end, other in self.regions:
                if other == out or r_end <= start or end <= r_start:
                    continue
                # The step's own read of a buffer it overwrites in place is not in `uses` yet:
                # that kernel-level in-place write happens in per-op execution too.
                if any(not ancestors >> user & 1 for user in self.uses[other]):
                    return False
        return True

    def _ancestors_of(self, step: ComputeStep) -> int:
        mask = 0
        for b in step.inputs:
            p = self.producer.get(b) if b is not None else None
            if p is not None:
                mask |= (1 << p) | self.ancestors[p]
        return mask

    def add(self, index: int, step: ComputeStep) -> None:
        local = len(self.segment.steps)
        self.ancestors.append(self._ancestors_of(step))
        self.segment.steps.append(index)
        touched = [*step.inputs, *step.outputs]
        if any(b is not None and self.buffers[b].shares == "view" for b in step.outputs):
            touched = step.inputs[1:]  # a view op touches no byte of the data it shares
        for b in touched:
            if b is None:
                continue
            if b not in self.uses:
                self.uses[b] = []
                start, end = self._region(b)
                self.regions.append((start, end, b))
            if not self.uses[b] or self.uses[b][-1] != local:
                self.uses[b].append(local)
        for b in step.outputs:
            if b is not None:
                self.producer[b] = local


def group_steps(steps: list[Step], buffers: dict[str, BufferSpec], *, fuse: bool = True,
                max_segment: int | None = None, order_kept: Collection[str] = ()
                ) -> list[Unit]:
    """The plan's steps as units to execute in order: segments of compute steps and copies.

    `fuse=False` gives one segment per compute step (a session per op); `max_segment` caps the
    compute steps of a segment (None: no cap). `order_kept` names the devices whose sessions
    run nodes in plan order (see the module docstring).
    """
    units: list[Unit] = []
    builder: _Builder | None = None
    for index, step in enumerate(steps):
        if isinstance(step, FreeStep):
            continue
        if isinstance(step, CopyStep):
            builder = None
            units.append(CopyUnit(index))
            continue
        assert isinstance(step, ComputeStep)
        if (
            builder is None
            or not fuse
            or builder.segment.device != step.device
            or (max_segment is not None and len(builder.segment.steps) >= max_segment)
            or not builder.accepts(step)
        ):
            builder = _Builder(step.device, buffers, step.device in order_kept)
            units.append(builder.segment)
        builder.add(index, step)
    return units
