"""What a session serves: one model, a pipeline, or a group of models.

One :class:`~tritontune.serving.session.TuningSession` measures all three; what differs is data,
kept here, not a subclass of the session: which models the server gets, in load order; which
models a variant's configs are for and where a single class of load goes; and what the kind
cannot do, declared before anything is launched (``LACKS``: :class:`Capability`). A group is not
a kind of :class:`~tritontune.config.pipeline.Pipeline`: a pipeline has an *entry* every request
goes through, a group none (each class calls its own model). They share the
:class:`~tritontune.config.pipeline.PipelineVariant` and the models whose statistics every
measurement reads (:attr:`Served.step_models`).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import ClassVar

from tritontune.config.builder import ConfigBuilder
from tritontune.config.model_config import ModelConfig, copy_config
from tritontune.config.pipeline import Pipeline, per_model
from tritontune.config.repository import ModelSource
from tritontune.config.variant import Variant
from tritontune.errors import InputError


class Capability(enum.Enum):
    """What a bench may be asked to do. Each kind of bench declares the ones it lacks, with why,
    before its server is launched (its ``LACKS``): a command that needs one is refused
    then, in that one line (:func:`require`), and the bench refuses it the same way, rather than
    each kind of bench overriding the member to raise."""

    ONE_CLASS = "one class of load"
    """:meth:`~tritontune.serving.bench.Bench.measure`: every request the same, to one model."""
    TRAFFIC = "a workload's classes"
    """:meth:`~tritontune.serving.bench.Bench.measure_traffic`."""
    ENDPOINTS = "one endpoint per class"
    """:meth:`~tritontune.serving.bench.Bench.load_endpoints`, and a repository exported that
    way checked as it is."""


def require(lacks: Mapping[Capability, str], capability: Capability) -> None:
    """Refuse ``capability`` where ``lacks`` (a bench's
    :attr:`~tritontune.serving.bench.Bench.lacks`, or what it serves' ``LACKS`` before it is
    made) says why it can't mean anything."""
    if capability in lacks:
        raise InputError(lacks[capability])


GROUP_SEPARATOR = "+"
"""Between the tuned models' names in a group's name (``mlp_a+mlp_b``: the study's name)."""

NO_CLASSES = (
    "a pipeline is measured end to end with one class of load; a workload's classes (each its "
    "own endpoint or model) are not searched for pipelines yet"
)
NO_ENDPOINTS = (
    "the classes of this workload name their models: each class already has its own model, so "
    "there are no endpoints to split (the endpoints layout is for one model's classes)"
)
NO_ONE_CLASS = (
    "a group of models is measured with a workload's classes, each sent to its model (one "
    "class of load has no model to call)"
)

Builders = Callable[[str], ConfigBuilder]
"""A tuned model's name -> its config builder on the running server."""


def declares_io(source: ModelSource) -> bool:
    """Whether ``source``'s config comes with its inputs and outputs (so Triton's auto-complete
    is off): ONNX models get them from the graph (load_model_source); a model of another backend
    whose config leaves them to Triton keeps auto-complete."""
    return bool(source.base_config.input and source.base_config.output)


def per_model_configs(
    variant: Variant, models: tuple[str, ...], builders: Builders, what: str
) -> dict[str, ModelConfig]:
    """Each of ``models``' configs for a variant of one variant per model (a plain, empty
    ``Variant``: every model's own); ``what`` says why another variant is refused."""
    per = per_model(variant, what, models)
    return {model: builders(model).build(per.of(model)) for model in models}


@dataclass(frozen=True)
class SingleModel:
    """One model: every capability (a single class, a workload's classes, one endpoint per
    class)."""

    source: ModelSource
    LACKS: ClassVar[Mapping[Capability, str]] = {}

    @property
    def name(self) -> str:
        return self.source.name

    @property
    def models(self) -> tuple[ModelSource, ...]:
        return (self.source,)

    @property
    def tuned_models(self) -> tuple[str, ...]:
        return (self.name,)

    @property
    def step_models(self) -> tuple[str, ...]:
        return ()

    @property
    def entry(self) -> str | None:
        return self.name

    def source_of(self, model: str) -> ModelSource:
        return self.source

    def configs_complete(self) -> bool:
        return declares_io(self.source)

    def configs(self, variant: Variant, builders: Builders) -> dict[str, ModelConfig]:
        return {self.name: builders(self.name).build(variant)}

    def entry_config(self, configs: Mapping[str, ModelConfig]) -> ModelConfig | None:
        return configs[self.name]

    def precision_model(self, model: str | None) -> str:
        if model not in (None, self.name):
            raise InputError(f"no model {model!r} here: this session tunes {self.name!r}")
        return self.name


