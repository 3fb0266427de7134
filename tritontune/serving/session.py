"""The real bench: one model, a pipeline or a group of models on a
:class:`~tritontune.serving.server.Server`.

What is served is data (:mod:`tritontune.serving.served`): which models the server gets and in
what order their configs load, where a single class of load goes, and what the kind can't do
(declared before launch). Everything else is the one session's, for every kind. A tuning session
builds configs (:class:`tritontune.config.builder.ConfigBuilder`), loads them by
reloading the model with a config override (no restart), prepares the requests once per loaded
config (:mod:`tritontune.measure.request_shape`), measures, and serves the model as one endpoint
per class when a workload asks for that layout. Precision variants are files it places beside
the model in the server's working repository. Everything about the server itself (lifetime,
restarts, faults, the log) is the :class:`Server`'s.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tritontune.config.builder import ConfigBuilder
from tritontune.config.model_config import ModelConfig, copy_config
from tritontune.config.pipeline import Pipeline
from tritontune.config.repository import ONNX_BACKEND, ModelSource, ServedModel
from tritontune.config.variant import FP16_IO, FP32, Variant, variant_filename
from tritontune.errors import InputError, ServerDiedError, ServerError
from tritontune.measure.load_processes import AutoProcesses, ClientVerdict, auto_processes_limit
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.loadgen import LoadEngine, LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings, measure_load
from tritontune.measure.mixed import ClassRequests, TrafficMeasurement, measure_traffic
from tritontune.measure.perf_analyzer import measure_with_perf_analyzer
from tritontune.measure.request_shape import RequestShape, prepare_requests
from tritontune.measure.traffic import Traffic, TrafficClass
from tritontune.precision.convert import cache_dir as precision_cache_dir
from tritontune.precision.prepare import (
    AccuracySettings,
    PrecisionCheck,
    joined_input_data,
    prepare_precisions,
)
from tritontune.server.factory import LaunchSettings
from tritontune.server.launcher import ServerInfo
from tritontune.serving.bench import LoadReceipt
from tritontune.serving.pipeline_inputs import captured_inputs, described, models_before
from tritontune.serving.served import (
    Capability,
    ModelGroup,
    Served,
    ServedPipeline,
    SingleModel,
    require,
)
from tritontune.serving.server import Server


def version_targets(sources: Iterable[ModelSource]) -> set[Path]:
    """The directories the files of each source's served version lead to (links resolved):
    what a server in a container must see at the same paths."""
    targets: set[Path] = set()
    for source in sources:
        version = source.directory / source.version
        targets |= {(version / entry.name).resolve().parent for entry in version.iterdir()}
    return targets


class TuningSession:
    """Use as a context manager; leaving it stops the server and removes the working files.

    ``serves`` is what it serves (a :class:`~tritontune.config.repository.ModelSource` is one
    model); the members a kind lacks (:attr:`lacks`) refuse, in the kind's one line
    (:func:`~tritontune.serving.bench.require`)."""

    def __init__(
        self,
        serves: Served | ModelSource,
        *,
        launch: LaunchSettings | None = None,
        request_shape: RequestShape | None = None,
        settings: MeasureSettings | None = None,
        work_dir: Path | None = None,
        failure_log: Path | None = None,
        load: LoadSettings | None = None,
    ) -> None:
        self.serves: Served = SingleModel(serves) if isinstance(serves, ModelSource) else serves
        self.source = self.serves.source
        """The model that names the study (a pipeline's entry; a group's first tuned model,
        named for the group)."""
        self.load_settings = load or LoadSettings()
        """What generates the load of every measurement (engine, processes)."""
        self.request_shape = request_shape or RequestShape()
        self.settings = settings or MeasureSettings()
        """How a level is measured when the caller does not say."""
        self.server = Server(
            launch,
            work_dir=work_dir,
            failure_log=failure_log,
            mounts=self._linked_directories,
            complete_configs=self.serves.configs_complete(),
        )
        self.served_models: dict[str, ServedModel] = {}
        """Each model as the server serves it (by name), once the server is up."""
        self.precisions: dict[str, PrecisionCheck] = {}
        """Precision variants of the model an endpoint copies, accepted or not."""
        self._builders: dict[str, ConfigBuilder] = {}
        self._loaded: Variant | None = None
        """The variant loaded (None: endpoints, or nothing)."""
        self._loaded_configs: dict[str, ModelConfig] = {}
        self._built: tuple[Variant, dict[str, ModelConfig]] | None = None
        self._again: Callable[[], LoadReceipt] | None = None
        """The last load, to make again after a restart (:meth:`restart` with ``reload``)."""
        self._requests: list[Any] = []
        self._class_requests: dict[str, ClassRequests] = {}
        self._endpoints: dict[str, tuple[str, ModelConfig]] = {}
        """Class -> (served name, config) while endpoints are loaded."""
        self._auto: AutoProcesses | None = None
        """``--load-processes auto``: the counts this session's levels ended with."""

    def _linked_directories(self) -> tuple[Path, ...]:
        """Where the working repository's links lead (every served model's files, the precision
        cache): a container must see them at the same paths."""
        cache = precision_cache_dir()
        cache.mkdir(parents=True, exist_ok=True)
        return tuple(sorted(version_targets(self.serves.models) | {cache.resolve()}))

    # -- facts -----------------------------------------------------------------------------------
    @property
    def lacks(self) -> Mapping[Capability, str]:
        return self.serves.LACKS

    @property
    def name(self) -> str:
        return self.serves.name

    @property
    def step_models(self) -> tuple[str, ...]:
        """Models whose statistics every measurement also reads (a pipeline's tuned models, a
        group's models)."""
        return self.serves.step_models

    @property
    def info(self) -> ServerInfo:
        return self.server.info

    @property
    def owns_server(self) -> bool:
        return self.server.owns_server

    @property
    def via_python(self) -> bool:
        return bool(self.served_via_python)

    @property
    def served_via_python(self) -> tuple[ModelSource, ...]:
        """The models served through the Python backend in place of the one they name."""
        return tuple(s.source for s in self.served_models.values() if s.via_python)

    @property
    def restarts(self) -> int:
        return self.server.restarts

    def builder_of(self, model: str) -> ConfigBuilder:
        """Configs for the served model ``model`` on this server (known once the server is up);
        with an entry, for the request shape's batch size (a group's classes bring their own)."""
        if model not in self._builders:
            self._builders[model] = ConfigBuilder(
                self.serves.source_of(model),
                self.info.capabilities,
                batch_size=self.request_shape.batch_size if self.serves.entry else 1,
            )
        return self._builders[model]

    @property
    def batch_dim_dynamic(self) -> bool:
        """Whether the entry's model file takes any batch size (an ONNX graph with a dynamic
        first dim)."""
        require(self.lacks, Capability.ONE_CLASS)
        return self.batch_dim_dynamic_of(self.name)

    def batch_dim_dynamic_of(self, model: str) -> bool:
        return self.builder_of(model).batch_dim_dynamic

    # -- lifetime --------------------------------------------------------------------------------
    def __enter__(self) -> TuningSession:
        self.server.__enter__()
        try:
            for source in self.serves.models:
                self.served_models[source.name] = self.server.add_model(source)
        except BaseException as err:
            self.server.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    def __exit__(self, *exc_info: Any) -> None:
        """Stop the server (see :meth:`Server.__exit__`)."""
        self.server.__exit__(*exc_info)

    def fault(self, err: ServerError) -> ServerDiedError | None:
        return self.server.fault(err)

    def restart(self, *, reload: bool = False) -> None:
        """Restart a dead server; with ``reload``, make the last load again (the shared model's
        config, or the endpoints).

        Without it the server comes back with nothing tuned loaded (the caller loads the next
        config): a config that may have brought the server down is not loaded again behind its
        back."""
        again = self._again
        self.server.restart()
        self._loaded, self._requests, self._class_requests, self._endpoints = None, [], {}, {}
        self._loaded_configs, self._again = {}, None
        if reload and again is not None:
            again()

    # -- configs ---------------------------------------------------------------------------------
    def prepare_precisions(
        self,
        precisions: list[str],
        *,
        accuracy: AccuracySettings | None = None,
        model: str | None = None,
        input_data: Sequence[Path] = (),
    ) -> dict[str, PrecisionCheck]:
        """Build and accuracy-check precision variants of the served model ``model`` (one
        model's session may leave it out); accepted ones become loadable.

        Variants are files placed beside the model in the working repository, so they need a
        server tritontune launched (a remote server reads its own repository). ``input_data``:
        what to judge them on instead of the request data (a workload's classes' files); the
        checks then name it, so an export rebuilds the variants from the same inputs. A
        pipeline's model is judged on what reaches it (:mod:`.pipeline_inputs`).
        """
        model = self.serves.precision_model(model)
        self._built = None
        if isinstance(self.serves, ServedPipeline):
            return self._pipeline_checks(self.serves.pipeline, model, precisions, accuracy, input_data)
        checks = self._checks_on(
            self.serves.source_of(model), self.builder_of(model), precisions, accuracy, input_data
        )
        if Capability.ENDPOINTS not in self.lacks:  # what an endpoint's copy links beside it
            self.precisions.update(checks)
        return checks

    def _pipeline_checks(
        self,
        pipeline: Pipeline,
        model: str,
        precisions: list[str],
        accuracy: AccuracySettings | None,
        input_data: Sequence[Path],
    ) -> dict[str, PrecisionCheck]:
        """A composing model's checks, judged on what reaches it (:mod:`.pipeline_inputs`):
        the request data (or ``input_data``) run through the steps before it on this server.
        Without request data, or for a BLS model's, its inputs are synthesized, with the same
        refusal of static INT8 on made-up integers as for one model."""
        if FP16_IO in precisions:
            raise InputError(
                f"precision {FP16_IO} of {model!r}: it changes the model's input and output "
                "types, which the pipeline's other models and clients fix; use fp16"
            )
        request_data = (
            joined_input_data(self.name, pipeline.config, input_data)
            if input_data
            else self.request_shape.input_data
        )
        captured: dict[Path, str] = {}
        if request_data is not None and not pipeline.bls:
            if self._loaded is None:
                self.load(Variant())  # every model in its own config
            capture = partial(captured_inputs, self.server.infer, pipeline, model)
            captured[capture(request_data)] = str(request_data)
            if accuracy is not None and accuracy.calibration_data is not None:
                calibration = capture(accuracy.calibration_data)
                captured[calibration] = str(accuracy.calibration_data)
                accuracy = dataclasses.replace(accuracy, calibration_data=calibration)
        judged_on = next(iter(captured)) if captured else None
        checks = self._prepare_precisions_of(
            pipeline.source(model), self.builder_of(model), precisions, accuracy, judged_on
        )
        before = models_before(pipeline, model)
        return {
            precision: check
            if precision == FP32  # the model itself: judged on nothing
            else dataclasses.replace(
                check,
                input_data=judged_on,
                data=described(check.data, captured, before, bls=pipeline.bls),
            )
            for precision, check in checks.items()
        }

    def _checks_on(
        self,
        source: ModelSource,
        builder: ConfigBuilder,
        precisions: list[str],
        accuracy: AccuracySettings | None,
        input_data: Sequence[Path],
    ) -> dict[str, PrecisionCheck]:
        """``source``'s checks on ``input_data`` (joined into one file), else on the request
        data."""
        if not input_data:
            return self._prepare_precisions_of(
                source, builder, precisions, accuracy, self.request_shape.input_data
            )
        joined = joined_input_data(source.name, source.base_config, input_data)
        checks = self._prepare_precisions_of(source, builder, precisions, accuracy, joined)
        return {
            p: check if p == FP32 else dataclasses.replace(check, input_data=joined)
            for p, check in checks.items()
        }

    def _prepare_precisions_of(
        self,
        source: ModelSource,
        builder: ConfigBuilder,
        precisions: list[str],
        accuracy: AccuracySettings | None,
        input_data: Path | None,
    ) -> dict[str, PrecisionCheck]:
        """``source``'s precision variants checked on ``input_data``, the accepted ones placed
        beside it in the working repository and allowed by its ``builder``."""
        if source.backend != ONNX_BACKEND:
            raise InputError(
                f"model {source.name!r} uses the {source.backend!r} backend: precision variants "
                "are built for ONNX models only"
            )
        if any(p != FP32 for p in precisions) and not self.owns_server:
            raise InputError(
                "precision variants are files tritontune places in the server's model repository; "
                "a remote server reads its own, so use --launch local (or docker)"
            )
        checks = prepare_precisions(
            source.model_file,
            source.base_config,
            precisions,
            input_data=input_data,
            accuracy=accuracy,
        )
        for precision, check in checks.items():
            if check.accepted and precision != FP32 and check.path is not None:
                filename = variant_filename(source.model_file.name, precision)
                self.server.repository.add_file(source, filename, check.path)
        builder.allow_precisions(
            {p: None if check.accepted else check.reason for p, check in checks.items()}
        )
        return checks

    def configs(self, variant: Variant) -> dict[str, ModelConfig]:
        """Every config ``variant`` stands for, by model, validated for this server (one
        model's; a pipeline's tuned models'; every model of a group, a model ``variant`` does
        not name in its own). The last ones are kept: a trial builds its configs to record
        them, then loads them."""
        if self._built is None or self._built[0] != variant:
            self._built = (variant, self.serves.configs(variant, self.builder_of))
        return {model: copy_config(config) for model, config in self._built[1].items()}

    def build(self, variant: Variant) -> ModelConfig:
        """The config of the model a single class of load calls (a BLS entry's tuned one; an
        ensemble's own: it has no knobs)."""
        require(self.lacks, Capability.ONE_CLASS)
        config = self.serves.entry_config(self.configs(variant))
        assert config is not None
        return config

    def load(self, variant: Variant) -> LoadReceipt:
        """Validate ``variant`` and switch the served models to it: each reloaded with its
        config, in the order the kind loads them (a pipeline's entry last: Triton checks an
        ensemble's graph against the models it now serves; a BLS model finds the models it
        calls loaded)."""
        configs = self.configs(variant)
        entry = self.serves.entry
        if entry is not None:
            entry_config = self.serves.entry_config(configs)
            assert entry_config is not None
            configs = {**{m: c for m, c in configs.items() if m != entry}, entry: entry_config}
        if self._endpoints:
            self._unload_endpoints()
        switch_s = 0.0
        for model, config in configs.items():
            served = self.served_models[model]
            switch_s += self.server.load_model(model, served.served_config(config))
        self._loaded, self._again = variant, partial(self.load, variant)
        self._loaded_configs = configs
        self._class_requests, self._endpoints = {}, {}
        self._requests = self._prepare(entry, configs[entry], self.request_shape) if entry else []
        return LoadReceipt(configs, switch_s)

    def _variant_files(self) -> dict[str, Path]:
        """File name -> each accepted precision variant of this model (what an endpoint links
        beside its copy of the model)."""
        return {
            variant_filename(self.source.model_file.name, p): check.path
            for p, check in self.precisions.items()
            if check.accepted and p != FP32 and check.path is not None
        }

    def load_endpoints(self, variants: Mapping[str, Variant]) -> LoadReceipt:
        """Serve the model as one endpoint per class instead of one shared model: ``NAME_class``,
        each with its own config (the export's endpoint naming), while the shared model is
        unloaded. A workload's class is then sent to the endpoint of its name (a client-side
        router); :meth:`load` goes back to the shared model."""
        require(self.lacks, Capability.ENDPOINTS)
        served = {}
        for role, variant in variants.items():
            source = dataclasses.replace(self.source, name=f"{self.name}_{role}")
            served[role] = (source, self.build(variant))
        receipt = self._serve_endpoints(served, self._variant_files())
        self._again = partial(self.load_endpoints, dict(variants))
        return receipt

    def load_routes(self, routes: Mapping[str, ModelSource]) -> LoadReceipt:
        """Serve models as they are (their own config.pbtxt, validated) and send each class of
        a workload to its own: ``check`` of a repository exported as one endpoint per class."""
        require(self.lacks, Capability.ENDPOINTS)
        configs: dict[str, ModelConfig] = {}
        for source in routes.values():
            if source.name not in configs:
                configs[source.name] = ConfigBuilder(source, self.info.capabilities).build(Variant())
        receipt = self._serve_endpoints(
            {role: (source, configs[source.name]) for role, source in routes.items()}
        )
        self._again = partial(self.load_routes, dict(routes))
        return receipt

    def _serve_endpoints(
        self,
        endpoints: Mapping[str, tuple[ModelSource, ModelConfig]],
        variant_files: Mapping[str, Path] | None = None,
    ) -> LoadReceipt:
        """Serve each endpoint's model with its config; ``variant_files`` (file name -> the
        precision variant built for the model) are linked beside each endpoint's copy."""
        if not self.owns_server:
            raise InputError("separate endpoints need a server tritontune launched (model files)")
        self._unload_endpoints()
        self.server.unload_model(self.name)
        self._loaded, self._requests = None, []
        switch_s = 0.0
        configs: dict[str, ModelConfig] = {}
        for role, (source, config) in endpoints.items():
            if source.name not in configs:
                served = self.server.add_model(source)
                for filename, path in (variant_files or {}).items():
                    self.server.repository.add_file(source, filename, path)
                switch_s += self.server.load_model(source.name, served.served_config(config))
                configs[source.name] = config
            self._endpoints[role] = (source.name, config)
        self._class_requests = {}
        return LoadReceipt(configs, switch_s)

    def _unload_endpoints(self) -> None:
        for name in {name for name, _ in self._endpoints.values()}:
            self.server.unload_model(name)
        self._endpoints = {}

    def _prepare(self, model: str, config: ModelConfig, shape: RequestShape) -> list[Any]:
        return prepare_requests(
            model,
            self.server.model_metadata(model),
            shape,
            batching=config.max_batch_size > 0,
            protocol=self.server.endpoint().protocol,
        )

    # -- measuring -------------------------------------------------------------------------------
    def measure(self, load: LoadSpec, settings: MeasureSettings | None = None) -> Measurement:
        """Measure the loaded config at ``load``; a server that died raises ServerDiedError."""
        require(self.lacks, Capability.ONE_CLASS)
        if not self._requests:
            raise ServerError("no config is loaded; call load() first")
        self.server.check_alive()
        engine: Callable[..., Measurement]
        if self.load_settings.engine == LoadEngine.PERF_ANALYZER:
            engine = partial(
                measure_with_perf_analyzer,
                workdir=self.server.work_dir / "perf_analyzer",
                step_models=self.step_models,
            )
        else:
            processes, max_processes = self._load_processes(load.mode, load.value)
            engine = partial(
                measure_load,
                # GPU gauges only where the server has GPUs: a CPU-only server publishes none.
                metrics_url=self.info.metrics_url if self.info.capabilities.gpu_count else None,
                processes=processes,
                max_processes=max_processes,
                step_models=self.step_models,
            )
        measurement = engine(
            self.server.endpoint(),
            self.name,
            self._requests,
            load,
            batch_size=self.request_shape.batch_size,
            settings=settings or self.settings,
            seed=self.request_shape.seed,
        )
        self.server.check_alive()
        self._learn_processes(load.mode, load.value, measurement)
        if measurement.latency.count == 0 and measurement.error_count:
            kind, count = max(measurement.errors.items(), key=lambda item: item[1])
            example = measurement.error_examples.get(kind) or "no message"
            raise ServerError(f"every request to {self.name!r} failed ({kind} x{count}): {example}")
        return measurement

    def _load_processes(self, kind: LoadMode, load: float) -> tuple[int, int | None]:
        """The load processes a level of ``kind`` at ``load`` starts with, and under
        ``--load-processes auto`` the most it may use (the cores the server leaves when it runs
        here; None for a fixed count). Auto starts where this session's levels taught it to
        (:class:`~tritontune.measure.load_processes.AutoProcesses`)."""
        if self.load_settings.processes is not None:
            return self.load_settings.processes, None
        if self._auto is None:
            limit = auto_processes_limit(server_is_local=self.info.launch != "remote")
            self._auto = AutoProcesses(limit)
        return self._auto.start(kind, load), self._auto.limit

    def _learn_processes(self, kind: LoadMode, load: float, level: ClientVerdict) -> None:
        if self._auto is not None and self.load_settings.processes is None:
            self._auto.learn(kind, load, level)

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement:
        """Measure every class of ``traffic`` at once, at ``total_rate`` req/s in all (each
        class its share, its own requests and priority): against the loaded config, or, after
        :meth:`load_endpoints`, each class against the endpoint named after it. With
        ``--load-processes auto`` a client-bound level is measured again with more load
        processes, as in :meth:`measure`."""
        require(self.lacks, Capability.TRAFFIC)
        self.load_settings.refuse_traffic()
        if self._loaded is None and not self._endpoints:
            raise ServerError("no config is loaded; call load() first")
        if set(self._class_requests) != {c.name for c in traffic.classes}:
            self._class_requests = {c.name: self._requests_for(c) for c in traffic.classes}
        self.server.check_alive()
        processes, max_processes = self._load_processes(LoadMode.RATE, total_rate)
        measurement = measure_traffic(
            self.server.endpoint(),
            traffic,
            self._class_requests,
            total_rate,
            settings=settings or self.settings,
            seed=self.request_shape.seed,
            processes=processes,
            max_processes=max_processes,
        )
        self.server.check_alive()
        self._learn_processes(LoadMode.RATE, total_rate, measurement)
        return measurement

    def _requests_for(self, traffic_class: TrafficClass) -> ClassRequests:
        """The class's own requests (its batch size, data, priority), for where it goes."""
        model, config = self._destination(traffic_class)
        return ClassRequests(model, self._prepare(model, config, traffic_class.request))

    def _destination(self, traffic_class: TrafficClass) -> tuple[str, ModelConfig]:
        """Where a class's requests go, and that model's config: the model it names (a
        group's class), else the endpoint named after it, else the shared model."""
        name = traffic_class.name
        if isinstance(self.serves, ModelGroup) or traffic_class.model is not None:
            model = traffic_class.model
            if not isinstance(self.serves, ModelGroup):
                raise InputError(
                    f"class {name!r} names the model it calls ({model!r}); one model's session "
                    "serves classes without `model:`"
                )
            if model is None or model not in self._loaded_configs:
                raise InputError(
                    f"class {name!r} calls model {model!r}, which this group does not serve "
                    f"(models: {', '.join(self.step_models)})"
                )
            return model, self._loaded_configs[model]
        if not self._endpoints:
            return self.name, self._loaded_configs[self.name]
        if name not in self._endpoints:
            raise InputError(
                f"no endpoint for the class {name!r} (endpoints: {', '.join(sorted(self._endpoints))})"
            )
        return self._endpoints[name]
