"""The bench of several models on one server, each class of a workload sent to the model it
names (``model:`` in the workload file).

Why a sibling of :class:`~tritontune.serving.pipeline_session.PipelineSession` rather than a
third kind of :class:`~tritontune.config.pipeline.Pipeline`: a pipeline is an *entry* model that
every request goes through (its figures are end to end, with one request shape), and its loads are
ordered (the composing models, then the entry Triton checks against them). A group has no entry:
each class calls its own model with its own requests, and no model depends on another. What the
two share is reused, not copied: the :class:`~tritontune.config.pipeline.PipelineVariant` (one
variant per model, so the search loop, the final rounds and the study keep a group's configs as
they keep a pipeline's), ``step_models`` (each measurement reads every model's statistics at the
same window edges: Triton's own figures per model, in ``TrafficMeasurement.server``), and all of
:class:`~tritontune.serving.session.TuningSession`: the server, restarts and faults, measuring a
traffic mix. The one thing a group answers differently is where a class's requests go
(:meth:`ModelGroupSession._requests_for`: to its model, with its request shape).

A group may tune some of its models only (``tuned``: ``search --model NAME``): the others are
served with their own configs and their classes sent and judged like the rest, so the tuned model
is measured beside the neighbours it shares the machine with.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Any

from tritontune.config.builder import ConfigBuilder
from tritontune.config.model_config import ModelConfig
from tritontune.config.pipeline import is_pipeline, per_model
from tritontune.config.repository import ModelSource, ServedModel, load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import ConfigError, InputError
from tritontune.measure.mixed import ClassRequests
from tritontune.measure.traffic import Traffic, TrafficClass, check_models
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck
from tritontune.serving.bench import Capability, LoadReceipt
from tritontune.serving.session import TuningSession, version_targets

GROUP_SEPARATOR = "+"
"""Between the tuned models' names in a group's name (``mlp_a+mlp_b``: the study's name)."""

_NO_ENDPOINTS = (
    "the classes of this workload name their models: each class already has its own model, so "
    "there are no endpoints to split (the endpoints layout is for one model's classes)"
)
_NO_ONE_CLASS = (
    "a group of models is measured with a workload's classes, each sent to its model (one "
    "class of load has no model to call)"
)


class ModelGroupSession(TuningSession):
    """Use as a context manager, like :class:`TuningSession` (see the module docstring).

    Its :attr:`source` is the first tuned model's, named for the group (``a+b``): the study's
    name and identity; the study's context (repository, version, files) is that model's, with
    every model's files beside (:attr:`models`: what ``export`` copies and checks, model by model).
    """

    LACKS = {Capability.ONE_CLASS: _NO_ONE_CLASS, Capability.ENDPOINTS: _NO_ENDPOINTS}

    def __init__(
        self, models: tuple[ModelSource, ...], tuned: tuple[str, ...] | None = None, **options: Any
    ) -> None:
        self.models = models
        names = tuple(m.name for m in models)
        self.tuned_models = tuned or names
        """The models whose configs are searched (the others keep their own)."""
        first = next(m for m in models if m.name == self.tuned_models[0])
        super().__init__(
            dataclasses.replace(first, name=GROUP_SEPARATOR.join(self.tuned_models)), **options
        )
        self.step_models = names
        self._served_models: dict[str, ServedModel] = {}
        self._builders: dict[str, ConfigBuilder] = {}
        self._loaded_configs: dict[str, ModelConfig] = {}

    def _configs_complete(self) -> bool:
        return all(m.base_config.input and m.base_config.output for m in self.models)

    def _linked_directories(self) -> tuple[Path, ...]:
        """Every model's files, and the precision cache (a tuned model's variants are linked
        from there): a container must see them at the same paths."""
        return tuple(sorted(set(super()._linked_directories()) | version_targets(self.models)))

    # -- facts -----------------------------------------------------------------------------------
    @property
    def via_python(self) -> bool:
        return bool(self.served_via_python)

    @property
    def served_via_python(self) -> tuple[ModelSource, ...]:
        return tuple(s.source for s in self._served_models.values() if s.via_python)

    def model_source(self, model: str) -> ModelSource:
        return next(m for m in self.models if m.name == model)

    def step_builder(self, model: str) -> ConfigBuilder:
        """Configs for model ``model`` on this server (known once it is up)."""
        if model not in self._builders:
            self._builders[model] = ConfigBuilder(self.model_source(model), self.info.capabilities)
        return self._builders[model]

    # -- lifetime --------------------------------------------------------------------------------
    def __enter__(self) -> ModelGroupSession:
        self.server.__enter__()
        try:
            for source in self.models:
                self._served_models[source.name] = self.server.add_model(source)
        except BaseException as err:
            self.server.__exit__(type(err), err, err.__traceback__)
            raise
        return self

    # -- configs ---------------------------------------------------------------------------------
    def build(self, variant: Variant) -> ModelConfig:
        raise ConfigError(
            f"{self.name!r} is a group of models: its configs are per model "
            f"({', '.join(self.step_models)})"
        )

    def configs(self, variant: Variant) -> dict[str, ModelConfig]:
        """Every served model's validated config for ``variant`` (a model it does not name keeps
        its own); a plain, empty ``Variant`` is every model's own config (the baseline)."""
        per = per_model(variant, f"{self.name!r} is a group of models", self.step_models)
        return {model: self.step_builder(model).build(per.of(model)) for model in self.step_models}

    def load(self, variant: Variant) -> LoadReceipt:
        """Reload every model with its config (in any order: no model depends on another)."""
        configs = self.configs(variant)
        switch_s = 0.0
        for model, config in configs.items():
            switch_s += self.server.load_model(model, self._served_models[model].served_config(config))
        self._loaded, self._again = variant, partial(self.load, variant)
        self._loaded_configs = configs
        self._class_requests = {}
        return LoadReceipt(configs, switch_s)

    def prepare_precisions(
        self,
        precisions: list[str],
        *,
        accuracy: AccuracySettings | None = None,
        model: str | None = None,
        input_data: Sequence[Path] = (),
    ) -> dict[str, PrecisionCheck]:
        """Build and accuracy-check precision variants of the group's model ``model``, judged on
        ``input_data`` (the files of the classes that call it)."""
        if model not in self.tuned_models:
            raise InputError(
                f"precision variants of group {self.name!r}: name one of its tuned models "
                f"({', '.join(self.tuned_models)})"
            )
        return self._checks_on(
            self.model_source(model), self.step_builder(model), precisions, accuracy, input_data
        )

    # -- measuring -------------------------------------------------------------------------------
    def _requests_for(self, traffic_class: TrafficClass) -> ClassRequests:
        """The class's own requests (its batch size, data, priority), for the model it names."""
        model = traffic_class.model
        if model not in self._loaded_configs:
            raise InputError(
                f"class {traffic_class.name!r} calls model {model!r}, which this group does not "
                f"serve (models: {', '.join(self.step_models)})"
            )
        config = self._loaded_configs[model]
        return ClassRequests(model, self._prepare(model, config, traffic_class.request))


def open_group_session(
    model_repository: Path, traffic: Traffic, model: str | None = None, **options: Any
) -> ModelGroupSession:
    """A :class:`ModelGroupSession` serving every model ``traffic``'s classes name (checked
    against ``model_repository``; not started yet), tuning them all, or only ``model``."""
    repository = Path(model_repository)
    present = [p.name for p in repository.iterdir() if p.is_dir()] if repository.is_dir() else []
    check_models(traffic, present, repository)
    if model is not None and model not in traffic.models:
        raise InputError(
            f"--model {model}: the classes of {traffic.source or 'the workload'} name the models "
            f"{', '.join(traffic.models)}; give one of them (tuned, the others served with their "
            "own configs beside it), or leave --model out to tune them all"
        )
    sources = []
    for name in traffic.models:
        source = load_model_source(repository, name)
        if is_pipeline(source.base_config):
            i, c = next((i, c) for i, c in enumerate(traffic.classes) if c.model == name)
            raise InputError(
                f"{traffic.source or 'workload'}: classes[{i}] ({c.name}): model: {name!r} is an "
                "ensemble; a pipeline among several models is not searched yet (search it alone "
                "with --model)"
            )
        sources.append(source)
    return ModelGroupSession(tuple(sources), (model,) if model else None, **options)
