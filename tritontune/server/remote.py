"""Attaches to a Triton server somebody else runs (``--launch remote --url [SCHEME://]HOST[:PORT]``).

tritontune starts and stops nothing here. It needs explicit model control, so configs can be
switched by reloading, and it leaves the server as it found it (see :class:`TuningSession`). The
URL is read against the client options (:func:`~tritontune.server.endpoint.resolve_url`): it
picks gRPC or HTTP, with or without TLS, and every call carries the ``--header`` headers.
"""

from __future__ import annotations

from tritontune.config.validate import TargetCapabilities
from tritontune.errors import ServerDiedError, ServerError
from tritontune.server.client import TritonClient
from tritontune.server.endpoint import ClientProtocol, ClientSettings, resolve_url
from tritontune.server.launcher import ServerInfo, TritonLauncher


class RemoteTriton(TritonLauncher):
    """A running server at ``url`` (gRPC ``host:8001`` unless the URL or ``client`` say otherwise)."""

    owns_server = False

    def __init__(
        self,
        url: str,
        *,
        client: ClientSettings | None = None,
        metrics_url: str | None = None,
    ) -> None:
        self.client_settings, self.address = resolve_url(url or "", client or ClientSettings())
        self.endpoint_url = self.client_settings.endpoint(self.address).url()
        host = self.address.rsplit(":", 1)[0]
        self.metrics_url = metrics_url or f"http://{host}:8002/metrics"
        self._info: ServerInfo | None = None

    def _client(self) -> TritonClient:
        return TritonClient(self.client_settings.endpoint(self.address), self.metrics_url)

    def start(self) -> ServerInfo:
        client = self._client()
        try:
            if not client.is_ready():
                raise ServerError(f"no ready Triton server answers at {self.endpoint_url}")
            if not client.explicit_model_control():
                raise ServerError(
                    f"the server at {self.endpoint_url} does not allow loading models; tritontune "
                    "switches configs by reloading, so start it with --model-control-mode=explicit"
                )
            http = self.client_settings.wire == ClientProtocol.HTTP
            scheme = "https" if self.client_settings.tls else "http"
            self._info = ServerInfo(
                grpc_url=None if http else self.address,
                http_url=f"{scheme}://{self.address}" if http else None,
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
        client = self._client()
        try:
            if not client.is_ready():
                raise ServerDiedError(f"the server at {self.endpoint_url} stopped answering")
        finally:
            client.close()

    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise ServerError(f"not attached to {self.endpoint_url}")
        return self._info

    def restart(self) -> ServerInfo:
        raise ServerError(f"the server at {self.endpoint_url} is not tritontune's to restart")
