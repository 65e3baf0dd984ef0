"""The one memory model every phase shares: what "live" means and which tensors share storage.

Modules, one job each: sharing (which tensors may share storage: views, in-place writes, state
update chains), zones (what outlives the step; the live-bytes sum), schedule (the solvers'
output: compute / copy / free events), replay (one walk of a schedule: materializations, their
storage and live ranges), liveness (live ranges and live bytes of a sequential order, and the
bound no order beats), simulate (live bytes and time of a schedule). Ordering,
rematerialization, the plan builder and the report use these; the plan validator deliberately
does not (it replays a plan on its own, so one bug cannot pass both).
"""
