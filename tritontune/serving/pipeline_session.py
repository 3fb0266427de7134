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

Precision variants of its ONNX models are built and checked on what reaches each model: the
request data run through the steps before it (:meth:`PipelineSession.prepare_precisions`). What a
pipeline does not do yet: a workload's classes (endpoints, several models each with its own
class); they are refused with one line.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from tritontune.config.builder import ConfigBuilder
from tritontune.config.model_config import ModelConfig, copy_config
from tritontune.config.pipeline import (
    LATEST_VERSION,
    Pipeline,
    load_bls_pipeline,
    load_pipeline,
    per_model,
)
from tritontune.config.repository import ModelSource, ServedModel
from tritontune.config.variant import FP16_IO, FP32, Variant
from tritontune.errors import InputError
from tritontune.measure.inputs import read_input_data
from tritontune.precision.prepare import (
    AccuracySettings,
    PrecisionCheck,
    cached_input_data,
    config_input_specs,
    joined_input_data,
)
from tritontune.serving.bench import Capability, LoadReceipt
from tritontune.serving.session import TuningSession, version_targets

NO_CLASSES = (
    "a pipeline is measured end to end with one class of load; a workload's classes (each its "
    "own endpoint or model) are not searched for pipelines yet"
)


class PipelineSession(TuningSession):
    """Use as a context manager, like :class:`TuningSession` (see the module docstring)."""

    LACKS = {Capability.TRAFFIC: NO_CLASSES, Capability.ENDPOINTS: NO_CLASSES}

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
        self,
        precisions: list[str],
        *,
        accuracy: AccuracySettings | None = None,
        model: str | None = None,
        input_data: Sequence[Path] = (),
    ) -> dict[str, PrecisionCheck]:
        """Build and accuracy-check precision variants of composing model ``model``.

        A composing model does not take the client's requests: it takes what the steps before
        it computed (token ids, not text). So with ``--input-data``, its inputs are *captured*:
        every request sample is run through the steps before it on this server (each model in
        its own config) and what reaches ``model`` is written to a file
        (:meth:`_captured_inputs`), on which the variants are calibrated and judged as a model
        searched alone is on the user's file. Without one (or for a BLS model, whose calls are
        in its code), the inputs are synthesized, with the same refusal of static INT8 on
        made-up integers as for one model.
        """
        if model is None or model not in self.step_models:
            raise InputError(
                f"precision variants of pipeline {self.name!r}: name one of its models "
                f"({', '.join(self.step_models)})"
            )
        if FP16_IO in precisions:
            raise InputError(
                f"precision {FP16_IO} of {model!r}: it changes the model's input and output "
                "types, which the pipeline's other models and clients fix; use fp16"
            )
        source = self.step_source(model)
        request_data = (
            joined_input_data(self.name, self.pipeline.config, input_data)
            if input_data
            else self.request_shape.input_data
        )
        captured: dict[Path, str] = {}
        if request_data is not None and not self.pipeline.bls:
            captured[self._captured_inputs(model, request_data)] = str(request_data)
            if accuracy is not None and accuracy.calibration_data is not None:
                calibration = self._captured_inputs(model, accuracy.calibration_data)
                captured[calibration] = str(accuracy.calibration_data)
                accuracy = dataclasses.replace(accuracy, calibration_data=calibration)
        # what the model is judged on: its captured inputs; a BLS model's calls are in its
        # code, so nothing is captured and its inputs are synthesized
        judged_on = next(iter(captured)) if captured else None
        checks = self._prepare_precisions_of(
            source, self.step_builder(model), precisions, accuracy, judged_on
        )
        before = self._models_before(model)
        return {
            precision: check
            if precision == FP32  # the model itself: judged on nothing
            else dataclasses.replace(
                check,
                input_data=judged_on,
                data=_described(check.data, captured, before, bls=self.pipeline.bls),
            )
            for precision, check in checks.items()
        }

    def _models_before(self, model: str) -> tuple[str, ...]:
        """The composing models whose steps run before ``model``'s first step."""
        before: list[str] = []
        for step in self.pipeline.steps:
            if step.model == model:
                break
            before.append(step.model)
        return tuple(dict.fromkeys(before))

    def _captured_inputs(self, model: str, request_data: Path) -> Path:
        """``model``'s inputs for every sample of ``request_data`` (the ensemble's inputs, in
        ``--input-data`` format), as the steps before it compute them on this server, written
        to a file of the same format in the precision cache (named by its contents, so the
        same inputs make the same file and a variant built on them is a cache hit)."""
        if self._loaded is None:
            self.load(Variant())  # every model in its own config
        config = self.pipeline.config
        batching = config.max_batch_size > 0
        samples = read_input_data(
            request_data, config_input_specs(config), batch_size=1, batching=batching
        )
        first = next(i for i, step in enumerate(self.pipeline.steps) if step.model == model)
        steps = self.pipeline.steps[: first + 1]
        inputs: list[dict[str, np.ndarray]] = []
        for sample in samples:
            tensors: dict[str, np.ndarray] = dict(sample)
            for step in steps[:-1]:
                outputs = self.server.infer(
                    step.model,
                    {name: tensors[tensor] for name, tensor in step.input_map.items()},
                    list(step.output_map),
                    version="" if step.version == LATEST_VERSION else str(step.version),
                )
                tensors.update({step.output_map[name]: value for name, value in outputs.items()})
            reached = {name: tensors[tensor] for name, tensor in steps[-1].input_map.items()}
            inputs.append({n: v[0] if batching else v for n, v in reached.items()})
        return cached_input_data(model, inputs)


def _described(data: str, captured: dict[Path, str], before: tuple[str, ...], *, bls: bool) -> str:
    """Where a composing model's inputs came from, in words: a captured file is named by the
    request data it came from and the models it went through."""
    for path, origin in captured.items():
        through = f"through {', '.join(before)}" if before else "as sent to the pipeline"
        data = data.replace(str(path), f"{origin} ({through})")
    if bls and not captured:
        data += " (a BLS model's calls are in its code: its models' inputs are not captured)"
    return data


def open_pipeline_session(
    model_repository: Path, model: str, composing: tuple[str, ...] = (), **options: Any
) -> PipelineSession:
    """A :class:`PipelineSession` for ``model`` of ``model_repository`` (validated, not started
    yet): an ensemble, or with ``composing``, a BLS model calling those models."""
    repository = Path(model_repository)
    if composing:
        return PipelineSession(load_bls_pipeline(repository, model, composing), **options)
    return PipelineSession(load_pipeline(repository, model), **options)
