"""The study: tritontune's database. This package alone knows its format.

- :mod:`~tritontune.study.schema`: the names of the attributes a study keeps (the only module that
  names one), and how older studies' names read.
- :mod:`~tritontune.study.figures` and :mod:`~tritontune.study.records`: what is kept, typed.
- :mod:`~tritontune.study.verdict`: the one figure to state for a config (CLI, report, export).
- :mod:`~tritontune.study.storage`: opening storages and studies.
- :mod:`~tritontune.study.coordination`: workers sharing a study (heartbeats, lost trials, claims,
  twins).
- :mod:`~tritontune.study.handle`: :class:`~tritontune.study.handle.TuningStudy`, what the search
  writes through and everyone reads through.

Modules are imported by their own names; this package re-exports nothing.
"""
