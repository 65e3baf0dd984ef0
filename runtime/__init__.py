"""Executes plans against fixed, preallocated arenas with ONNX Runtime; no solver code here."""
