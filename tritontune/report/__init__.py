"""Reports of a finished study: an HTML page (tables, curves, frontier, capacity plan, warnings).

Modules are imported by their own names (``tritontune.report.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
