"""The plan report: its figures' data against the validator's replay, downsampling that keeps what
matters, a self-contained well-formed page, and the `arenaplan report` command."""

from __future__ import annotations

import importlib.util
import json
import re
import xml.etree.ElementTree as ET

import pytest

from arenaplan.cli import main
from planner.ir.graph import load_graph
from planner.pipeline import plan_model
from planner.plan.validate import validate_plan
from planner.report import ReportInputError, ReportLimits, build_report_data, render_report_html
from planner.report.palette import COMPUTED, KEPT, RECOMPUTE
from schemas.plan import ComputeStep, CopyStep, PlanRequest
from tests.support.fixture_zoo import model_path
from tests.support.report_plans import HOME, SECOND, remat_plan


@pytest.fixture(scope="module")
def remat():
    return remat_plan()


@pytest.fixture(scope="module")
def mlp_plan():
    return plan_model(model_path("mlp_sgd"), PlanRequest(budgets={"cpu": 2**30}, time_limit_s=2))


def _row_of(matrix) -> dict[int, int]:
    return {op: r for r, row in enumerate(matrix.rows) for op in row.op_ids}


def test_memory_curves_are_the_validators_live_bytes(remat):
    graph, plan = remat
    live = validate_plan(graph, plan).live_bytes
    data = build_report_data(plan, graph)
    assert [c.device for c in data.memory] == [HOME, SECOND]
    for curve in data.memory:
        assert not curve.downsampled
        assert curve.total == live[curve.device]
        stacked = [sum(v) for v in zip(*curve.layers.values(), strict=True)]
        assert stacked == curve.total
        assert curve.peak_bytes == max(live[curve.device]) <= curve.budget_bytes
    home = data.memory[0]
    assert any(home.layers["recomputed"]) and any(home.layers["copied"])
    assert home.recompute_steps == [k for k, s in enumerate(plan.steps)
                                    if isinstance(s, ComputeStep) and s.recompute]


def test_downsampled_curve_keeps_the_peak_and_says_so(remat):
    graph, plan = remat
    live = validate_plan(graph, plan).live_bytes[HOME]
    limits = ReportLimits(curve_points=100)
    curve = build_report_data(plan, graph, limits).memory[0]
    assert curve.downsampled and len(curve.steps) <= 100 and curve.starts[0] == 0
    assert max(curve.total) == max(live) == curve.peak_bytes
    for start, step, total in zip(curve.starts, curve.steps, curve.total, strict=True):
        assert step >= start and total == live[step]
    assert "Downsampled to" in render_report_html(plan, graph, limits)


def test_matrix_cells_are_the_steps_computations_and_kept_outputs(remat):
    graph, plan = remat
    limits = ReportLimits(matrix_rows=10_000, matrix_cols=10_000, matrix_runs=10**7)
    matrix = build_report_data(plan, graph, limits).matrices[0]
    assert not matrix.binned and matrix.device == HOME
    row = _row_of(matrix)
    recomputes = 0
    for k, s in enumerate(plan.steps):
        if isinstance(s, ComputeStep):
            expected = RECOMPUTE if s.recompute else COMPUTED
            recomputes += s.recompute
            assert matrix.grid[row[s.op_id], k] == expected, (k, s.op_name)
    assert matrix.recomputed == recomputes > 0
    producer = {b: s.op_id for s in plan.steps if isinstance(s, ComputeStep)
                for b in s.outputs if b}
    for b in plan.buffers:
        if b.device == HOME and b.id in producer:
            cells = matrix.grid[row[producer[b.id]], b.first_step:b.last_step + 1]
            assert (cells >= KEPT).all(), b.id
    assert matrix.rows[0].region == "forward"  # the model adds regions


