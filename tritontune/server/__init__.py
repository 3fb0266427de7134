"""Triton servers: launchers behind one interface (local, remote; docker later) and the client.

Modules are imported by their own names (``tritontune.server.<module>``); this package
re-exports nothing, so there is one way to import each name.
"""
