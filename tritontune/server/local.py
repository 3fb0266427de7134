"""Launches a real ``tritonserver`` process on this machine (no Docker), the default launcher.

The server binds loopback only, runs in explicit model-control mode (configs are switched by
reloading a model, never by restarting), logs to a file, and is always stopped: on exit, on errors,
on Ctrl-C/SIGTERM (see :class:`TritonLauncher`), and, through ``PR_SET_PDEATHSIG``, even when
tritontune itself is killed; then a detached reaper (:mod:`tritontune.server.reaper`) kills the
rest of the server's process group (the Python backend's stubs, which would live on, orphaned).
What it leaves behind (the Python backend's shared-memory regions under /dev/shm, its private
backend directory) is removed.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections import deque
from pathlib import Path

from tritontune.errors import ServerDiedError, ServerError
from tritontune.server.binary import (
    TritonBinary,
    find_tritonserver,
    prepare_bundled_backends,
    server_environment,
)
from tritontune.server.launcher import (
    ServerInfo,
    TritonLauncher,
    cuda_devices_in_log,
    http_ready,
    loopback_server_info,
    telling_line,
)
from tritontune.server.ports import ensure_port_free, free_ports
from tritontune.server.reaper import remove_shm_regions, start_reaper, stop_reaper

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class LocalTritonLauncher(TritonLauncher):
    """A tritonserver child process serving ``model_repository`` on 127.0.0.1."""

    def __init__(
        self,
        model_repository: Path,
        *,
        binary: Path | str | None = None,
        grpc_port: int | None = None,
        http_port: int | None = None,
        metrics_port: int | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 60.0,
        response_cache_bytes: int = 64 * 1024 * 1024,
        extra_args: tuple[str, ...] = (),
        graceful_stop: bool = False,
    ) -> None:
        """``graceful_stop``: stop the server with SIGTERM and wait for its shutdown (models
        unloaded, the Python stubs finalized: ~2.5 s here) instead of killing it at once; for a
        user's ``--server-arg`` flags whose output (a trace file, say) is written on the way out.
        """
        self.model_repository = Path(model_repository)
        self.binary: TritonBinary = find_tritonserver(binary)
        self._fixed_ports = (grpc_port, http_port, metrics_port)
        self.log_path = Path(log_path) if log_path else None
        self.startup_timeout = startup_timeout
        self.response_cache_bytes = response_cache_bytes
        self.extra_args = tuple(extra_args)
        self.graceful_stop = graceful_stop
        self._process: subprocess.Popen[bytes] | None = None
        self._reaper: subprocess.Popen[bytes] | None = None
        self._work_dir: Path | None = None
        self._shm_prefix = ""
        self._info: ServerInfo | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> ServerInfo:
        if self._process is not None:
            return self.info
        self._work_dir = Path(tempfile.mkdtemp(prefix="tritontune-server-"))
        if self.log_path is None:
            self.log_path = self._work_dir / "tritonserver.log"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # Auto-picked ports can be taken between picking and binding: try again with new ones.
            attempts = 1 if any(self._fixed_ports) else 3
            for attempt in range(attempts):
                try:
                    return self._start_once()
                except _PortTaken as err:
                    self._kill()
                    if attempt == attempts - 1:
                        raise ServerError(str(err)) from None
        except BaseException:
            self.stop()
            raise
        raise AssertionError("unreachable")

    def _start_once(self) -> ServerInfo:
        assert self._work_dir is not None and self.log_path is not None
        grpc_port, http_port, metrics_port = self._ports()
        self._shm_prefix = f"tritontune_{uuid.uuid4().hex[:12]}"
        args = [
            str(self.binary.path),
            f"--model-repository={self.model_repository.resolve()}",
            "--model-control-mode=explicit",
            "--http-address=127.0.0.1",
            f"--http-port={http_port}",
            "--grpc-address=127.0.0.1",
            f"--grpc-port={grpc_port}",
            "--metrics-address=127.0.0.1",
            f"--metrics-port={metrics_port}",
            "--log-verbose=0",
            "--exit-timeout-secs=5",
            f"--backend-config=python,shm-region-prefix-name={self._shm_prefix}",
        ]
        if self.binary.bundled:
            backends = prepare_bundled_backends(self.binary, self._work_dir / "backends")
            args.append(f"--backend-directory={backends}")
        if self.binary.caches_dir is not None:
            args.append(f"--cache-directory={self.binary.caches_dir}")
        if self.response_cache_bytes > 0:
            args.append(f"--cache-config=local,size={self.response_cache_bytes}")
        args.extend(self.extra_args)

        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child from here on
        try:
            self._process = subprocess.Popen(
                args,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=server_environment(self.binary),
                start_new_session=True,  # Ctrl-C reaches tritontune, which stops the server
                preexec_fn=_die_with_parent,
            )
        finally:
            log.close()
        self._reaper = start_reaper("group", str(self._process.pid), self._shm_prefix)
        self._wait_ready(f"http://127.0.0.1:{http_port}")
        self._info = loopback_server_info(
            (grpc_port, http_port, metrics_port),
            launch="local",
            backends=self.binary.backends(),
            response_cache=self.response_cache_bytes > 0,
        )
        if self._info.capabilities.gpu_count == 0:
            # No GPU metrics (DCGM did not start): the log still says which devices CUDA set up.
            devices = cuda_devices_in_log(self.log_path.read_text(encoding="utf-8", errors="replace"))
            if devices:
                capabilities = dataclasses.replace(self._info.capabilities, gpu_count=devices)
                self._info = dataclasses.replace(self._info, capabilities=capabilities)
        return self._info

    def _ports(self) -> tuple[int, int, int]:
        grpc_port, http_port, metrics_port = self._fixed_ports
        picked = iter(free_ports(3))
        ports = []
        for port, what in (
            (grpc_port, "--grpc-port"),
            (http_port, "--http-port"),
            (metrics_port, "--metrics-port"),
        ):
            if port:
                ensure_port_free(port, what)
                ports.append(port)
            else:
                ports.append(next(picked))
        return ports[0], ports[1], ports[2]

    def _wait_ready(self, http_url: str) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                tail = self.log_tail()
                if "address already in use" in tail.lower():
                    raise _PortTaken(
                        f"a port tritonserver needs is already in use: {telling_line(tail)}"
                    )
                raise ServerError(
                    f"tritonserver exited during start-up (code {self._process.returncode}): "
                    f"{telling_line(tail)} (log: {self.log_path})"
                )
            if http_ready(http_url):
                return
            time.sleep(0.1)
        raise ServerError(
            f"tritonserver was not ready after {self.startup_timeout:.0f}s (log: {self.log_path})"
        )

    def stop(self) -> None:
        self._kill()
        if self._shm_prefix:
            remove_shm_regions(self._shm_prefix)
        if self._work_dir is not None:
            # Keep a log the user asked for; the private work dir goes.
            shutil.rmtree(self._work_dir, ignore_errors=True)
            if self.log_path is not None and self.log_path.is_relative_to(self._work_dir):
                self.log_path = None
            self._work_dir = None
        self._info = None

    def _kill(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        # Killed outright by default: tritontune is done with it, nothing of it is kept but its
        # log (written as it goes) and the shared-memory regions, removed by stop().
        if process.poll() is None and self.graceful_stop:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        # The Python backend's stub processes share the server's process group.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
        stop_reaper(self._reaper)
        self._reaper = None

    # -- state -----------------------------------------------------------------------------
    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            raise ServerError("the local tritonserver is not running")
        return self._info

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def check_alive(self) -> None:
        if self._process is None:
            raise ServerDiedError("the local tritonserver is not running", self.log_tail())
        code = self._process.poll()
        if code is not None:
            tail = self.log_tail()
            raise ServerDiedError(
                f"tritonserver died (exit code {code}): {telling_line(tail)} (log: {self.log_path})",
                tail,
            )

    def log_tail(self, lines: int = 20) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        with open(self.log_path, encoding="utf-8", errors="replace") as log:
            return "".join(deque(log, maxlen=lines))


class _PortTaken(ServerError):
    pass
