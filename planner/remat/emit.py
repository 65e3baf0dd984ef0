"""Turn per-stage decisions into a `planner.memory.schedule.Schedule` of compute / copy / free
events.

Within a stage the chosen nodes run in node order (each node's ops in order; later runs of an op
are marked `recompute`). A copy runs as soon as its source holds the value: at the start of the
stage when it was kept there, right after its computation when it is made in the stage.

Then two passes that only ever lower time and memory:
- dead-code elimination: a recomputation (or copy) none of whose outputs is read before it is
  replaced is dropped (a recomputed segment may hold ops the stage does not need);
- liveness: every materialization is freed right after its last read (right after it is made
  when nothing reads it), except state, constants and graph outputs on the home device, which
  outlive the step. Graph inputs nobody reads are freed first, as in `sequential_schedule`.
"""

from __future__ import annotations

from planner.memory.schedule import (
    Compute,
    Copy,
    Event,
    Schedule,
    drop_dead_recomputations,
    free_after_last_read,
    home_on,
)
from planner.remat.decision import Decision
from planner.remat.problem import RematProblem


def emit_schedule(problem: RematProblem, decision: Decision) -> Schedule:
    p, g = problem, problem.graph
    done: set[int] = set()
    skeleton: list[Event] = []
    for t, computes in enumerate(decision.computes):
        made_here = {(v, d) for k, d in computes for v in p.nodes[k].values}
        after: dict[tuple[int | None, str], list[tuple[int, str, str]]] = {}  # by producer
        for v, src, dst in decision.copies[t] if t < len(decision.copies) else []:
            producer = p.values[v].producer
            if (v, src) in made_here:
                after.setdefault((producer, src), []).append((v, src, dst))
            else:
                skeleton.extend(Copy(x, src, dst) for x in p.values[v].tensors)
        for k, d in sorted(computes):
            for op in p.nodes[k].ops:
                skeleton.append(Compute(op, d, recompute=op in done))
                done.add(op)
            for v, src, dst in after.get((k, d), []):
                skeleton.extend(Copy(x, src, dst) for x in p.values[v].tensors)
    home = home_on(g, p.home)
    kept = drop_dead_recomputations(g, skeleton, home)
    return Schedule(events=tuple(free_after_last_read(g, kept, home)), home=home)
