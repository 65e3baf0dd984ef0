"""Progress reporting: callback events, a bar on a terminal, plain lines in logs."""

from __future__ import annotations

import io

from planner.ir.graph import load_graph
from planner.profile import QUICK_POLICY, ConsoleProgress, ProgressEvent, profile_graph
from tests.support.onnx_builders import tiny_momentum_step


def test_callback_sees_every_phase_and_reaches_the_end():
    events: list[ProgressEvent] = []
    graph = load_graph(tiny_momentum_step(), dims={"batch": 4})
    profile_graph(graph, cache=None, policy=QUICK_POLICY, progress=events.append)
    phases = [e.phase for e in events]
    assert {"capture", "ops", "copies", "done"} <= set(phases)
    ops = [e for e in events if e.phase == "ops"]
    assert ops[-1].done == ops[-1].total == len(graph.ops)
    assert [e.done for e in ops] == sorted(e.done for e in ops)
    assert phases[-1] == "done"


def _feed(reporter: ConsoleProgress, total: int = 200) -> None:
    for done in range(total + 1):
        reporter(ProgressEvent("ops", done, total, f"op {done}", 0, done * 0.01))
    reporter(ProgressEvent("done", 1, 1, "all done"))


def test_log_lines_every_ten_percent_when_not_a_terminal():
    stream = io.StringIO()
    _feed(ConsoleProgress(stream, tty=False))
    lines = stream.getvalue().splitlines()
    assert len(lines) == 12  # 0%, 10%, ..., 100%, and the summary
    assert lines[0].startswith("profile: ops 0/200 (0%)")
    assert "200/200 (100%)" in lines[-2] and lines[-1] == "profile: all done"
    assert "\r" not in stream.getvalue()


def test_bar_redraws_in_place_on_a_terminal():
    stream = io.StringIO()
    _feed(ConsoleProgress(stream, tty=True, min_interval_s=0.0))
    text = stream.getvalue()
    assert text.count("\r") == 201 and "[##############################] 100%" in text
    assert text.endswith("profile: all done\n")
