"""Load generation and statistics against a Triton server (knows the Triton client, not Optuna).

Modules are imported by their own names (``tritontune.measure.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
