"""The report's figures as inline SVG: memory curves, compute/keep matrices and arena maps.

All three put the steps on the x axis with the same margins, so the figures of one device line
up when read one above the other.
"""

from __future__ import annotations

import re

from planner.report.arena import ArenaMap
from planner.report.matrix import ScheduleMatrix
from planner.report.memory import MemoryCurve
from planner.report.palette import (
    ARENA_COLOUR,
    BOUND_COLOUR,
    BUDGET_COLOUR,
    COPY,
    LAYERS,
    RECOMPUTE,
    REGIONS,
    STATES,
    layer_colour,
    layer_name,
)
from planner.report.svg import (
    Scale,
    Svg,
    byte_ticks,
    format_bytes,
    format_tick,
    ticks,
)

WIDTH = 1000
LEFT = 84
RIGHT = 16
TOP = 16
AXIS_FONT = 11
# A budget line further above the plot's content than this factor is not drawn to scale.
BUDGET_ON_SCALE = 1.6
# Smallest drawn size (px) of a recomputation in a compute/keep matrix.
MARK = 4.0


def figure_id(kind: str, device: str) -> str:
    return f"{kind}-{re.sub(r'[^A-Za-z0-9_-]', '-', device)}"


def _step_scale(n_steps: int) -> Scale:
    return Scale(0, max(n_steps, 1), LEFT, WIDTH - RIGHT)


def _y_max(content: float, budget: int) -> tuple[float, bool]:
    """Top of a byte axis and whether the budget is drawn to scale."""
    on_scale = 0 < budget <= BUDGET_ON_SCALE * max(content, 1)
    top = max(content, budget if on_scale else 0, 1)
    return top * 1.06, on_scale


def _byte_axis(svg: Svg, y: Scale, top: float) -> None:
    values, unit, size = byte_ticks(top)
    for v in values:
        py = y(v)
        svg.line(LEFT, py, WIDTH - RIGHT, py, stroke="#e3e3e3", stroke_width=1)
        svg.text(LEFT - 6, py + 4, format_tick(v, size), text_anchor="end", font_size=AXIS_FONT)
    svg.text(14, (y.a + y.b) / 2, unit, font_size=AXIS_FONT, text_anchor="middle",
             transform=f"rotate(-90 14 {(y.a + y.b) / 2:.1f})")


def _step_axis(svg: Svg, x: Scale, n_steps: int, y_axis: float) -> None:
    svg.line(LEFT, y_axis, WIDTH - RIGHT, y_axis, stroke="#555", stroke_width=1)
    for v in ticks(0, max(n_steps, 1), 10, integer=True):
        px = x(v)
        svg.line(px, y_axis, px, y_axis + 4, stroke="#555", stroke_width=1)
        svg.text(px, y_axis + 16, f"{v:.0f}", text_anchor="middle", font_size=AXIS_FONT)
    svg.text((LEFT + WIDTH - RIGHT) / 2, y_axis + 31, "step", text_anchor="middle",
             font_size=AXIS_FONT)


def _hline(svg: Svg, y: float, colour: str, dash: str | None, title: str, kind: str) -> None:
    """A horizontal reference line; its group's class (`budget-line`, `arena-line`,
    `bound-line`) lets the page's readers and tests find it without matching colours."""
    svg.open_group(title=title, class_=f"{kind}-line")
    svg.line(LEFT, y, WIDTH - RIGHT, y, stroke=colour, stroke_width=1.6, stroke_dasharray=dash)
    svg.line(LEFT, y, WIDTH - RIGHT, y, stroke="transparent", stroke_width=7)  # hover target
    svg.close_group()


def _reference_lines(svg: Svg, y: Scale, arena_bytes: int, lower_bound_bytes: int,
                     budget_bytes: int, budget_on_scale: bool) -> None:
    """The live-bytes lower bound, arena and budget lines of a byte axis. The budget is labelled
    on its line, or named at the top when it is too far above the content to draw to scale
    (a line at the top would squash what the figure is about)."""
    if arena_bytes:
        _hline(svg, y(lower_bound_bytes), BOUND_COLOUR, "2 3",
               f"live-bytes lower bound {format_bytes(lower_bound_bytes)}", "bound")
        _hline(svg, y(arena_bytes), ARENA_COLOUR, None, f"arena {format_bytes(arena_bytes)}",
               "arena")
    if not budget_bytes:
        return
    label = f"budget {format_bytes(budget_bytes)}"
    if budget_on_scale:
        by = y(budget_bytes)
        _hline(svg, by, BUDGET_COLOUR, "7 4", label, "budget")
    else:
        by, label = TOP + 17, label + " (above the chart)"
    svg.text(WIDTH - RIGHT - 4, by - 5, label, text_anchor="end", font_size=AXIS_FONT,
             fill=BUDGET_COLOUR, class_="budget-label")


