"""Executes plans against fixed, preallocated arenas with ONNX Runtime; no solver code here.

The runtime imports only `schemas` (plus onnx, onnxruntime, numpy), never the planner.

    from runtime.executor import PlanExecutor, ExecutorOptions
    executor = PlanExecutor("model.onnx", "plan.json")      # checks, allocates, binds: once
    executor.load_inputs(values)                            # state + data, by graph input name
    seconds = executor.step()                               # one training step, no allocation
    loss = executor.output("loss")

Modules, one job each: model (light ONNX reading, op ids as the planner numbers them), plan_io
(reading plans, version first), plan_check (the structural self-check), devices (cpu, cpu:N,
cuda:N and whether they exist), arena (one allocation per device, typed views), transfer (copies
between arenas and host memory), segments (which compute steps share a session), kernels (ONNX
Runtime sessions bound to arena slices), executor (the training step), reference (whole-graph
ONNX Runtime for --check), inputs (.npz or generated values), measure (peak RSS), client
(fetching plans from a server), errors (typed refusals).
"""
