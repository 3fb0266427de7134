"""The bench of a pipeline: an entry model (an ensemble, or a BLS model) and its composing
models on one server.

A :class:`PipelineSession` is a :class:`~tritontune.serving.session.TuningSession` whose model is
the pipeline's entry: requests go to it (end to end, as a client of the pipeline sends them),
and a :class:`~tritontune.config.pipeline.PipelineVariant` is loaded by reloading each composing
model with its own config, then the entry (a BLS model with its tuned config; an ensemble as
it is). Every measurement also reads each tuned model's statistics at the same window edges
(:attr:`Measurement.steps`), which is where an end-to-end request's time went, step by step (a
BLS model's compute includes the calls it waits for). Everything else (the server, restarts,
faults, measuring, the log) is the session's. What is searched is every tuned model's space side
by side (:mod:`tritontune.search.pipeline_space`; a space file changes it model by model).

What a pipeline does not do yet: precision variants of its ONNX models, and a workload's classes
(endpoints, several models each with its own class); both are refused with one line.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from tritontune.config.builder import ConfigBuilder
from tritontune.config.model_config import ModelConfig, copy_config
from tritontune.config.pipeline import Pipeline, load_bls_pipeline, load_pipeline, per_model
from tritontune.config.repository import ModelSource, ServedModel
from tritontune.config.variant import Variant
from tritontune.errors import InputError
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import Traffic
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck
from tritontune.serving.bench import LoadReceipt
from tritontune.serving.session import TuningSession, version_targets

_NO_CLASSES = (
    "a pipeline is measured end to end with one class of load; a workload's classes (each its "
    "own endpoint or model) are not searched for pipelines yet"
)


class PipelineSession(TuningSession):
    """Use as a context manager, like :class:`TuningSession` (see the module docstring)."""

    def __init__(self, pipeline: Pipeline, **options: Any) -> None:
        super().__init__(pipeline.entry, **options)
        self.pipeline = pipeline
        self.step_models = pipeline.tuned_models
        self._served_steps: dict[str, ServedModel] = {}
        self._builders: dict[str, ConfigBuilder] = {}

    def _linked_directories(self) -> tuple[Path, ...]:
        """Where every composing model's files lead (and the ensemble's, an empty version)."""
        targets = set(super()._linked_directories()) | version_targets(self.pipeline.models)
        return tuple(sorted(targets))

    # -- facts -----------------------------------------------------------------------------------
    @property
    def via_python(self) -> bool:
        return bool(self.served_via_python)

    @property
    def served_via_python(self) -> tuple[ModelSource, ...]:
        return tuple(s.source for s in self._served_steps.values() if s.via_python)

    def step_source(self, model: str) -> ModelSource:
        return self.pipeline.source(model)

    def step_builder(self, model: str) -> ConfigBuilder:
        """Configs for composing model ``model`` on this server (known once it is up)."""
        if model not in self._builders:
            self._builders[model] = ConfigBuilder(
                self.step_source(model),
                self.info.capabilities,
                batch_size=self.request_shape.batch_size,
            )
        return self._builders[model]

    # -- lifetime --------------------------------------------------------------------------------
    def __enter__(self) -> PipelineSession:
        self.server.__enter__()
        try:
            for source in self.pipeline.models:
                self._served_steps[source.name] = self.server.add_model(source)
            self.served = self.server.add_model(self.source)
        except BaseException as err:
            self.server.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    # -- configs ---------------------------------------------------------------------------------
    def build(self, variant: Variant) -> ModelConfig:
        """The entry's config: a BLS model's tuned one; an ensemble's own (it has no knobs;
        :meth:`configs` has the models')."""
        configs = self.configs(variant)
        return configs.get(self.name) or copy_config(self.source.base_config)

    def configs(self, variant: Variant) -> dict[str, ModelConfig]:
        """Each tuned model's validated config for ``variant``; a plain, empty ``Variant`` is
        every model's own config."""
        per = per_model(variant, f"{self.name!r} is a pipeline", self.step_models)
        return {model: self.step_builder(model).build(per.of(model)) for model in self.step_models}

    def load(self, variant: Variant) -> LoadReceipt:
        """Reload every composing model with its config, then the entry (Triton checks an
        ensemble's graph against the models it now serves, batch sizes included; a BLS model
        finds the models it calls loaded)."""
        configs = self.configs(variant)
        entry = configs.pop(self.name, None) or copy_config(self.source.base_config)
        switch_s = 0.0
        for model, config in configs.items():
            served = self._served_steps[model]
            switch_s += self.server.load_model(model, served.served_config(config))
        assert self.served is not None
        switch_s += self.server.load_model(self.name, self.served.served_config(entry))
        self._loaded, self._again = variant, partial(self.load, variant)
        self._class_requests, self._endpoints = {}, {}
        self._requests = self._prepare(self.name, entry, self.request_shape)
        return LoadReceipt({**configs, self.name: entry}, switch_s)

    def prepare_precisions(
        self, precisions: list[str], *, accuracy: AccuracySettings | None = None
    ) -> dict[str, PrecisionCheck]:
        raise InputError(
            "precision variants of a pipeline's composing models are not searched yet; "
            "search the ONNX model alone for its precision, then the pipeline"
        )

    def load_endpoints(self, variants: Any) -> LoadReceipt:
        raise InputError(_NO_CLASSES)

    def load_routes(self, routes: Any) -> LoadReceipt:
        raise InputError(_NO_CLASSES)

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement:
        raise InputError(_NO_CLASSES)


def open_pipeline_session(
    model_repository: Path, model: str, composing: tuple[str, ...] = (), **options: Any
) -> PipelineSession:
    """A :class:`PipelineSession` for ``model`` of ``model_repository`` (validated, not started
    yet): an ensemble, or with ``composing``, a BLS model calling those models."""
    repository = Path(model_repository)
    if composing:
        return PipelineSession(load_bls_pipeline(repository, model, composing), **options)
    return PipelineSession(load_pipeline(repository, model), **options)
