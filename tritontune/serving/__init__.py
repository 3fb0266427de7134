"""Serving: one Triton server for a job (:mod:`~tritontune.serving.server`), the model on it as
the jobs measure it (:mod:`~tritontune.serving.bench`, :mod:`~tritontune.serving.session`) and the
one fault policy (:mod:`~tritontune.serving.faults`).

Modules are imported by their own names; this package re-exports nothing.
"""
