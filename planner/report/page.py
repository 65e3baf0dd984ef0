"""The self-contained HTML report: summary, memory curves, compute/keep matrices, arena maps and
the step list, with inline CSS, SVG and script; the page fetches nothing.

`render_report_html(plan, graph=None)` is the entry point the CLI and the service use.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from html import escape

from planner.ir.graph import Graph
from planner.report.assets import CSS, JS
from planner.report.data import ReportData, ReportLimits, build_report_data
from planner.report.figures import arena_svg, matrix_svg, memory_svg
from planner.report.overview import PlanSummary
from planner.report.palette import (
    ARENA_COLOUR,
    BOUND_COLOUR,
    BUDGET_COLOUR,
    LAYERS,
    REGIONS,
    STATES,
    layer_name,
)
from planner.report.svg import format_bytes
from schemas.plan import Plan

# Above this many steps the step list starts collapsed.
COLLAPSE_STEPS = 500
# Recomputed ops listed in the summary before the rest is folded away.
LISTED_RECOMPUTES = 25
# Notes of a solver phase shown in its table row before the rest is folded away (a remat solve
# notes every reduction it made: a dozen long sentences that would make the row a page tall).
INLINE_NOTES = 2


class Markup(str):
    """A table cell that is already HTML, built from escaped parts."""


def render_report_html(plan: Plan, graph: Graph | None = None,
                       limits: ReportLimits | None = None) -> str:
    """The plan's report as one HTML document; `graph` (the plan's model) adds op regions."""
    return render_data_html(build_report_data(plan, graph, limits))


def render_data_html(data: ReportData) -> str:
    s = data.summary
    title = f"arenaplan report: {s.model_name or 'plan'} {s.plan_id[:12]}"
    body = "".join([
        _header(s, title),
        "<main>",
        _summary_section(data),
        _memory_section(data),
        _matrix_section(data),
        _arena_section(data),
        _steps_section(data),
        "</main>",
        '<div id="tooltip"></div>',
        _json_script("step-data", data.steps),
        _json_script("memory-data", _memory_json(data)),
        _json_script("layer-names", {k: v[0] for k, v in LAYERS.items()}),
        f"<script>{JS}</script>",
    ])
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        # An empty icon: otherwise a browser asks the server for /favicon.ico.
        "<link rel=\"icon\" href=\"data:,\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head>"
        f"<body>{body}</body></html>\n"
    )


def _json_script(element_id: str, value: object) -> str:
    text = json.dumps(value, separators=(",", ":")).replace("</", "<\\/")
    return f'<script type="application/json" id="{element_id}">{text}</script>'


def _memory_json(data: ReportData) -> dict:
    return {
        c.device: {"starts": c.starts, "steps": c.steps, "total": c.total,
                   "layers": c.layers, "budget": c.budget_bytes}
        for c in data.memory
    }


def _header(s: PlanSummary, title: str) -> str:
    model = f"model {escape(s.model_name)}, " if s.model_name else ""
    return (
        f"<header><h1>{escape(title)}</h1>"
        f"<div class=\"ids\">{model}plan {escape(s.plan_id)} &middot; planner "
        f"{escape(s.planner_version)} &middot; schema v{s.schema_version} &middot; model sha256 "
        f"{escape(s.model_sha256)}</div>"
        "<nav><a href=\"#summary\">Summary</a><a href=\"#memory\">Memory over the steps</a>"
        "<a href=\"#matrices\">Compute/keep matrices</a><a href=\"#arena\">Arena maps</a>"
        "<a href=\"#steps\">Steps</a></nav></header>"
    )


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    if value < 1e-3:
        return f"{value * 1e6:.1f} \u00b5s"
    if value < 1:
        return f"{value * 1e3:.2f} ms"
    return f"{value:.3f} s"


def _percent(value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    return f"{value:+.1%}" if signed else f"{value:.1%}"


def _card(key: str, value: str, sub: str = "", cls: str = "") -> str:
    klass = f" {cls}" if cls else ""
    return (f'<div class="card"><div class="k">{escape(key)}</div>'
            f'<div class="v{klass}">{escape(value)}</div><div class="s">{escape(sub)}</div></div>')


def _table(headers: list[str], rows: list[list[str]], numeric: set[int] | None = None,
           table_id: str | None = None) -> str:
    numeric = numeric or set()
    ident = f' id="{table_id}"' if table_id else ""
    head = "".join(f'<th{" class=n" if i in numeric else ""}>{escape(h)}</th>'
                   for i, h in enumerate(headers))
    body = "".join(
        "<tr>" + "".join(f'<td{" class=n" if i in numeric else ""}>{_cell(v)}</td>'
                         for i, v in enumerate(row)) + "</tr>"
        for row in rows
    )
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cell(value: str) -> str:
    return value if isinstance(value, Markup) else escape(value)


def _notes(notes: list[str]) -> Markup:
    """A solver phase's notes: the first few inline, the rest in a closed details element."""
    shown = escape("; ".join(notes[:INLINE_NOTES]))
    if len(notes) <= INLINE_NOTES:
        return Markup(shown)
    rest = "".join(f"<li>{escape(n)}</li>" for n in notes[INLINE_NOTES:])
    return Markup(f'{shown}<details class="notes"><summary>{len(notes) - INLINE_NOTES} more '
                  f"notes</summary><ul>{rest}</ul></details>")