def memory_svg(curve: MemoryCurve) -> str:
    """Stacked bytes live per layer over the steps, with the budget, arena and bound lines."""
    plot_h = 240
    height = TOP + plot_h + 60
    x = _step_scale(curve.n_steps)
    content = max(curve.peak_bytes, curve.arena_bytes, curve.lower_bound_bytes)
    top, budget_on_scale = _y_max(content, curve.budget_bytes)
    y = Scale(0, top, TOP + plot_h, TOP)
    svg = Svg(WIDTH, height, class_="figure memory", id=figure_id("memory", curve.device),
              role="img", aria_label=f"memory in use on {curve.device} over the steps",
              data_device=curve.device, data_x0=float(LEFT), data_x1=float(WIDTH - RIGHT),
              data_steps=curve.n_steps)
    _byte_axis(svg, y, top)

    ends = [*curve.starts[1:], curve.n_steps]
    below = [0] * len(curve.starts)
    for layer in LAYERS:
        values = curve.layers.get(layer)
        if values is None or not any(values):
            continue
        above = [b + v for b, v in zip(below, values, strict=True)]
        d = _band_path(x, y, curve.starts, ends, below, above)
        svg.open_group(title=f"{layer_name(layer)}: up to {format_bytes(max(values))}")
        svg.path(d, fill=layer_colour(layer), stroke="none", class_=f"layer layer-{layer}")
        svg.close_group()
        below = above

    _reference_lines(svg, y, curve.arena_bytes, curve.lower_bound_bytes, curve.budget_bytes,
                     budget_on_scale)
    px, py = x(curve.peak_step + 0.5), y(curve.peak_bytes)
    svg.open_group(title=f"peak {format_bytes(curve.peak_bytes)} at step {curve.peak_step}")
    svg.add(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="3.5" fill="#000"/>')
    svg.close_group()

    axis_y = TOP + plot_h
    strip = axis_y + 38
    _event_strip(svg, x, strip, curve.recompute_steps, STATES[RECOMPUTE][1], "recomputes")
    _event_strip(svg, x, strip + 9, curve.copy_steps, STATES[COPY][1], "copies")
    _step_axis(svg, x, curve.n_steps, axis_y)
    svg.rect(LEFT, TOP, WIDTH - RIGHT - LEFT, plot_h, fill="transparent", class_="hover-area")
    return svg.render()


def _band_path(x: Scale, y: Scale, starts: list[int], ends: list[int], below: list[int],
               above: list[int]) -> str:
    """A filled step-function band between `below` and `above` (one value per span)."""
    upper = _step_line(x, y, starts, ends[-1], above)
    lower = _step_line(x, y, starts, ends[-1], below)
    points = upper + lower[::-1]
    return "M" + "L".join(f"{px:.1f},{py:.1f}" for px, py in points) + "Z"


def _step_line(x: Scale, y: Scale, starts: list[int], end: int,
               values: list[int]) -> list[tuple[float, float]]:
    """Corners of the step function `values` (constant over each span): one pair per change."""
    points: list[tuple[float, float]] = []
    previous: int | None = None
    for s, v in zip(starts, values, strict=True):
        if v != previous:
            if previous is not None:
                points.append((x(s), y(previous)))
            points.append((x(s), y(v)))
            previous = v
    points.append((x(end), y(previous if previous is not None else 0)))
    return points


def _event_strip(svg: Svg, x: Scale, y0: float, steps: list[int], colour: str,
                 what: str) -> None:
    """A row of ticks under the step axis, one per step of a kind (recomputations, copies)."""
    if not steps:
        return
    svg.open_group(title=f"{len(steps)} {what}", class_=f"strip strip-{what}")
    svg.text(LEFT - 6, y0 + 6, what, text_anchor="end", font_size=9, fill=colour)
    d = "".join(f"M{x(s + 0.5):.1f},{y0:.1f}v7" for s in steps)
    svg.path(d, stroke=colour, stroke_width=1.5, fill="none")
    svg.close_group()


def matrix_svg(matrix: ScheduleMatrix) -> str:
    """Ops (rows, in order of first computation) x steps: computed / kept / recomputed cells."""
    rows = max(len(matrix.rows), 1)
    plot_h = float(min(640, max(140, rows * 3)))
    row_h = plot_h / rows
    height = TOP + plot_h + 40
    x = _step_scale(matrix.n_steps)
    svg = Svg(WIDTH, height, class_="figure matrix", id=figure_id("matrix", matrix.device),
              role="img", aria_label=f"compute/keep matrix of {matrix.device}",
              data_device=matrix.device)
    svg.rect(LEFT, TOP, WIDTH - RIGHT - LEFT, plot_h, fill="#fafafa", stroke="#ddd")
    spc = matrix.steps_per_col
    recomputes: list[tuple[int, float, float]] = []
    runs_by_row: dict[int, list[tuple[int, int, int]]] = {}
    for r, c, count, state in matrix.runs():
        runs_by_row.setdefault(r, []).append((c, count, state))
    for r, row in enumerate(matrix.rows):
        y0 = TOP + r * row_h
        region = REGIONS.get(row.region or "")
        if region is None and r not in runs_by_row:
            continue
        svg.open_group(title=row.label + (f" [{row.region}]" if row.region else ""))
        if region is not None:
            svg.rect(LEFT - 12, y0, 8, row_h, fill=region)
        for c, count, state in runs_by_row.get(r, []):
            x0 = x(c * spc)
            x1 = x(min((c + count) * spc, max(matrix.n_steps, 1)))
            if state == RECOMPUTE:
                recomputes.append((r, x0, x1))
            svg.rect(x0, y0, max(x1 - x0, 0.8), max(row_h, 0.8), fill=STATES[state][1])
        svg.close_group()
    # Recomputations on top, at least MARK px wide and tall, with a tick in the left margin:
    # a single recomputed cell must stand out in a matrix of thousands.
    svg.open_group(class_="recomputes")
    for r, x0, x1 in recomputes:
        row, y0 = matrix.rows[r], TOP + r * row_h
        cx, cy = (x0 + x1) / 2, y0 + row_h / 2
        w, h = max(x1 - x0, MARK), max(row_h, MARK)
        svg.rect(cx - w / 2, cy - h / 2, w, h, title=f"{row.label} recomputed",
                 fill=STATES[RECOMPUTE][1], stroke="#7a1010", stroke_width=0.6,
                 class_="cell recompute")
        svg.line(LEFT - 3, cy, LEFT, cy, stroke=STATES[RECOMPUTE][1], stroke_width=2)
    svg.close_group()
    label = "ops, in order of first computation" if plot_h >= 260 else "ops"
    svg.text(LEFT - 16, TOP + plot_h / 2, label,
             font_size=AXIS_FONT, text_anchor="middle",
             transform=f"rotate(-90 {LEFT - 16} {TOP + plot_h / 2:.1f})")
    _step_axis(svg, x, matrix.n_steps, TOP + plot_h)
    return svg.render()


def arena_svg(arena: ArenaMap) -> str:
    """Buffers as rectangles: live steps (x) by byte range in the arena (y, 0 at the bottom)."""
    plot_h = 320
    height = TOP + plot_h + 40
    x = _step_scale(arena.n_steps)
    content = max([arena.arena_bytes, arena.lower_bound_bytes]
                  + [r.offset + r.size for r in arena.rects])
    top, budget_on_scale = _y_max(content, arena.budget_bytes)
    y = Scale(0, top, TOP + plot_h, TOP)
    svg = Svg(WIDTH, height, class_="figure arena", id=figure_id("arena", arena.device),
              role="img", aria_label=f"arena map of {arena.device}", data_device=arena.device)
    _byte_axis(svg, y, top)
    svg.open_group(class_="buffers")
    for r in arena.rects:
        x0, x1 = x(r.first_step), x(r.last_step + 1)
        y1, y0 = y(r.offset + r.size), y(r.offset)
        title = (f"{r.buffer} ({r.tensor}): {layer_name(r.layer)}, {format_bytes(r.size)} at "
                 f"offset {r.offset}, steps {r.first_step}-{r.last_step}, {r.zone}")
        if r.aliases:
            title += f"; updated in place by {', '.join(r.aliases)}"
        svg.rect(x0, y1, max(x1 - x0, 0.8), max(y0 - y1, 0.6), title=title,
                 fill=layer_colour(r.layer), stroke="#fff", stroke_width=0.3)
    svg.close_group()
    _reference_lines(svg, y, arena.arena_bytes, arena.lower_bound_bytes, arena.budget_bytes,
                     budget_on_scale)
    _step_axis(svg, x, arena.n_steps, TOP + plot_h)
    return svg.render()
