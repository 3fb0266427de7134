"""The one interface every way of getting a Triton server implements.

Like httpx's transport seam: the local, docker and remote launchers are swappable, so a search or a
test runs the same code against any of them. A launcher is a context manager; leaving the ``with``
block (normally, on an error, or on Ctrl-C) stops whatever it started.
"""

from __future__ import annotations

import re
import signal
import threading
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import FrameType

from tritontune.config.validate import TargetCapabilities
from tritontune.errors import ServerError
from tritontune.server.client import TritonClient
from tritontune.server.endpoint import ClientProtocol, ClientSettings, Endpoint


@dataclass(frozen=True)
class ServerInfo:
    """What a started server is: where it listens and what it can do."""

    grpc_url: str | None
    """gRPC ``host:port`` (None: a remote server reached over HTTP only)."""
    http_url: str | None
    """``http://host:port`` (None: a remote server reached over gRPC only)."""
    metrics_url: str | None
    version: str
    capabilities: TargetCapabilities
    launch: str
    """``local``, ``docker`` or ``remote``."""


class TritonLauncher(ABC):
    """Starts (or attaches to) a Triton server and always stops what it started."""

    #: False for servers somebody else runs: never unload models tritontune didn't load there.
    owns_server: bool = True
    #: How control and load requests talk to the server (protocol, TLS, headers).
    client_settings: ClientSettings = ClientSettings()

    @abstractmethod
    def start(self) -> ServerInfo:
        """Start (or attach) and wait until the server is ready."""

    @abstractmethod
    def stop(self) -> None:
        """Stop what :meth:`start` started and remove what it left behind. Safe to call twice."""

    @abstractmethod
    def check_alive(self) -> None:
        """Raise :class:`~tritontune.errors.ServerDiedError` if the server is gone."""

    @property
    @abstractmethod
    def info(self) -> ServerInfo:
        """The running server's :class:`ServerInfo` (after :meth:`start`)."""

    def log_tail(self, lines: int = 20) -> str:
        """The server's last log lines, where the launcher keeps its log."""
        return ""

    def notices(self) -> list[str]:
        """What starting the server did that the user should hear about (one line each)."""
        return []

    def restart(self) -> ServerInfo:
        """Stop and start again, e.g. after the server died."""
        self.stop()
        return self.start()

    def endpoint(self) -> Endpoint:
        """Where control and load requests go: the running server's API in the chosen protocol."""
        return endpoint_of(self.info, self.client_settings)

    def client(self) -> TritonClient:
        """A new control-plane client for the running server."""
        return TritonClient(self.endpoint(), self.info.metrics_url)

    def __enter__(self) -> TritonLauncher:
        _terminate_as_interrupt()
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """SIGTERM does what Ctrl-C would do at this moment: whatever handles SIGINT now handles it.

    Inside ``asyncio.run`` that is the runner's handler, which cancels the main task and raises
    ``KeyboardInterrupt`` once the task has unwound. Raising here instead could land in a gRPC
    callback, which swallows the exception ("Exception ignored in ... functor_run"): the signal
    was lost and the measurement ran on (a CI run hung there)."""
    on_interrupt = signal.getsignal(signal.SIGINT)
    if callable(on_interrupt):
        on_interrupt(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt(f"signal {signum}")


def _terminate_as_interrupt() -> None:
    """Let SIGTERM unwind like Ctrl-C, so ``with`` blocks stop servers on ``kill`` too."""
    in_main_thread = threading.current_thread() is threading.main_thread()
    if in_main_thread and signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _raise_interrupt)


def telling_line(log_tail: str) -> str:
    """The most telling line of a server log tail: the last error, else the last line."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("E") or "error" in line.lower():
            return line
    return lines[-1] if lines else "(no log output)"


def endpoint_of(info: ServerInfo, settings: ClientSettings) -> Endpoint:
    """The endpoint of ``info`` in the protocol ``settings`` choose."""
    if settings.wire == ClientProtocol.HTTP:
        address = (info.http_url or "").split("://", 1)[-1]
    else:
        address = info.grpc_url or ""
    if not address:
        raise ServerError(f"the server ({info.launch}) has no known {settings.wire} endpoint")
    return settings.endpoint(address)


def http_ready(http_url: str) -> bool:
    """Whether the server at ``http_url`` says it is ready (``/v2/health/ready``)."""
    try:
        with urllib.request.urlopen(f"{http_url}/v2/health/ready", timeout=1) as reply:
            return reply.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


_CUDA_POOL = re.compile(r"CUDA memory pool is created on device (\d+)")


def cuda_devices_in_log(text: str) -> int:
    """GPUs a server's start-up log says it set up (one CUDA memory pool per device).

    The GPU count otherwise comes from the per-GPU metrics, which Triton gathers through DCGM;
    where DCGM can't start (some virtual machines), the metrics have no GPU while CUDA works, and
    the log's ``CUDA memory pool is created on device N`` lines still count the devices."""
    return len(set(_CUDA_POOL.findall(text)))


def loopback_server_info(
    ports: tuple[int, int, int], *, launch: str, backends: frozenset[str], response_cache: bool
) -> ServerInfo:
    """Ask a server just started on 127.0.0.1 (gRPC, HTTP, metrics ports) what it is.

    Asked over HTTP, which tritonserver never serves with TLS (its gRPC may be, with
    ``--grpc-use-ssl``)."""
    grpc_port, http_port, metrics_port = ports
    grpc_url = f"127.0.0.1:{grpc_port}"
    metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
    client = TritonClient(
        Endpoint(ClientProtocol.HTTP, f"127.0.0.1:{http_port}"), metrics_url, timeout=30.0
    )
    try:
        version = client.server_version()
        gpus = client.gpu_count()
    finally:
        client.close()
    return ServerInfo(
        grpc_url=grpc_url,
        http_url=f"http://127.0.0.1:{http_port}",
        metrics_url=metrics_url,
        version=version,
        capabilities=TargetCapabilities(
            gpu_count=gpus, response_cache=response_cache, backends=backends
        ),
        launch=launch,
    )
