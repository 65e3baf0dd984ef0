"""Pure planning library: ONNX -> graph IR -> profile -> solvers -> plan. No HTTP, no globals."""
