"""planner.pipeline.collector: the young generation's threshold is raised while a request is
planned and restored when the last request ends, whatever the nesting or the threads."""

from __future__ import annotations

import gc
import threading

from planner.pipeline.collector import YOUNG_THRESHOLD, fewer_collections


def test_nested_blocks_raise_the_threshold_and_the_outer_one_restores_it():
    before = gc.get_threshold()
    with fewer_collections():
        assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)
        with fewer_collections():
            pass
        assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)
    assert gc.get_threshold() == before


def test_a_thread_leaving_first_does_not_restore_it_under_another():
    before = gc.get_threshold()
    inside, leave = threading.Event(), threading.Event()

    def plan() -> None:
        with fewer_collections():
            inside.set()
            leave.wait(10)

    other = threading.Thread(target=plan)
    with fewer_collections():
        other.start()
        assert inside.wait(10)
    assert gc.get_threshold()[0] == max(before[0], YOUNG_THRESHOLD)  # the thread still plans
    leave.set()
    other.join(10)
    assert gc.get_threshold() == before