def test_binned_matrix_never_hides_a_recomputation(remat):
    graph, plan = remat
    limits = ReportLimits(matrix_rows=20, matrix_cols=50)
    matrix = build_report_data(plan, graph, limits).matrices[0]
    assert matrix.binned and matrix.grid.shape[0] <= 20 and matrix.grid.shape[1] <= 50
    row = _row_of(matrix)
    for k, s in enumerate(plan.steps):
        if isinstance(s, ComputeStep) and s.recompute:
            assert matrix.grid[row[s.op_id], k // matrix.steps_per_col] == RECOMPUTE
    html = render_report_html(plan, graph, limits)
    assert f"each row holds {matrix.ops_per_row} op(s)" in html


def test_arena_map_draws_every_buffer_inside_its_arena(remat):
    graph, plan = remat
    arenas = build_report_data(plan, graph).arenas
    for arena in arenas:
        owners = [b for b in plan.buffers if b.device == arena.device and b.owns_storage]
        assert len(arena.rects) == len(owners) and arena.left_out == 0
        assert all(r.offset + r.size <= arena.arena_bytes for r in arena.rects)
    aliased = [r for r in arenas[0].rects if r.aliases]
    assert aliased, "views and in-place writes are named on their storage owners"
    few = build_report_data(plan, graph, ReportLimits(arena_rects=10)).arenas[0]
    assert len(few.rects) == 10 and few.left_out == len(arenas[0].rects) - 10
    assert min(r.size for r in few.rects) >= max(
        r.size for r in arenas[0].rects if r.buffer not in {f.buffer for f in few.rects})


def test_summary_counts_recomputations_copies_and_time(remat):
    graph, plan = remat
    s = build_report_data(plan, graph).summary
    recomputes = [st for st in plan.steps if isinstance(st, ComputeStep) and st.recompute]
    copies = [st for st in plan.steps if isinstance(st, CopyStep)]
    sizes = {b.id: b.size for b in plan.buffers}
    assert s.recompute_steps == len(recomputes) == sum(r.times for r in s.recomputed_ops)
    assert s.copy_steps == len(copies)
    assert s.copied_bytes == sum(sizes[c.src] for c in copies)
    assert {(r.src, r.dst) for r in s.copy_routes} == {(HOME, SECOND), (SECOND, HOME)}
    remat_report = next(r for r in plan.solvers if r.phase == "remat")
    assert s.keep_everything_seconds == remat_report.baseline
    assert s.slowdown == pytest.approx(plan.predicted_seconds / remat_report.baseline - 1)
    assert s.slowdown > 0
    assert s.model_name == graph.name and sum(s.ops_by_region.values()) == len(graph.ops)
    home = s.devices[0]
    assert home.recompute_steps == len(recomputes) and home.copies_out == len(copies) // 2


def test_page_is_self_contained_and_its_figures_are_well_formed(remat):
    graph, plan = remat
    html = render_report_html(plan, graph)
    assert not re.search(r"https?:|@import|url\(|<iframe|<img", html)
    links = re.findall(r'(?:src|href)="([^"]*)"', html)
    assert all(link.startswith("#") or link.startswith("data:") for link in links), links
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.S)
    ids = [ET.fromstring(svg).get("id") for svg in svgs]  # each figure is well-formed XML
    assert ids == ["memory-cpu", "memory-cpu-1", "matrix-cpu", "matrix-cpu-1", "arena-cpu",
                   "arena-cpu-1"]
    blobs = dict(re.findall(r'<script type="application/json" id="([^"]+)">(.*?)</script>',
                            html, flags=re.S))
    steps = json.loads(blobs["step-data"].replace("<\\/", "</"))
    assert len(steps) == len(plan.steps) and steps[0][0] == 0
    assert {row[1] for row in steps} == {"compute", "recompute", "copy", "free"}
    assert set(json.loads(blobs["memory-data"])) == {HOME, SECOND}
    assert html.count('class="cell recompute"') == sum(
        isinstance(s, ComputeStep) and s.recompute for s in plan.steps)


def test_report_of_a_pipeline_plan_without_the_model(mlp_plan):
    html = render_report_html(mlp_plan)
    assert "not predicted" in html and "Recomputed ops" not in html
    data = build_report_data(mlp_plan)
    assert data.summary.keep_everything_seconds is None and data.summary.model_name is None
    assert all(row.region is None for row in data.matrices[0].rows)
    assert data.matrices[0].recomputed == 0 and data.summary.copy_steps == 0


def test_a_device_that_runs_nothing_gets_an_empty_figure():
    """Issue 15, F1: a second arena with no buffers (the planner keeps everything on the first)
    used to end in IndexError, a 500 from the service and exit 1 from the CLI."""
    plan = plan_model(model_path("mlp_sgd"), PlanRequest(
        budgets={"cpu": 2**30, "cpu:1": 2**30}, time_limit_s=10))
    idle = [d for d in plan.request.budgets if not any(b.device == d for b in plan.buffers)]
    assert idle, "the case needs a device without buffers"
    data = build_report_data(plan)
    empty = [m for m in data.matrices if m.device in idle]
    assert empty and all(m.n_ops == 0 and m.rows == [] for m in empty)
    html = render_report_html(plan)
    assert all(f"<h3>{d}</h3>" in html for d in idle)


def test_long_solver_notes_fold_away_escaped(mlp_plan):
    notes = [f"note {k} <{k}>" for k in range(5)]
    solvers = [r.model_copy(update={"notes": notes}) for r in mlp_plan.solvers[:1]]
    html = render_report_html(mlp_plan.model_copy(update={"solvers": solvers}))
    table = re.search(r'<table id="solver-table">.*?</table>', html, flags=re.S).group(0)
    assert "note 0 &lt;0&gt;; note 1 &lt;1&gt;<details" in table and "3 more notes" in table
    assert all(f"<li>note {k} &lt;{k}&gt;</li>" in table for k in (2, 3, 4))


def test_report_refuses_a_model_the_plan_was_not_made_for(mlp_plan):
    other = load_graph(model_path("cnn_bn_momentum"))
    with pytest.raises(ReportInputError, match="not the one this plan was made for"):
        render_report_html(mlp_plan, other)


def test_cli_writes_the_page_and_refuses_bad_input(tmp_path, capsys, mlp_plan):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(mlp_plan.model_dump_json())
    out = tmp_path / "out" / "report.html"
    model = str(model_path("mlp_sgd"))
    assert main(["report", str(plan_file), "-m", model, "-o", str(out)]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert "[forward]" in out.read_text()  # row titles name the op's region from the model
    assert main(["report", str(plan_file), "-m", str(model_path("cnn_bn_momentum")),
                 "-o", str(out)]) == 2
    assert "not the one this plan was made for" in capsys.readouterr().err
    not_a_plan = tmp_path / "x.json"
    not_a_plan.write_text('{"hello": 1}')
    assert main(["report", str(not_a_plan), "-o", str(out)]) == 2
    assert "not an arenaplan plan" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.json"), "-o", str(out)]) == 2
    assert "cannot read plan" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None,
                    reason="PNG export needs the report extra: pip install -e '.[report]'")
def test_cli_exports_the_figures_as_png(tmp_path, mlp_plan):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(mlp_plan.model_dump_json())
    pngs = tmp_path / "png"
    assert main(["report", str(plan_file), "-o", str(tmp_path / "r.html"),
                 "--png-dir", str(pngs)]) == 0
    written = sorted(p.name for p in pngs.iterdir())
    assert written == ["arena_cpu.png", "matrix_cpu.png", "memory_cpu.png"]
    for name in written:
        data = (pngs / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000
