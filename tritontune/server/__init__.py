"""Triton servers: launchers behind one interface (local, remote; docker later) and the client."""

from tritontune.server.binary import TritonBinary, find_tritonserver
from tritontune.server.client import ModelStatsSnapshot, TritonClient
from tritontune.server.launcher import ServerInfo, TritonLauncher
from tritontune.server.local import LocalTritonLauncher
from tritontune.server.remote import RemoteTriton

__all__ = [
    "LocalTritonLauncher",
    "ModelStatsSnapshot",
    "RemoteTriton",
    "ServerInfo",
    "TritonBinary",
    "TritonClient",
    "TritonLauncher",
    "find_tritonserver",
]