def _summary_section(data: ReportData) -> str:
    s = data.summary
    cards = []
    for d in s.devices:
        fits = d.arena_bytes <= d.budget_bytes
        use = d.arena_bytes / d.budget_bytes if d.budget_bytes else None
        cards.append(_card(
            f"{d.device} arena / budget",
            f"{format_bytes(d.arena_bytes)} / {format_bytes(d.budget_bytes)}",
            f"{_percent(use)} of the budget; live-bytes lower bound "
            f"{format_bytes(d.lower_bound_bytes)}"
            + (f" (arena {_percent(d.arena_bytes / d.lower_bound_bytes - 1, True)})"
               if d.lower_bound_bytes else ""),
            "ok" if fits else "bad",
        ))
    if s.predicted_seconds is None:
        cards.append(_card("predicted step time", "not predicted",
                           "the plan was made without a profile"))
    elif s.keep_everything_seconds is not None:
        cards.append(_card(
            "predicted time vs keep-everything",
            f"{_seconds(s.predicted_seconds)} vs {_seconds(s.keep_everything_seconds)}",
            f"{_percent(s.slowdown, True)} for the memory saved",
        ))
    else:
        cards.append(_card("predicted step time", _seconds(s.predicted_seconds),
                           "no remat phase ran: every value is kept"))
    distinct = len({(r.op_id, r.device) for r in s.recomputed_ops})
    cards.append(_card("recomputations", f"{s.recompute_steps}",
                       f"of {distinct} distinct op(s); {s.compute_steps} first computations"))
    cards.append(_card("copies between devices", f"{s.copy_steps}",
                       f"{format_bytes(s.copied_bytes)} moved"))
    cards.append(_card("steps", f"{s.n_steps}",
                       f"{s.compute_steps + s.recompute_steps} compute, {s.copy_steps} copy, "
                       f"{s.free_steps} free"))
    if s.model_ops is not None:
        regions = ", ".join(f"{n} {r}" for r, n in sorted(s.ops_by_region.items()))
        cards.append(_card("model", s.model_name or "-", f"{s.model_ops} ops ({regions})"))

    devices = _table(
        ["device", "budget", "arena", "lower bound", "arena / bound", "peak live (step)",
         "persistent", "buffers", "computed", "recomputed", "copies in", "copies out"],
        [[d.device, format_bytes(d.budget_bytes), format_bytes(d.arena_bytes),
          format_bytes(d.lower_bound_bytes),
          f"{d.arena_bytes / d.lower_bound_bytes:.4f}" if d.lower_bound_bytes else "-",
          f"{format_bytes(d.peak_live_bytes)} ({d.peak_step})", format_bytes(d.persistent_bytes),
          str(d.buffers), str(d.compute_steps), str(d.recompute_steps),
          f"{d.copies_in} ({format_bytes(d.bytes_in)})",
          f"{d.copies_out} ({format_bytes(d.bytes_out)})"]
         for d in s.devices],
        numeric=set(range(1, 12)), table_id="device-table",
    )
    solvers = _table(
        ["phase", "device", "method", "status", "objective", "bound", "gap", "baseline",
         "seconds", "notes"],
        [[r.phase, r.device or "-", r.method, r.status, _objective(r.phase, r.objective),
          _objective(r.phase, r.bound), _percent(r.gap), _objective(r.phase, r.baseline),
          f"{r.seconds:.2f}", _notes(r.notes)]
         for r in s.solvers],
        numeric={4, 5, 6, 7, 8}, table_id="solver-table",
    ) if s.solvers else "<p>No solver reports in this plan.</p>"
    parts = [
        '<section id="summary"><h2>Summary</h2>',
        f'<div class="cards">{"".join(cards)}</div>',
        "<h3>Devices</h3>", devices,
        "<h3>Solver phases</h3>", solvers,
    ]
    if s.recomputed_ops:
        rows = [[r.name, r.op_type, r.region or "-", r.device, str(r.times),
                 format_bytes(r.output_bytes)] for r in s.recomputed_ops]
        head = ["op", "type", "region", "device", "times", "bytes written each time"]
        parts.append("<h3>Recomputed ops</h3>")
        parts.append(_table(head, rows[:LISTED_RECOMPUTES], {4, 5}, "recompute-table"))
        if len(rows) > LISTED_RECOMPUTES:
            parts.append(f"<details><summary>{len(rows) - LISTED_RECOMPUTES} more recomputed "
                         f"ops</summary>{_table(head, rows[LISTED_RECOMPUTES:], {4, 5})}"
                         "</details>")
    if s.copy_routes:
        parts.append("<h3>Copies</h3>")
        parts.append(_table(["from", "to", "copies", "bytes"],
                            [[r.src, r.dst, str(r.copies), format_bytes(r.bytes)]
                             for r in s.copy_routes], {2, 3}, "copy-table"))
    request = ", ".join(f"{k} {v}" for k, v in s.request.items())
    parts.append(f"<p class=\"s\">Request: {escape(request)}.</p></section>")
    return "".join(parts)