@dataclass(frozen=True)
class ServedPipeline:
    """A pipeline: its composing models, then its entry (an ensemble, or a BLS model); requests
    go to the entry, end to end."""

    pipeline: Pipeline
    LACKS: ClassVar[Mapping[Capability, str]] = {
        Capability.TRAFFIC: NO_CLASSES,
        Capability.ENDPOINTS: NO_CLASSES,
    }

    @property
    def source(self) -> ModelSource:
        return self.pipeline.entry

    @property
    def name(self) -> str:
        return self.pipeline.name

    @property
    def models(self) -> tuple[ModelSource, ...]:
        return (*self.pipeline.models, self.pipeline.entry)

    @property
    def tuned_models(self) -> tuple[str, ...]:
        return self.pipeline.tuned_models

    @property
    def step_models(self) -> tuple[str, ...]:
        return self.pipeline.tuned_models

    @property
    def entry(self) -> str | None:
        return self.name

    def source_of(self, model: str) -> ModelSource:
        return self.pipeline.source(model)

    def configs_complete(self) -> bool:
        return declares_io(self.source)

    def configs(self, variant: Variant, builders: Builders) -> dict[str, ModelConfig]:
        """Each tuned model's config; a plain, empty ``Variant`` is every model's own."""
        return per_model_configs(variant, self.step_models, builders, f"{self.name!r} is a pipeline")

    def entry_config(self, configs: Mapping[str, ModelConfig]) -> ModelConfig | None:
        """A BLS model's tuned config; an ensemble's own (it has no knobs)."""
        return configs.get(self.name) or copy_config(self.source.base_config)

    def precision_model(self, model: str | None) -> str:
        if model is None or model not in self.step_models:
            raise InputError(
                f"precision variants of pipeline {self.name!r}: name one of its models "
                f"({', '.join(self.step_models)})"
            )
        return model


@dataclass(frozen=True)
class ModelGroup:
    """Several models on one server, each class of a workload sent to the model it names. Some
    may be tuned only (``tuned``: ``search --model NAME``): the others are served with their own
    configs, so a tuned model is measured beside the neighbours it shares the machine with.

    Its :attr:`source` is the first tuned model's, named for the group (``a+b``): the study's
    name and identity; the study's context (repository, version, files) is that model's, with
    every model's files beside (:attr:`models`: what ``export`` copies and checks)."""

    models: tuple[ModelSource, ...]
    tuned: tuple[str, ...] | None = None
    LACKS: ClassVar[Mapping[Capability, str]] = {
        Capability.ONE_CLASS: NO_ONE_CLASS,
        Capability.ENDPOINTS: NO_ENDPOINTS,
    }

    @property
    def tuned_models(self) -> tuple[str, ...]:
        """The models whose configs are searched (the others keep their own)."""
        return self.tuned or tuple(m.name for m in self.models)

    @property
    def source(self) -> ModelSource:
        first = self.source_of(self.tuned_models[0])
        return dataclasses.replace(first, name=self.name)

    @property
    def name(self) -> str:
        return GROUP_SEPARATOR.join(self.tuned_models)

    @property
    def step_models(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.models)

    @property
    def entry(self) -> str | None:
        return None

    def source_of(self, model: str) -> ModelSource:
        return next(m for m in self.models if m.name == model)

    def configs_complete(self) -> bool:
        return all(declares_io(m) for m in self.models)

    def configs(self, variant: Variant, builders: Builders) -> dict[str, ModelConfig]:
        """Every served model's config (a model ``variant`` does not name keeps its own); a
        plain, empty ``Variant`` is every model's own config (the baseline)."""
        what = f"{self.name!r} is a group of models"
        return per_model_configs(variant, self.step_models, builders, what)

    def entry_config(self, configs: Mapping[str, ModelConfig]) -> ModelConfig | None:
        return None

    def precision_model(self, model: str | None) -> str:
        if model is None or model not in self.tuned_models:
            raise InputError(
                f"precision variants of group {self.name!r}: name one of its tuned models "
                f"({', '.join(self.tuned_models)})"
            )
        return model


Served = SingleModel | ServedPipeline | ModelGroup
"""What a session serves (the module docstring)."""
