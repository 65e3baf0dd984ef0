"""Turn per-stage decisions into a `planner.memory.schedule.Schedule` of compute / copy / free
events.

Within a stage the chosen nodes run in node order (each node's ops in order; later runs of an op
are marked `recompute`). A copy runs as soon as its source holds the value: at the start of the
stage when it was kept there, right after its computation when it is made in the stage.

A free view is its root's bytes (planner.remat.problem counts a read of a view as a read of its
root): before an op reads a view made before its root was last computed, the view op runs again
over the new bytes, so the old ones are freed with the old root instead of living on under the
view.

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
from planner.memory.sharing import state_updates
from planner.remat.decision import Decision
from planner.remat.problem import RematProblem


def emit_schedule(problem: RematProblem, decision: Decision) -> Schedule:
    p, g = problem, problem.graph
    done: set[int] = set()
    skeleton: list[Event] = []
    views = _FreshViews(problem, skeleton, done)
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
                views.refresh(op, d)
                views.compute(op, d)
            for v, src, dst in after.get((k, d), []):
                skeleton.extend(Copy(x, src, dst) for x in p.values[v].tensors)
    home = home_on(g, p.home)
    kept = drop_dead_recomputations(g, skeleton, home)
    return Schedule(events=tuple(free_after_last_read(g, kept, home)), home=home)


class _FreshViews:
    """Appends computations to `skeleton`, running free views again where their root was
    computed since they were made (see the module doc; one device: with several the model
    counts views as bytes of their own)."""

    def __init__(self, problem: RematProblem, skeleton: list[Event], done: set[int]):
        self.graph, self.skeleton, self.done = problem.graph, skeleton, done
        sharing = state_updates(problem.graph)
        self.source = sharing.view_source if len(problem.devices) == 1 else {}
        self.made: dict[int, int] = {}  # tensor -> when it was last computed (event count)

    def compute(self, op: int, device: str) -> None:
        self.skeleton.append(Compute(op, device, recompute=op in self.done))
        self.done.add(op)
        for t in self.graph.ops[op].output_ids:
            self.made[t] = len(self.skeleton)

    def refresh(self, op: int, device: str) -> None:
        """Run again every view `op` reads (and the views they are views of) that is older than
        the bytes it reinterprets."""
        for t in self.graph.ops[op].input_ids:
            self._fresh(t, device)

    def _fresh(self, tensor: int, device: str) -> None:
        source = self.source.get(tensor)
        if source is None or tensor not in self.made:
            return
        self._fresh(source, device)
        if self.made.get(source, -1) > self.made[tensor]:
            self.compute(self.graph.tensors[tensor].known_producer, device)
