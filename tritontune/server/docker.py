"""Launches Triton in a Docker container (``--launch docker``), as GPU hosts run it.

The container comes from an image already on the host (NVIDIA's ``nvcr.io/nvidia/tritonserver``
by default; tritontune never pulls, it says how), through the Docker SDK. It runs in explicit
model-control mode with the working repository, and the directories its links point into,
mounted read-only at the same paths, so config switches are reloads, as with the local launcher.
GPUs are requested as device requests; ports are published on 127.0.0.1, or the host network is
used where the engine has no bridge (the server then binds 127.0.0.1 itself).

Every container carries tritontune's labels. It is removed on exit, on errors and on Ctrl-C (the
launcher's context manager); when tritontune is killed outright, a detached reaper process
(:mod:`tritontune.server.reaper`) removes it; and containers left by a crashed run whose process
is gone are removed at the next start.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import psutil

from tritontune.errors import ServerDiedError, ServerError
from tritontune.server.launcher import (
    ServerInfo,
    TritonLauncher,
    http_ready,
    loopback_server_info,
    telling_line,
)
from tritontune.server.ports import free_ports
from tritontune.server.reaper import start_reaper, stop_reaper

#: Triton 2.51.0, the version tritontune's client and tests are built against.
DEFAULT_IMAGE = "nvcr.io/nvidia/tritonserver:24.10-py3"
LABEL = "tritontune"
PID_LABEL = "tritontune.pid"
HOST_LABEL = "tritontune.host"


@dataclass(frozen=True)
class DockerSettings:
    image: str = DEFAULT_IMAGE
    gpus: str | None = None
    """``all``, or device ids such as ``0,1``; None runs without GPUs."""
    shm_size: str = "1g"
    """The Python backend exchanges tensors through /dev/shm; Docker's 64 MB default is small."""
    tritonserver: str = "tritonserver"
    """The server executable inside the image."""
    backend_directory: str = "/opt/tritonserver/backends"
    startup_timeout: float = 120.0
    response_cache_bytes: int = 64 * 1024 * 1024


def _docker() -> ModuleType:
    import docker  # the SDK is the ``docker`` extra: imported only when docker is asked for

    return docker


def docker_client() -> Any:  # docker.DockerClient (the SDK has no type information)
    """A client for the local engine, or a :class:`ServerError` that says what is missing."""
    try:
        docker = _docker()
    except ImportError:
        raise ServerError(
            "--launch docker needs the Docker SDK: pip install 'tritontune[docker]' (package docker)"
        ) from None
    try:
        client = docker.from_env(timeout=30)
        client.ping()
    except Exception as err:  # DockerException, requests' ConnectionError, PermissionError, ...
        where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
        raise ServerError(
            f"no Docker engine reachable at {where} ({' '.join(str(err).split())[:200]}); "
            "start dockerd, or set DOCKER_HOST"
        ) from None
    return client


def remove_stale_containers(client: Any) -> list[str]:
    """Remove tritontune's containers whose tritontune process (on this host) is gone."""
    removed = []
    for container in client.containers.list(all=True, filters={"label": LABEL}):
        labels = container.labels or {}
        if labels.get(HOST_LABEL) != socket.gethostname():
            continue
        pid = labels.get(PID_LABEL, "")
        if pid.isdigit() and psutil.pid_exists(int(pid)):
            continue
        with contextlib.suppress(Exception):
            container.remove(force=True)
            removed.append(container.name)
    return removed


