"""Search: the tuning space, operating points, Optuna studies, and the search loop.

Modules are imported by their own names (``tritontune.search.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