def _objective(phase: str, value: float | None) -> str:
    if value is None:
        return "-"
    if phase == "remat":
        return _seconds(value)
    return format_bytes(value)


def _legend(items: list[tuple[str, str]], lines: Sequence[tuple[str, str, str]] = ()) -> str:
    swatches = "".join(f'<span><span class="sw" style="background:{c}"></span>{escape(t)}</span>'
                       for t, c in items)
    strokes = "".join(
        f'<span><span class="ln" style="border-top:2px {style} {c}"></span>{escape(t)}</span>'
        for t, c, style in lines
    )
    return f'<div class="legend">{swatches}{strokes}</div>'


LINES = [("budget", BUDGET_COLOUR, "dashed"), ("arena size", ARENA_COLOUR, "solid"),
         ("live-bytes lower bound", BOUND_COLOUR, "dotted")]


def _section(section_id: str, title: str, parts: list[str]) -> str:
    return f'<section id="{section_id}"><h2>{title}</h2>{"".join(parts)}</section>'


def _device_figure(device: str, legend: str, svg: str, caption: str, note: str = "") -> str:
    """One device's figure in a section: heading, legend, an optional note, the captioned SVG."""
    return (f"<h3>{escape(device)}</h3>{legend}{note}"
            f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>")


def _memory_section(data: ReportData) -> str:
    parts = []
    steps = data.steps
    for c in data.memory:
        present = [(layer_name(k), LAYERS[k][1]) for k in LAYERS if any(c.layers.get(k, []))]
        at = steps[c.peak_step][3] if c.peak_step < len(steps) else "-"
        fits = "under" if c.peak_bytes <= c.budget_bytes else "OVER"
        caption = (f"Bytes live on {c.device} at each step, stacked by role (recomputed values "
                   f"and copies from another device separately). Peak "
                   f"{format_bytes(c.peak_bytes)} at step {c.peak_step} ({at}), {fits} the "
                   f"budget of {format_bytes(c.budget_bytes)}. Ticks under the axis: "
                   f"{len(c.recompute_steps)} recomputations (red), {len(c.copy_steps)} copies "
                   "(brown).")
        if c.downsampled:
            caption += (f" Downsampled to {len(c.steps)} points: each shows the step with the "
                        "most bytes live among its run of consecutive steps, so peaks are kept.")
        parts.append(_device_figure(c.device, _legend(present, LINES), memory_svg(c), caption))
    return _section("memory", "Memory in use over the steps", parts)


def _matrix_section(data: ReportData) -> str:
    parts = ["<p>One row per op, in order of its first computation; one column per step. A cell "
             "shows when the op runs on the device (computed, or recomputed in red) and while "
             "one of its outputs is kept there (the Checkmate R and S matrices over steps). The "
             "band on the left gives the op's region when the model is known.</p>"]
    states = [(STATES[k][0], STATES[k][1]) for k in sorted(STATES)]
    regions = [(f"{r} region", c) for r, c in REGIONS.items()]
    for m in data.matrices:
        caption = (f"{m.n_ops} ops over {m.n_steps} steps on {m.device}: {m.computed} "
                   f"computations, {m.recomputed} recomputations.")
        binned = ""
        if m.binned:
            binned = (f'<p class="note">Downsampled for display: each row holds {m.ops_per_row} '
                      f"op(s) and each column {m.steps_per_col} step(s); a cell shows the "
                      "strongest event inside it (recomputed &gt; computed &gt; copy &gt; held "
                      "copy &gt; kept), so no recomputation is hidden.</p>")
        parts.append(_device_figure(m.device, _legend(states + regions), matrix_svg(m), caption,
                                    note=binned))
    return _section("matrices", "Compute/keep matrices", parts)


def _arena_section(data: ReportData) -> str:
    parts = ["<p>Every buffer as a rectangle: the steps it is live in (x) by the bytes it "
             "occupies in the device's arena (y, offset 0 at the bottom). Hover a rectangle for "
             "its tensor, size and offset.</p>"]
    for a in data.arenas:
        present = sorted({r.layer for r in a.rects}, key=list(LAYERS).index)
        caption = (f"{len(a.rects)} buffers in an arena of {format_bytes(a.arena_bytes)} on "
                   f"{a.device} (live-bytes lower bound {format_bytes(a.lower_bound_bytes)}, "
                   f"persistent zone {format_bytes(a.persistent_bytes)}).")
        note = ""
        if a.left_out:
            note = (f'<p class="note">{a.left_out} of the smallest buffers are not drawn, to keep '
                    "the page responsive.</p>")
        legend = _legend([(layer_name(k), LAYERS[k][1]) for k in present], LINES)
        parts.append(_device_figure(a.device, legend, arena_svg(a), caption, note=note))
    return _section("arena", "Arena maps", parts)


def _steps_section(data: ReportData) -> str:
    n = len(data.steps)
    open_attr = " open" if n <= COLLAPSE_STEPS else ""
    return (
        '<section id="steps"><h2>Steps</h2>'
        f"<details{open_attr}><summary>{n} steps, 200 per page</summary>"
        '<div class="steps-controls">'
        '<input type="search" id="step-filter" placeholder="filter: op, tensor, device">'
        '<select id="step-kind"><option value="">all kinds</option>'
        '<option value="compute">compute</option><option value="recompute">recompute</option>'
        '<option value="copy">copy</option><option value="free">free</option></select>'
        '<button id="step-prev" type="button">&larr; previous</button>'
        '<button id="step-next" type="button">next &rarr;</button>'
        '<span id="step-info"></span></div>'
        '<table id="step-table"><thead><tr><th class="n">step</th><th>kind</th>'
        "<th>device</th><th>what</th><th class=\"n\">bytes</th><th>buffers</th></tr></thead>"
        '<tbody id="step-rows"></tbody></table>'
        "<noscript><p>The step list needs JavaScript.</p></noscript>"
        "</details></section>"
    )
