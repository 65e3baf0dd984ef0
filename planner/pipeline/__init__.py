"""The planner's one entry point: model bytes + PlanRequest -> a validated Plan.

Phases, each reported in `plan.solvers` with its status, bound, gap and time:
1. load and check the model (planner.ir.graph), binding the request's dims (`plan_graph` starts
   here for a graph built another way, e.g. planner.ir.graph_json);
2. order the ops to keep peak live bytes low (planner.order, OLLA's lifetime half);
3. with one device, keep everything in that order (free after last read) when its arena fits the
   budget; otherwise, or with two or more devices, rematerialization and placement
   (planner.remat, XEngine / Checkmate in CP-SAT): which op runs when and where, what is kept,
   copied, freed and recomputed, minimizing the predicted time from the request's profile (else
   a CPU profile measured now: planner.profile.for_request; a `cuda:N` budget needs a supplied
   profile unless this machine has that GPU);
4. lay out every device's buffers in one arena (planner.layout, OLLA's location half); the remat
   solver bounds live bytes, so when fragmentation makes an arena exceed its budget the solve is
   repeated with that budget lowered by the excess (bounded retries);
5. replay the plan independently (planner.plan.validate); a plan that fails is a bug, never
   returned.

An infeasible request raises InfeasibleError naming the smallest budget this planner meets (or,
below the op-footprint bound no plan can beat, that proven lower bound).

Modules, one job each: orchestrate (the phases above, in order), fit (remat + layout with the
retries of step 4), infeasible (the error naming the smallest feasible budget). The phases'
shares of the request's time limit are planner.time_budget's.
"""

from planner.pipeline.orchestrate import (
    PlanValidationError,
    ProgressCallback,
    plan_graph,
    plan_model,
)

__all__ = ["PlanValidationError", "ProgressCallback", "plan_graph", "plan_model"]
