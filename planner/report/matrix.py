"""The compute/keep matrix of each device: op x step, in the spirit of Checkmate's R and S.

A row per op that runs on the device or whose value the device holds, ordered by the step that
first computes it (so the first computations form a diagonal); a column per step. A cell is
`computed` or `recomputed` at the step the op runs there, `kept` while a buffer holding one of its
outputs is live there, `held copy` while a copy of one (from another device) is, and `copy` at a
step that moves one of its outputs in or out. Ops with no output buffer on the device (e.g. ones
whose only outputs are unused) still get their compute cells.

Large plans are binned to at most `max_rows` x `max_cols` cells; a binned cell shows the strongest
state inside it (palette: recomputed > computed > copy > held copy > kept), so recomputations stay
visible. Each row of cells becomes runs of equal state (one rectangle per run); when that is still
too many rectangles for a responsive page the columns are binned further.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.report.index import PlanIndex, live_range
from planner.report.palette import COMPUTED, COPY, HELD_COPY, KEPT, RECOMPUTE
from schemas.plan import ComputeStep, CopyStep


@dataclass(frozen=True)
class MatrixRow:
    op_ids: list[int]  # the ops binned into this displayed row, in row order
    label: str  # first op's name (and how many more)
    region: str | None  # region of the first op, when the model is known


@dataclass(frozen=True)
class ScheduleMatrix:
    device: str
    n_ops: int
    n_steps: int
    ops_per_row: int
    steps_per_col: int
    rows: list[MatrixRow]
    grid: np.ndarray  # uint8 [rows, cols] of palette states
    computed: int  # compute steps on the device (first computations)
    recomputed: int  # recompute steps on the device

    @property
    def binned(self) -> bool:
        return self.ops_per_row > 1 or self.steps_per_col > 1

    def runs(self) -> list[tuple[int, int, int, int]]:
        """(row, first column, column count, state) of each run of equal non-empty cells."""
        return _runs(self.grid)


def schedule_matrices(index: PlanIndex, max_rows: int = 400, max_cols: int = 1000,
                      max_runs: int = 40_000) -> list[ScheduleMatrix]:
    return [_matrix(index, device, max_rows, max_cols, max_runs) for device in index.devices]


def _matrix(index: PlanIndex, device: str, max_rows: int, max_cols: int,
            max_runs: int) -> ScheduleMatrix:
    n = max(index.n_steps, 1)
    computes: list[tuple[int, int, int]] = []  # (op, step, state)
    for step, s in enumerate(index.plan.steps):
        if isinstance(s, ComputeStep) and s.device == device:
            computes.append((s.op_id, step, RECOMPUTE if s.recompute else COMPUTED))
    held: list[tuple[int, int, int, int]] = []  # (op, first, last, state)
    for b in index.plan.buffers:
        op = index.op_of_buffer.get(b.id)
        if b.device == device and op is not None:
            first, last = live_range(b, index.n_steps)
            held.append((op, first, last, HELD_COPY if b.id in index.copied_buffers else KEPT))
    copies: list[tuple[int, int]] = []  # (op, step)
    for step, s in enumerate(index.plan.steps):
        if isinstance(s, CopyStep):
            touched = {index.buffers[b].device for b in (s.src, s.dst) if b in index.buffers}
            op = index.op_of_buffer.get(s.src)
            if device in touched and op is not None:
                copies.append((op, step))

    op_ids = {op for op, _, _ in computes} | {op for op, *_ in held}
    ordered = sorted(op_ids, key=lambda op: (index.first_compute.get(op, n), op))
    position = {op: k for k, op in enumerate(ordered)}
    ops_per_row = max(1, math.ceil(len(ordered) / max_rows))
    steps_per_col = max(1, math.ceil(n / max_cols))
    while True:
        grid = _fill(position, computes, held, copies, len(ordered), n, ops_per_row,
                     steps_per_col)
        if len(_runs(grid)) <= max_runs or steps_per_col >= n:
            break
        steps_per_col *= 2
    rows = []
    for r in range(math.ceil(len(ordered) / ops_per_row)):  # none for a device that runs nothing
        members = ordered[r * ops_per_row:(r + 1) * ops_per_row]
        first_op = index.ops.get(members[0])
        label = first_op.name if first_op else f"op {members[0]}"
        if len(members) > 1:
            label += f" (+{len(members) - 1} more)"
        rows.append(MatrixRow(members, label, first_op.region if first_op else None))
    return ScheduleMatrix(
        device=device, n_ops=len(ordered), n_steps=index.n_steps, ops_per_row=ops_per_row,
        steps_per_col=steps_per_col, rows=rows, grid=grid,
        computed=sum(state == COMPUTED for *_, state in computes),
        recomputed=sum(state == RECOMPUTE for *_, state in computes),
    )


def _fill(position: dict[int, int], computes: list[tuple[int, int, int]],
          held: list[tuple[int, int, int, int]], copies: list[tuple[int, int]], n_ops: int,
          n_steps: int, ops_per_row: int, steps_per_col: int) -> np.ndarray:
    grid = np.zeros((max(1, math.ceil(n_ops / ops_per_row)), math.ceil(n_steps / steps_per_col)),
                    dtype=np.uint8)
    for op, first, last, state in held:
        cells = grid[position[op] // ops_per_row, first // steps_per_col:last // steps_per_col + 1]
        np.maximum(cells, state, out=cells)
    for op, step in copies:
        if op in position:
            r, c = position[op] // ops_per_row, step // steps_per_col
            grid[r, c] = max(grid[r, c], COPY)
    for op, step, state in computes:
        r, c = position[op] // ops_per_row, step // steps_per_col
        grid[r, c] = max(grid[r, c], state)
    return grid


def _runs(grid: np.ndarray) -> list[tuple[int, int, int, int]]:
    runs = []
    for r, row in enumerate(grid):
        changes = np.flatnonzero(np.diff(row)) + 1
        starts = np.concatenate(([0], changes))
        ends = np.concatenate((changes, [len(row)]))
        for a, b in zip(starts.tolist(), ends.tolist(), strict=True):
            if row[a]:
                runs.append((r, a, b - a, int(row[a])))
    return runs
