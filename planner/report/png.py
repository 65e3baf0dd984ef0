"""The report's figures as PNG files, for papers and CI artifacts (matplotlib, optional).

matplotlib is imported only here and only when exporting (extra `report`:
`pip install 'arenaplan[report]'`); the HTML page never needs it. Per device this writes
`memory_DEVICE.png`, `matrix_DEVICE.png` and `arena_DEVICE.png` (':' in a device name becomes
'_') and returns their paths.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from planner.report.arena import ArenaMap
from planner.report.data import ReportData
from planner.report.matrix import ScheduleMatrix
from planner.report.memory import MemoryCurve
from planner.report.palette import (
    ARENA_COLOUR,
    BOUND_COLOUR,
    BUDGET_COLOUR,
    LAYERS,
    RECOMPUTE,
    STATES,
    layer_colour,
    layer_name,
)
from schemas.errors import ArenaplanError

if TYPE_CHECKING:  # matplotlib is imported at run time only by _pyplot (the optional extra)
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DPI = 130


class MissingDependencyError(ArenaplanError):
    """PNG export was asked for but matplotlib is not installed."""


def _pyplot() -> ModuleType:
    try:
        import matplotlib
    except ImportError:
        raise MissingDependencyError(
            "PNG export needs matplotlib: pip install 'arenaplan[report]' (the HTML report "
            "itself does not need it)"
        ) from None
    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _safe(device: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", device)


def export_pngs(data: ReportData, out_dir: str | Path) -> list[Path]:
    plt = _pyplot()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for curve in data.memory:
        written.append(_memory_png(plt, curve, out / f"memory_{_safe(curve.device)}.png"))
    for matrix in data.matrices:
        written.append(_matrix_png(plt, matrix, out / f"matrix_{_safe(matrix.device)}.png"))
    for arena in data.arenas:
        written.append(_arena_png(plt, arena, out / f"arena_{_safe(arena.device)}.png"))
    return written


def _budget_lines(ax: Axes, budget: int, arena: int, bound: int, content: int) -> None:
    if budget and budget <= 1.6 * max(content, 1):
        ax.axhline(budget / 2**20, color=BUDGET_COLOUR, linestyle="--", linewidth=1.4,
                   label="budget")
    if arena:
        ax.axhline(arena / 2**20, color=ARENA_COLOUR, linewidth=1, label="arena size")
        ax.axhline(bound / 2**20, color=BOUND_COLOUR, linestyle=":", linewidth=1,
                   label="live-bytes lower bound")


def _memory_png(plt: ModuleType, curve: MemoryCurve, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(12, 3.6))
    ends = [*curve.starts[1:], curve.n_steps]
    xs = np.column_stack([curve.starts, ends]).ravel()  # a step function: each span flat
    names = [k for k in LAYERS if any(curve.layers.get(k, []))]
    stacks = [np.repeat(np.asarray(curve.layers[k], dtype=float) / 2**20, 2) for k in names]
    if stacks:
        ax.stackplot(xs, *stacks, colors=[layer_colour(k) for k in names],
                     labels=[layer_name(k) for k in names], linewidth=0)
    content = max(curve.peak_bytes, curve.arena_bytes)
    _budget_lines(ax, curve.budget_bytes, curve.arena_bytes, curve.lower_bound_bytes, content)
    ax.set_xlim(0, max(curve.n_steps, 1))
    ax.set_ylim(bottom=0)
    ax.set_xlabel("step")
    ax.set_ylabel("MiB live")
    ax.set_title(f"memory in use on {curve.device}")
    _legend_outside(ax)
    return _save(plt, fig, path)


def _matrix_png(plt: ModuleType, matrix: ScheduleMatrix, path: Path) -> Path:
    from matplotlib.colors import ListedColormap

    colours = ["#fafafa"] + [STATES[k][1] for k in sorted(STATES)]
    fig, ax = plt.subplots(figsize=(12, 5))
    extent = (0, matrix.grid.shape[1] * matrix.steps_per_col, matrix.n_ops, 0)
    ax.imshow(matrix.grid, cmap=ListedColormap(colours), vmin=0, vmax=len(colours) - 1,
              aspect="auto", interpolation="nearest", extent=extent)
    ax.set_xlim(0, max(matrix.n_steps, 1))
    ax.set_xlabel("step")
    ax.set_ylabel("ops, in order of first computation")
    # Recomputations as markers on top: a single cell would vanish when the image is scaled.
    rows, cols = np.nonzero(matrix.grid == RECOMPUTE)
    ax.scatter((cols + 0.5) * matrix.steps_per_col, (rows + 0.5) * matrix.ops_per_row, s=14,
               marker="s", color=STATES[RECOMPUTE][1], edgecolors="#7a1010", linewidths=0.5,
               zorder=3)
    ax.set_title(f"compute/keep matrix of {matrix.device} "
                 f"({matrix.recomputed} recomputations)")
    handles = [plt.Rectangle((0, 0), 1, 1, color=STATES[k][1]) for k in sorted(STATES)]
    ax.legend(handles, [STATES[k][0] for k in sorted(STATES)], fontsize=7, loc="upper left",
              bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(plt, fig, path)


def _arena_png(plt: ModuleType, arena: ArenaMap, path: Path) -> Path:
    from matplotlib.collections import PatchCollection
    from matplotlib.patches import Rectangle

    fig, ax = plt.subplots(figsize=(12, 4))
    patches = [Rectangle((r.first_step, r.offset / 2**20), r.last_step + 1 - r.first_step,
                         r.size / 2**20) for r in arena.rects]
    colours = [layer_colour(r.layer) for r in arena.rects]
    ax.add_collection(PatchCollection(patches, facecolors=colours, edgecolors="white",
                                      linewidths=0.2))
    content = max([arena.arena_bytes] + [r.offset + r.size for r in arena.rects])
    _budget_lines(ax, arena.budget_bytes, arena.arena_bytes, arena.lower_bound_bytes, content)
    ax.set_xlim(0, max(arena.n_steps, 1))
    top = max(content, arena.budget_bytes if arena.budget_bytes <= 1.6 * content else 0)
    ax.set_ylim(0, top * 1.06 / 2**20)
    ax.set_xlabel("step")
    ax.set_ylabel("arena offset (MiB)")
    ax.set_title(f"arena map of {arena.device}")
    layers = [k for k in LAYERS if any(r.layer == k for r in arena.rects)]
    for k in layers:  # legend entries for the layers drawn
        ax.add_patch(Rectangle((0, 0), 0, 0, color=layer_colour(k), label=layer_name(k)))
    _legend_outside(ax)
    return _save(plt, fig, path)


def _legend_outside(ax: Axes) -> None:
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)


def _save(plt: ModuleType, fig: Figure, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
