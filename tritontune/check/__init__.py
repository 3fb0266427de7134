"""``tritontune check``: re-measure a tuned repository against its tuning records (a CI gate).

Modules are imported by their own names (``tritontune.check.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
