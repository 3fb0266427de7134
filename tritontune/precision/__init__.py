"""Precision variants (FP16, INT8) of ONNX models, each gated on its accuracy against FP32.

Modules are imported by their own names (``tritontune.precision.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
