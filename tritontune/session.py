"""A tuning session: one model on one Triton server, variants in, measurements out.

``profile``, ``search`` and ``check`` all work through this. It owns the server's lifetime (through
its launcher), the private working repository the server reads, and the prepared request payloads.
Configs are switched by reloading the model with a config override; the server is restarted only
when it died (:meth:`restart`, the one place that restarts it).

The session only orchestrates: which server is :func:`tritontune.server.factory.make_launcher`'s
job, which config a variant becomes is :class:`tritontune.config.builder.ConfigBuilder`'s, and
what requests carry is :mod:`tritontune.measure.workload`'s. ``search``, ``profile`` and ``check``
depend on the small :class:`Session` protocol, so a test drives them with a fake.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from tritontune.config.builder import ConfigBuilder
from tritontune.config.model_config import ModelConfig
from tritontune.config.repository import (
    ONNX_BACKEND,
    ModelSource,
    ServedModel,
    WorkingRepository,
    load_model_source,
)
from tritontune.config.variant import FP32, Variant, variant_filename
from tritontune.errors import InputError, ServerDiedError, ServerError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings, measure_load
from tritontune.measure.mixed import ClassRequests, TrafficMeasurement, measure_traffic
from tritontune.measure.traffic import Traffic, TrafficClass
from tritontune.measure.workload import Workload, prepare_requests
from tritontune.precision.convert import cache_dir as precision_cache_dir
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck, prepare_precisions
from tritontune.server.client import TritonClient
from tritontune.server.factory import LaunchSettings, make_launcher
from tritontune.server.launcher import ServerInfo, TritonLauncher


@runtime_checkable
class Session(Protocol):
    """What ``search``, ``profile`` and ``check`` use of a session: one model on one server.

    :class:`TuningSession` is the real one; tests drive the jobs with a fake on a modelled server
    (tests/fakes.py), so the jobs' logic is tested without a server.
    """

    source: ModelSource
    workload: Workload
    settings: MeasureSettings
    launcher: TritonLauncher
    served: ServedModel | None
    restarts: int
    last_switch_s: float | None

    @property
    def name(self) -> str: ...

    @property
    def info(self) -> ServerInfo: ...

    @property
    def batch_dim_dynamic(self) -> bool: ...

    def build_config(self, variant: Variant) -> ModelConfig: ...

    def load_variant(self, variant: Variant) -> ModelConfig: ...

    def measure(self, load: LoadSpec, settings: MeasureSettings | None = None) -> Measurement: ...

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement: ...

    def load_endpoints(self, variants: Mapping[str, Variant]) -> dict[str, ModelConfig]: ...

    def measure_with_restart(
        self, load: LoadSpec, retries: int = 1, settings: MeasureSettings | None = None
    ) -> tuple[Measurement, int]: ...

    def restart(self, *, reload: bool = True) -> None: ...

    def server_ready(self) -> bool: ...

    def prepare_precisions(
        self, precisions: list[str], *, accuracy: AccuracySettings | None = None
    ) -> dict[str, PrecisionCheck]: ...


class TuningSession:
    """Use as a context manager; leaving it stops the server and removes the working files."""

    def __init__(
        self,
        source: ModelSource,
        *,
        launch: LaunchSettings | None = None,
        workload: Workload | None = None,
        settings: MeasureSettings | None = None,
        work_dir: Path | None = None,
        failure_log: Path | None = None,
    ) -> None:
        self.source = source
        self.workload = workload or Workload()
        self.settings = settings or MeasureSettings()
        self._own_work_dir = work_dir is None
        self.work_dir = Path(work_dir or tempfile.mkdtemp(prefix="tritontune-"))
        self.repository = WorkingRepository(self.work_dir / "repository")
        launch = launch or LaunchSettings()
        self.log_path = launch.server_log or self.work_dir / "tritonserver.log"
        """The server's log: ``--server-log``'s file (kept), else one in the working files."""
        self.failure_log = failure_log
        """Where the log is copied when something failed (:meth:`keep_log_because`)."""
        self.kept_log: Path | None = launch.server_log
        """Where the log is once the session closed (None: removed with the working files)."""
        self.kept_log_reason = "--server-log" if launch.server_log else ""
        self._log_reasons: list[str] = []
        self.launcher = make_launcher(
            launch,
            self.repository.root,
            log_path=self.log_path,
            mounts=self._linked_directories,
        )
        self.served: ServedModel | None = None
        self.client: TritonClient | None = None
        self.tuned_config: ModelConfig | None = None
        self.last_switch_s: float | None = None
        self.restarts = 0
        self.precisions: dict[str, PrecisionCheck] = {}
        """Precision variants prepared by :meth:`prepare_precisions`, accepted or not."""
        self._builder: ConfigBuilder | None = None
        self._requests: list[Any] = []
        self._class_requests: dict[str, ClassRequests] = {}
        self._endpoints: dict[str, tuple[str, ModelConfig]] = {}
        """Role -> (served name, config) while :meth:`load_endpoints` is in effect."""
        self._was_loaded_remotely = False

    def _linked_directories(self) -> tuple[Path, ...]:
        """Where the working repository's links lead (the user's model files, the precision
        cache): a container must see them at the same paths."""
        version = self.source.directory / self.source.version
        targets = {(version / entry.name).resolve().parent for entry in version.iterdir()}
        cache = precision_cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        return tuple(sorted(targets | {cache.resolve()}))

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def info(self) -> ServerInfo:
        return self.launcher.info

    @property
    def builder(self) -> ConfigBuilder:
        """Configs for this model on this server (known once the server is up)."""
        if self._builder is None:
            self._builder = ConfigBuilder(
                self.source, self.info.capabilities, batch_size=self.workload.batch_size
            )
        return self._builder

    @property
    def batch_dim_dynamic(self) -> bool:
        """Whether the model file takes any batch size (an ONNX graph with a dynamic first dim)."""
        return self.builder.batch_dim_dynamic

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> TuningSession:
        try:
            self._start()
        except BaseException as err:
            self.keep_log_because(_failure_reason(err))
            self.close(keep_files=False)
            raise
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        failed = exc is not None and not isinstance(exc, KeyboardInterrupt)
        if exc is not None:
            self.keep_log_because(_failure_reason(exc))
        self.close(keep_files=failed)

    def _start(self) -> None:
        self.launcher.__enter__()
        info = self.launcher.info
        if self.launcher.owns_server:
            self.served = self.repository.add(self.source, info.capabilities.backends)
        else:
            self.served = ServedModel(self.source, via_python=False)
        self.client = self.launcher.client()
        if not self.launcher.owns_server:
            self._was_loaded_remotely = self.client.is_model_ready(self.name)

    def keep_log_because(self, reason: str) -> None:
        """Keep the server's log past :meth:`close` (copied to ``failure_log``): something failed,
        and the log is where its cause is. A restart of a dead server counts by itself."""
        if reason not in self._log_reasons:
            self._log_reasons.append(reason)

    def close(self, keep_files: bool = False) -> None:
        """Stop the server, leave a remote one as found, keep the log when something failed,
        and remove the working files."""
        try:
            if self.client is not None and not self.launcher.owns_server:
                self._restore_remote()
        finally:
            if self.client is not None:
                self.client.close()
                self.client = None
            self.launcher.stop()
            self._keep_log()
            if self._own_work_dir and not keep_files:
                shutil.rmtree(self.work_dir, ignore_errors=True)

    def _keep_log(self) -> None:
        reasons = list(self._log_reasons)
        if self.restarts:
            reasons.insert(0, f"the server was restarted {self.restarts}x")
        if not reasons or not self.launcher.owns_server:
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

    def _restore_remote(self) -> None:
        assert self.client is not None
        try:
            if self._was_loaded_remotely:
                self.client.load_model(self.name)  # back to the server's own config.pbtxt
            elif self.tuned_config is not None:
                self.client.unload_model(self.name)
        except ServerError:
            pass  # the server is somebody else's; failing to tidy it must not hide the result

    def restart(self, *, reload: bool = True) -> None:
        """Restart a dead server; with ``reload``, load the current config again.

        Without it the server comes back with no tuned config (the caller loads the next one):
        a config that may have brought the server down is not loaded again behind its back."""
        self.restarts += 1
        if self.client is not None:
            self.client.close()
        self.launcher.restart()
        self.client = self.launcher.client()
        if not reload:
            self.tuned_config = None
            self._requests = []
        elif self.tuned_config is not None:
            self._load(self.tuned_config)

    def server_ready(self) -> bool:
        """Whether the server answers its readiness check now."""
        try:
            return self.client is not None and self.client.is_ready()
        except ServerError:
            return False

    # -- variants ----------------------------------------------------------------------------
    def prepare_precisions(
        self, precisions: list[str], *, accuracy: AccuracySettings | None = None
    ) -> dict[str, PrecisionCheck]:
        """Build and accuracy-check precision variants; accepted ones become loadable.

        Variants are files placed beside the model in the working repository, so they need a
        server tritontune launched (a remote server reads its own repository).
        """
        if self.source.backend != ONNX_BACKEND:
            raise InputError(
                f"model {self.name!r} uses the {self.source.backend!r} backend: precision variants "
                "are built for ONNX models only"
            )
        if any(p != FP32 for p in precisions) and not self.launcher.owns_server:
            raise InputError(
                "precision variants are files tritontune places in the server's model repository; "
                "a remote server reads its own, so use --launch local (or docker)"
            )
        checks = prepare_precisions(
            self.source.model_file,
            self.source.base_config,
            precisions,
            input_data=self.workload.input_data,
            accuracy=accuracy,
        )
        for precision, check in checks.items():
            if check.accepted and precision != FP32 and check.path is not None:
                filename = variant_filename(self.source.model_file.name, precision)
                self.repository.add_file(self.source, filename, check.path)
        self.precisions.update(checks)
        self.builder.allow_precisions(
            {p: None if check.accepted else check.reason for p, check in checks.items()}
        )
        return checks

    def build_config(self, variant: Variant) -> ModelConfig:
        """The tuned config for ``variant`` (the user's backend), validated for this server."""
        return self.builder.build(variant)

    def load_variant(self, variant: Variant) -> ModelConfig:
        """Validate ``variant`` and switch the running model to it; returns the tuned config."""
        config = self.build_config(variant)
        self._load(config)
        return config

    def _load(self, config: ModelConfig) -> None:
        assert self.client is not None and self.served is not None
        if self._endpoints:
            self._unload_endpoints()
        started = time.perf_counter()
        try:
            self.client.load_model(self.name, self.served.served_config(config))
        except ServerError:
            self.launcher.check_alive()  # a crash while loading is a ServerDiedError
            raise
        self.last_switch_s = time.perf_counter() - started
        self.tuned_config = config
        self._class_requests = {}
        self._prepare_requests(config)

    def _prepare_requests(self, config: ModelConfig) -> None:
        assert self.client is not None
        metadata = self.client.model_metadata(self.name)
        batching = config.max_batch_size > 0
        self._requests = prepare_requests(
            self.name,
            metadata,
            self.workload,
            batching=batching,
            protocol=self.launcher.endpoint().protocol,
        )

    # -- measuring ---------------------------------------------------------------------------
    def measure(self, load: LoadSpec, settings: MeasureSettings | None = None) -> Measurement:
        """Measure the loaded config at ``load``; a server that died raises ServerDiedError."""
        if not self._requests:
            raise ServerError("no config is loaded; call load_variant() first")
        self.launcher.check_alive()
        measurement = measure_load(
            self.launcher.endpoint(),
            self.name,
            self._requests,
            load,
            batch_size=self.workload.batch_size,
            settings=settings or self.settings,
            seed=self.workload.seed,
            # GPU gauges only where the server has GPUs: a CPU-only server publishes none.
            metrics_url=self.info.metrics_url if self.info.capabilities.gpu_count else None,
        )
        self.launcher.check_alive()
        if measurement.latency.count == 0 and measurement.error_count:
            kind, count = max(measurement.errors.items(), key=lambda item: item[1])
            example = measurement.error_examples.get(kind) or "no message"
            raise ServerError(f"every request to {self.name!r} failed ({kind} x{count}): {example}")
        return measurement

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement:
        """Measure every class of ``traffic`` at once, at ``total_rate`` req/s in all (each
        class its share, its own requests and priority): against the loaded config, or, after
        :meth:`load_endpoints`, each class against the endpoint named after it."""
        if self.client is None or (self.tuned_config is None and not self._endpoints):
            raise ServerError("no config is loaded; call load_variant() first")
        if set(self._class_requests) != {c.name for c in traffic.classes}:
            self._class_requests = {c.name: self._requests_for(c) for c in traffic.classes}
        self.launcher.check_alive()
        measurement = measure_traffic(
            self.launcher.endpoint(),
            traffic,
            self._class_requests,
            total_rate,
            settings=settings or self.settings,
            seed=self.workload.seed,
        )
        self.launcher.check_alive()
        return measurement

    def _requests_for(self, traffic_class: TrafficClass) -> ClassRequests:
        assert self.client is not None
        if self._endpoints:
            if traffic_class.name not in self._endpoints:
                raise InputError(
                    f"no endpoint for the class {traffic_class.name!r} "
                    f"(endpoints: {', '.join(sorted(self._endpoints))})"
                )
            model, config = self._endpoints[traffic_class.name]
        else:
            assert self.tuned_config is not None
            model, config = self.name, self.tuned_config
        requests = prepare_requests(
            model,
            self.client.model_metadata(model),
            traffic_class.request,
            batching=config.max_batch_size > 0,
            protocol=self.launcher.endpoint().protocol,
        )
        return ClassRequests(model, requests)

    def load_endpoints(self, variants: Mapping[str, Variant]) -> dict[str, ModelConfig]:
        """Serve the model as one endpoint per role instead of one shared model: ``NAME_role``,
        each with its own config (the export's endpoint naming), while the shared model is
        unloaded. A workload's class is then sent to the endpoint of its name (a client-side
        router); :meth:`load_variant` goes back to the shared model."""
        served = {}
        for role, variant in variants.items():
            source = dataclasses.replace(self.source, name=f"{self.name}_{role}")
            served[role] = (source, self.build_config(variant))
        self._serve_endpoints(served)
        return {role: config for role, (_, config) in served.items()}

    def load_routes(self, routes: Mapping[str, ModelSource]) -> None:
        """Serve models as they are (their own config.pbtxt, validated) and send each class of
        a workload to its own: ``check`` of a repository exported as one endpoint per class."""
        configs: dict[str, ModelConfig] = {}
        for source in routes.values():
            if source.name not in configs:
                builder = ConfigBuilder(source, self.info.capabilities)
                configs[source.name] = builder.build(Variant())
        self._serve_endpoints({role: (source, configs[source.name]) for role, source in routes.items()})

    def _serve_endpoints(self, endpoints: Mapping[str, tuple[ModelSource, ModelConfig]]) -> None:
        if not self.launcher.owns_server:
            raise InputError("separate endpoints need a server tritontune launched (model files)")
        assert self.client is not None
        self._unload_endpoints()
        self.client.unload_model(self.name)
        self.tuned_config = None
        loaded: set[str] = set()
        for role, (source, config) in endpoints.items():
            if source.name not in loaded:
                served = self.repository.add(source, self.info.capabilities.backends)
                try:
                    self.client.load_model(source.name, served.served_config(config))
                except ServerError:
                    self.launcher.check_alive()
                    raise
                loaded.add(source.name)
            self._endpoints[role] = (source.name, config)
        self._class_requests = {}

    def _unload_endpoints(self) -> None:
        assert self.client is not None
        for name in {name for name, _ in self._endpoints.values()}:
            self.client.unload_model(name)
        self._endpoints = {}

    def measure_with_restart(
        self, load: LoadSpec, retries: int = 1, settings: MeasureSettings | None = None
    ) -> tuple[Measurement, int]:
        """:meth:`measure`, restarting a server that died up to ``retries`` times.

        Returns the measurement and how many restarts it took.
        """
        for attempt in range(retries + 1):
            try:
                return self.measure(load, settings), attempt
            except ServerDiedError:
                if attempt == retries or not self.launcher.owns_server:
                    raise
                self.restart()
        raise AssertionError("unreachable")


def _failure_reason(err: BaseException) -> str:
    if isinstance(err, KeyboardInterrupt):
        return "interrupted"
    return str(err).splitlines()[0] if str(err) else type(err).__name__


def failure_log_path(beside: Path, name: str) -> Path:
    """``<dir of beside>/<name>.tritonserver.log``: where a failed run's server log is kept."""
    return beside.parent / f"{name}.tritonserver.log"


def open_session(model_repository: Path, model: str, **options: Any) -> TuningSession:
    """A :class:`TuningSession` for ``model`` of ``model_repository`` (not started yet)."""
    return TuningSession(load_model_source(Path(model_repository), model), **options)
