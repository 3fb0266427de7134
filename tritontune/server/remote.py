"""Attaches to a Triton server somebody else runs (``--launch remote --url HOST:PORT``).

tritontune starts and stops nothing here. It needs explicit model control, so configs can be
switched by reloading, and it leaves the server as it found it (see :class:`TuningSession`).
"""

from __future__ import annotations

from tritontune.config.validate import TargetCapabilities
from tritontune.errors import ServerDiedError, ServerError
from tritontune.server.client import TritonClient
from tritontune.server.launcher import ServerInfo, TritonLauncher


def _grpc_target(url: str) -> str:
    target = url.strip()
    for prefix in ("grpc://", "http://", "https://"):
        target = target.removeprefix(prefix)
    target = target.rstrip("/")
    if ":" not in target:
        target += ":8001"
    return target


class RemoteTriton(TritonLauncher):
    """A running server at ``url`` (gRPC, ``host:port``; 8001 if no port is given)."""

    owns_server = False

    def __init__(self, url: str, *, metrics_url: str | None = None) -> None:
        if not url or not url.strip():
            raise ServerError("--url is required with --launch remote (e.g. 10.0.0.5:8001)")
        self.grpc_url = _grpc_target(url)
        host = self.grpc_url.rsplit(":", 1)[0]
        self.metrics_url = metrics_url or f"http://{host}:8002/metrics"
        self._info: ServerInfo | None = None

    def start(self) -> ServerInfo:
        client = TritonClient(self.grpc_url, self.metrics_url)
        try:
            if not client.is_ready():
                raise ServerError(f"no ready Triton server answers at {self.grpc_url} (gRPC)")
            if not client.explicit_model_control():
                raise ServerError(
                    f"the server at {self.grpc_url} does not allow loading models; tritontune "
                    "switches configs by reloading, so start it with --model-control-mode=explicit"
                )
            self._info = ServerInfo(
                grpc_url=self.grpc_url,
                http_url=None,
                metrics_url=self.metrics_url,
                version=client.server_version(),
                capabilities=TargetCapabilities(
                    gpu_count=client.gpu_count(), response_cache=True, backends=frozenset()
                ),
                launch="remote",
            )
        finally:
            client.close()
        return self._info

    def stop(self) -> None:
        self._info = None  # somebody else's server: nothing to stop

    def check_alive(self) -> None:
        client = TritonClient(self.grpc_url)
        try:
            if not client.is_ready():
                raise ServerDiedError(f"the server at {self.grpc_url} stopped answering")
        finally:
            client.close()

    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise ServerError(f"not attached to {self.grpc_url}")
        return self._info

    def restart(self) -> ServerInfo:
        raise ServerError(f"the server at {self.grpc_url} is not tritontune's to restart")
