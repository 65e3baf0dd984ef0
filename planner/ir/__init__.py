"""The graph IR: ONNX (or a node-link JSON DAG) -> ops and tensors with exact sizes and roles.

Modules, one job each: onnx_model (reading, checking and shape-inferring ONNX), graph (the IR and
`load_graph`, `load_plan_graph`), optimized (planning ONNX Runtime's rewrite of a model: made for
a request, rebuilt for a plan), roles (tensor roles and op regions from dataflow), summary (what
`inspect` shows), graph_json (the Checkmate benchmark format), aliasing (which input an op's
output may share the storage of: the per-op rule the memory model and the profiler both use).
"""
