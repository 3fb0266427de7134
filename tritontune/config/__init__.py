"""Model configs: read/write as protobuf, derive from ONNX, apply variants, validate, templates.

This layer knows nothing of servers or load.

Modules are imported by their own names (``tritontune.config.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
