"""One Triton server for one job: its lifetime, its working repository, its log and its faults.

A :class:`Server` starts (or attaches to) a server through the launcher
:func:`tritontune.server.factory.make_launcher` picks, serves a private working repository (links
to the user's model files, never copies or edits them), loads and unloads models in it, restarts
it when it died (:meth:`restart`, the one place that does), tells a server that died from a config
Triton refused (:meth:`fault`), keeps its log when something failed, and leaves a remote server
as it found it. What is loaded and measured is :class:`tritontune.serving.session.TuningSession`'s
business, not this one's.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from tritontune.config.model_config import ModelConfig
from tritontune.config.repository import ModelSource, ServedModel, WorkingRepository
from tritontune.errors import ServerDiedError, ServerError
from tritontune.precision.runtime import onnxruntime_module
from tritontune.server.client import TritonClient
from tritontune.server.endpoint import Endpoint
from tritontune.server.factory import LaunchSettings, make_launcher
from tritontune.server.launcher import ServerInfo

#: How long a server that stopped answering after an error gets to show whether it died (a
#: killed server can close its sockets a moment before its process is gone).
FAULT_GRACE_S = 2.0


class Server:
    """Use as a context manager; leaving it stops the server and removes the working files
    (kept, with the log, when the block failed)."""

    def __init__(
        self,
        launch: LaunchSettings | None = None,
        *,
        work_dir: Path | None = None,
        failure_log: Path | None = None,
        mounts: Callable[[], tuple[Path, ...]] = tuple,
        complete_configs: bool = False,
    ) -> None:
        launch = launch or LaunchSettings()
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="tritontune-"))
        self.repository = WorkingRepository(self.work_dir / "repository")
        self.log_path = launch.server_log or self.work_dir / "tritonserver.log"
        """The server's log: ``--server-log``'s file (kept), else one in the working files."""
        self.failure_log = failure_log
        """Where the log is copied when something failed (:meth:`keep_log_because`)."""
        self.kept_log: Path | None = launch.server_log
        """Where the log is once the server stopped (None: removed with the working files)."""
        self.kept_log_reason = "--server-log" if launch.server_log else ""
        self._log_reasons: list[str] = []
        self.launcher = make_launcher(
            launch,
            self.repository.root,
            log_path=self.log_path,
            mounts=mounts,
            complete_configs=complete_configs,
        )
        self.client: TritonClient | None = None
        self.restarts = 0
        self._found_ready: dict[str, bool] = {}
        """Models of a remote server this job loaded, and whether each was ready before."""

    @property
    def owns_server(self) -> bool:
        """False for a server somebody else runs (never restarted, left as found)."""
        return self.launcher.owns_server

    @property
    def info(self) -> ServerInfo:
        return self.launcher.info

    def endpoint(self) -> Endpoint:
        return self.launcher.endpoint()

    def notices(self) -> list[str]:
        return self.launcher.notices()

    # -- lifetime ------------------------------------------------------------------------------
    def __enter__(self) -> Server:
        try:
            self.launcher.__enter__()
            self.client = self.launcher.client()
        except BaseException as err:
            self.keep_log_because(failure_reason(err))
            self.close(keep_files=False)
            raise
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        failed = exc is not None and not isinstance(exc, KeyboardInterrupt)
        if exc is not None:
            self.keep_log_because(failure_reason(exc))
        self.close(keep_files=failed)

    def close(self, keep_files: bool = False) -> None:
        """Stop the server, leave a remote one as found, keep the log when something failed,
        and remove the working files."""
        try:
            if self.client is not None and not self.owns_server:
                self._restore_remote()
        finally:
            if self.client is not None:
                self.client.close()
                self.client = None
            self.launcher.stop()
            self._keep_log()
            if self._own_work_dir and not keep_files:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def restart(self) -> None:
        """Start a dead server again, with nothing loaded."""
        self.restarts += 1
        if self.client is not None:
            self.client.close()
        self.launcher.restart()
        self.client = self.launcher.client()

    # -- faults --------------------------------------------------------------------------------
    def check_alive(self) -> None:
        """Raise :class:`ServerDiedError` when the server is gone."""
        self.launcher.check_alive()

    def ready(self) -> bool:
        """Whether the server answers its readiness check now."""
        try:
            return self.client is not None and self.client.is_ready()
        except ServerError:
            return False

    def fault(self, err: ServerError) -> ServerDiedError | None:
        """The server's death behind ``err``, or None when the server is fine (then ``err`` is
        the config's). A server that doesn't answer gets :data:`FAULT_GRACE_S` to show which."""
        if isinstance(err, ServerDiedError):
            return err
        deadline = time.monotonic() + FAULT_GRACE_S
        while True:
            try:
                self.check_alive()
            except ServerDiedError as died:
                return died
            if self.ready():
                return None
            if time.monotonic() >= deadline:
                return ServerDiedError(f"the server stopped answering ({err})", self.launcher.log_tail())
            time.sleep(0.1)

    # -- models --------------------------------------------------------------------------------
    def add_model(self, source: ModelSource) -> ServedModel:
        """Put ``source`` in the working repository (a server tritontune launched), or take it
        as the remote server serves it."""
        if not self.owns_server:
            return ServedModel(source, via_python=False)
        served = self.repository.add(source, self.info.capabilities.backends)
        if served.via_python:  # its model.py runs onnxruntime in this Python
            onnxruntime_module(f"serving {source.model_file.name} through the Python backend")
        return served

    def load_model(self, name: str, config: ModelConfig | None = None) -> float:
        """Load (or reload) ``name`` with ``config``; returns the seconds the switch took. A
        server that crashed while loading raises :class:`ServerDiedError`."""
        client = self._client()
        if not self.owns_server and name not in self._found_ready:
            self._found_ready[name] = client.is_model_ready(name)
        started = time.perf_counter()
        try:
            client.load_model(name, config)
        except ServerError:
            self.check_alive()
            raise
        return time.perf_counter() - started

    def unload_model(self, name: str) -> None:
        self._client().unload_model(name)

    def model_metadata(self, name: str) -> dict:
        return self._client().model_metadata(name)

    def infer(
        self, name: str, inputs: Mapping[str, np.ndarray], outputs: Sequence[str], *, version: str = ""
    ) -> dict[str, np.ndarray]:
        """One untimed request to ``name``: its ``outputs`` (see :meth:`TritonClient.infer`)."""
        return self._client().infer(name, inputs, outputs, version=version)

    def _client(self) -> TritonClient:
        if self.client is None:
            raise ServerError("the server is not started")
        return self.client

    def _restore_remote(self) -> None:
        """Each model this job loaded on a remote server goes back to the server's own config
        (it was loaded before) or is unloaded."""
        assert self.client is not None
        for name, was_ready in self._found_ready.items():
            try:
                if was_ready:
                    self.client.load_model(name)  # back to the server's own config.pbtxt
                else:
                    self.client.unload_model(name)
            except ServerError:
                pass  # the server is somebody else's; failing to tidy it must not hide the result

    # -- the log -------------------------------------------------------------------------------
    def keep_log_because(self, reason: str) -> None:
        """Keep the server's log past :meth:`close` (copied to ``failure_log``): something failed,
        and the log is where its cause is. A restart of a dead server counts by itself."""
        if reason not in self._log_reasons:
            self._log_reasons.append(reason)

    def _keep_log(self) -> None:
        reasons = list(self._log_reasons)
        if self.restarts:
            reasons.insert(0, f"the server was restarted {self.restarts}x")
        if not reasons or not self.owns_server:
            return
        if self.kept_log is not None:  # --server-log: it is already where the user wants it
            self.kept_log_reason = "; ".join(reasons)
            return
        if self.failure_log is None or not self.log_path.is_file():
            return
        self.failure_log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "rb") as source, open(self.failure_log, "ab") as kept:
            shutil.copyfileobj(source, kept)  # appended: an earlier failed run's log stays
        self.kept_log = self.failure_log
        self.kept_log_reason = "; ".join(reasons)


def failure_reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def failure_log_path(beside: Path, name: str) -> Path:
    """``<dir of beside>/<name>.tritonserver.log``: where a failed run's server log is kept."""
    return beside.parent / f"{name}.tritonserver.log"
