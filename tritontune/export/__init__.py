"""``tritontune export``: a finished study becomes a model repository Triton serves as it is.

- :mod:`~tritontune.export.studies`: the entry point, which reads the studies and picks the
  exporter for their kind;
- :mod:`~tritontune.export.single_class` and :mod:`~tritontune.export.workload`: the two
  exporters, side by side;
- :mod:`~tritontune.export.pipeline`: what a pipeline (an ensemble) adds to the single-class
  export: every composing model's directory, and the record's ``pipeline`` section;
- :mod:`~tritontune.export.staging`: what they share (stage, verify, move into place; copy the
  measured model files).

Modules are imported by their own names; this package re-exports nothing.
"""