class DockerTritonLauncher(TritonLauncher):
    """A tritonserver container serving ``model_repository``."""

    def __init__(
        self,
        model_repository: Path,
        settings: DockerSettings | None = None,
        *,
        mounts: tuple[Path, ...] = (),
        log_path: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        self.model_repository = Path(model_repository).resolve()
        self.extra_args = tuple(extra_args)
        """Flags for tritonserver inside the container, after tritontune's own."""
        self.settings = settings or DockerSettings()
        self.mounts = tuple(Path(m).resolve() for m in mounts)
        self.log_path = Path(log_path) if log_path else None
        self.stale_removed: list[str] = []
        # The Docker SDK has no type information: a DockerClient and a Container.
        self._client: Any = None
        self._container: Any = None
        self._reaper: subprocess.Popen | None = None
        self._info: ServerInfo | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ServerInfo:
        if self._container is not None:
            return self.info
        self._client = docker_client()
        self.stale_removed = remove_stale_containers(self._client)
        self._check_image()
        try:
            return self._start_container()
        except BaseException:
            self.stop()
            raise

    def notices(self) -> list[str]:
        return [
            f"removed container {name}, left by a tritontune that crashed" for name in self.stale_removed
        ]

    def _check_image(self) -> None:
        docker = _docker()
        try:
            self._client.images.get(self.settings.image)
        except docker.errors.ImageNotFound:
            raise ServerError(
                f"image {self.settings.image} is not on this host and tritontune does not pull: "
                f"run `docker pull {self.settings.image}` first (or pass --image)"
            ) from None

    def _host_network(self) -> bool:
        """No bridge network (e.g. ``dockerd --bridge=none``): share the host's, on loopback."""
        return not self._client.networks.list(names=["bridge"])

    def _start_container(self) -> ServerInfo:
        docker = _docker()
        settings = self.settings
        grpc_port, http_port, metrics_port = free_ports(3)
        host_network = self._host_network()
        address = "127.0.0.1" if host_network else "0.0.0.0"
        command = [
            settings.tritonserver,
            f"--model-repository={self.model_repository}",
            "--model-control-mode=explicit",
            f"--http-address={address}",
            f"--http-port={http_port}",
            f"--grpc-address={address}",
            f"--grpc-port={grpc_port}",
            f"--metrics-address={address}",
            f"--metrics-port={metrics_port}",
            f"--backend-directory={settings.backend_directory}",
            "--log-verbose=0",
            "--exit-timeout-secs=5",
        ]
        if settings.response_cache_bytes > 0:
            command.append(f"--cache-config=local,size={settings.response_cache_bytes}")
        command.extend(self.extra_args)
        volumes = {
            str(path): {"bind": str(path), "mode": "ro"}
            for path in (self.model_repository, *self.mounts)
        }
        options: dict = {
            "command": command,
            "name": f"tritontune-{uuid.uuid4().hex[:12]}",
            "labels": {LABEL: "1", PID_LABEL: str(os.getpid()), HOST_LABEL: socket.gethostname()},
            "volumes": volumes,
            "shm_size": settings.shm_size,
        }
        if host_network:
            options["network_mode"] = "host"
        else:
            options["ports"] = {
                f"{port}/tcp": ("127.0.0.1", port) for port in (grpc_port, http_port, metrics_port)
            }
        if settings.gpus:
            options["device_requests"] = [_gpu_request(settings.gpus)]
        try:
            # Created, then started: a container that fails to start is already ours to remove.
            self._container = self._client.containers.create(settings.image, **options)
            self._container.start()
        except docker.errors.APIError as err:
            reason = " ".join(str(getattr(err, "explanation", None) or err).split())
            if settings.gpus and ("gpu" in reason.lower() or "device driver" in reason.lower()):
                raise ServerError(
                    f"--gpus {settings.gpus}: the Docker engine has no GPU runtime ({reason}); "
                    "install the NVIDIA Container Toolkit, or run without --gpus"
                ) from None
            raise ServerError(f"docker could not start {settings.image}: {reason}") from None
        self._reaper = start_reaper("container", self._container.id)
        self._wait_ready(f"http://127.0.0.1:{http_port}")
        self._info = loopback_server_info(
            (grpc_port, http_port, metrics_port),
            launch="docker",
            backends=self._backends(),
            response_cache=settings.response_cache_bytes > 0,
        )
        return self._info

    def _backends(self) -> frozenset[str]:
        """The backend directories inside the image (onnxruntime, python, tensorrt, ...)."""
        assert self._container is not None
        code, output = self._container.exec_run(["ls", "-1", self.settings.backend_directory])
        if code != 0:
            return frozenset()
        return frozenset(line.strip() for line in output.decode().splitlines() if line.strip())

    def _wait_ready(self, http_url: str) -> None:
        deadline = time.monotonic() + self.settings.startup_timeout
        while time.monotonic() < deadline:
            self._container.reload()
            if self._container.status in ("exited", "dead"):
                tail = self.log_tail()
                raise ServerDiedError(
                    f"the tritonserver container exited during start-up "
                    f"({self._container.attrs['State'].get('ExitCode')}): {telling_line(tail)}",
                    tail,
                )
            if http_ready(http_url):
                return
            time.sleep(0.2)
        raise ServerError(
            f"the tritonserver container was not ready after {self.settings.startup_timeout:.0f}s: "
            f"{telling_line(self.log_tail())}"
        )

    def stop(self) -> None:
        container, self._container = self._container, None
        if container is not None:
            with contextlib.suppress(Exception):
                if self.log_path is not None:
                    # Appended: a restarted container's log follows the dead one's, none is lost.
                    self.log_path.parent.mkdir(parents=True, exist_ok=True)
                    with open(self.log_path, "ab") as log:
                        log.write(container.logs())
            with contextlib.suppress(Exception):
                container.remove(force=True)
        stop_reaper(self._reaper)
        self._reaper = None
        self._info = None

    # -- state -----------------------------------------------------------------------------
    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise ServerError("the tritonserver container is not running")
        return self._info

    @property
    def container_name(self) -> str | None:
        return self._container.name if self._container is not None else None

    def check_alive(self) -> None:
        if self._container is None:
            raise ServerDiedError("the tritonserver container is not running")
        try:
            self._container.reload()
            status = self._container.status
        except Exception:
            status = "gone"
        if status != "running":
            tail = self.log_tail()
            raise ServerDiedError(
                f"the tritonserver container stopped ({status}): {telling_line(tail)}", tail
            )

    def log_tail(self, lines: int = 20) -> str:
        if self._container is None:
            return ""
        try:
            return self._container.logs(tail=lines).decode("utf-8", errors="replace")
        except Exception:
            return ""


def _gpu_request(gpus: str) -> Any:  # docker.types.DeviceRequest
    docker = _docker()
    if gpus.strip().lower() == "all":
        return docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])
    ids = [g.strip() for g in gpus.split(",") if g.strip()]
    if not ids or not all(g.isdigit() for g in ids):
        raise ServerError(f"--gpus {gpus!r}: expected all, or device ids such as 0,1")
    return docker.types.DeviceRequest(device_ids=ids, capabilities=[["gpu"]])
