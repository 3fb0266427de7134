"""A pipeline's search space: every composing model's own space, searched together.

An ensemble has no knobs of its own; tuning it means tuning its composing models for the
ensemble's end-to-end figure. So the space of a pipeline is each composing model's space (the
same :func:`~tritontune.search.space.default_space` a model searched alone would get), side by
side: a point's names are ``MODEL/KNOB`` (``tokenizer/max_batch_size``), the sampler sees one
joint space, and :meth:`PipelineSpace.to_variant` gives a
:class:`~tritontune.config.pipeline.PipelineVariant` (a variant per model).

**Bottleneck first.** Most of a pipeline's time is spent in one step (a transformer behind a
tokenizer, a CNN behind an image decoder). A joint space of a dozen dimensions or more spreads a
budget of tens of trials over knobs that cannot move the end-to-end figure: a faster tokenizer
does not help while requests queue for the encoder. So the search starts *focused*: while the
study has fewer than ``focus_trials`` trials, only the bottleneck's knobs are proposed (the
others keep their own config); after that, every step's knobs are. The bottleneck is the step
whose queue plus compute time per request was the largest in the baseline's measurement
(:func:`tritontune.study.figures.bottleneck`), so the figure that picks it is Triton's own
statistics for each composing model, not a guess from the model files. Searching the rest
jointly afterwards still lets a cheap step's batching follow the bottleneck's (a tokenizer
batching as much as the encoder does), which the focus alone would miss.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from tritontune.config.pipeline import Pipeline, PipelineVariant
from tritontune.config.validate import TargetCapabilities
from tritontune.errors import InputError
from tritontune.search.instance_budget import InstanceBudget
from tritontune.search.space import Choice, Dimension, SearchSpace, default_space

SEPARATOR = "/"
"""Between a model's name and its knob in a point (a Triton model name never holds one: it is a
directory's name)."""


def knob_name(model: str, knob: str) -> str:
    """``tokenizer/max_batch_size``: how a point names one model's knob."""
    return f"{model}{SEPARATOR}{knob}"


def split_name(name: str) -> tuple[str, str]:
    """(model, knob) of a point's name."""
    model, separator, knob = name.partition(SEPARATOR)
    if not separator:
        raise InputError(f"{name!r} names no composing model (expected MODEL{SEPARATOR}KNOB)")
    return model, knob


@dataclass(frozen=True)
class PipelineSpace(SearchSpace):
    """Each composing model's space; :attr:`dimensions` holds them all, named ``MODEL/KNOB``
    (what the sampler and the snapping of ordered choices see). Build with :meth:`of`."""

    parts: tuple[tuple[str, SearchSpace], ...] = ()
    """(composing model, its space), in the pipeline's order."""
    calls: bool = False
    """The first part is a BLS model that calls the others (its compute includes theirs)."""
    focus: str | None = None
    """The bottleneck model, searched alone for the first :attr:`focus_trials` trials."""
    focus_trials: int = 0
    budget: InstanceBudget | None = None
    """The instances the models share (a group of models on one machine): a point over it is
    clamped (:mod:`tritontune.search.instance_budget`). None: each model's own range."""

    @classmethod
    def of(
        cls,
        parts: Mapping[str, SearchSpace],
        *,
        calls: bool = False,
        budget: InstanceBudget | None = None,
    ) -> PipelineSpace:
        dimensions = {
            knob_name(model, name): dimension
            for model, space in parts.items()
            for name, dimension in space.dimensions.items()
        }
        return cls(dimensions, tuple(parts.items()), calls, budget=budget)

    def knobs_by_model(self, point: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """A point's knobs, per model (``MODEL/KNOB`` split); every model has an entry."""
        knobs: dict[str, dict[str, Any]] = {model: {} for model in self.models}
        for name, value in point.items():
            model, knob = split_name(name)
            if model not in knobs:
                raise InputError(
                    f"{name!r}: no composing model {model!r} (models: {', '.join(self.models)})"
                )
            knobs[model][knob] = value
        return knobs

    def within_budget(self, variant: PipelineVariant) -> PipelineVariant:
        """``variant`` clamped to :attr:`budget` (as it is without one)."""
        return self.budget.clamp(variant) if self.budget is not None else variant

    @property
    def models(self) -> tuple[str, ...]:
        return tuple(model for model, _ in self.parts)

    def part(self, model: str) -> SearchSpace:
        return dict(self.parts)[model]

    def focused_on(self, model: str | None, trials: int) -> PipelineSpace:
        """This space, proposing only ``model``'s knobs while the study has fewer than
        ``trials`` trials (``model`` None: no focus)."""
        if model is not None and model not in self.models:
            raise InputError(f"no composing model {model!r} (models: {', '.join(self.models)})")
        return dataclasses.replace(self, focus=model, focus_trials=trials if model else 0)

    def suggest(self, trial: optuna.Trial, prefix: str = "") -> dict[str, Any]:
        point: dict[str, Any] = {}
        focused = self.focus is not None and trial.number < self.focus_trials
        for model, space in self.parts:
            if focused and model != self.focus:
                continue  # keeps its own config while the bottleneck is searched alone
            knobs = space.suggest(trial, prefix=prefix + knob_name(model, ""))
            point.update({knob_name(model, knob): value for knob, value in knobs.items()})
        return point

    def to_variant(self, point: dict[str, Any]) -> PipelineVariant:
        knobs = self.knobs_by_model(point)
        return self.within_budget(
            PipelineVariant(
                models=tuple((model, space.to_variant(knobs[model])) for model, space in self.parts)
            )
        )

    def replace(self, name: str, dimension: Dimension | None) -> PipelineSpace:
        model, knob = split_name(name)
        parts = {m: (s.replace(knob, dimension) if m == model else s) for m, s in self.parts}
        return dataclasses.replace(
            PipelineSpace.of(parts, calls=self.calls, budget=self.budget),
            focus=self.focus,
            focus_trials=self.focus_trials,
        )

    def describe(self) -> dict[str, str]:
        return {
            knob_name(model, name): text
            for model, space in self.parts
            for name, text in space.describe().items()
        }

    def to_dict(self) -> dict[str, Any]:
        """Per composing model, its space as :meth:`SearchSpace.to_dict` writes it (the focus
        is how the space is walked, not what it holds: a resumed search may walk it otherwise)."""
        return {model: space.to_dict() for model, space in self.parts}


def default_pipeline_space(
    pipeline: Pipeline,
    target: TargetCapabilities,
    *,
    slo_p99_s: float,
    batch_dims_dynamic: Mapping[str, bool],
    precision_variants: bool = False,
) -> PipelineSpace:
    """Each tuned model's :func:`default_space`; with ``precision_variants`` (a server
    tritontune launched), an ONNX model's precision is searched too (``MODEL/precision``, each
    variant checked on what reaches that model). A composing model's ``max_batch_size`` stays
    at or above the entry's:
    Triton refuses an ensemble that lets a client send batches one of its models cannot take (a
    BLS model passing its batch on would fail the same way), and the entry's limit is the
    user's contract with their clients, so a BLS model's own ``max_batch_size`` is kept too.
    Batches smaller than that are still formed: the batcher's delay, not the limit, decides how
    many requests it waits for."""
    ensemble_limit = pipeline.config.max_batch_size
    parts: dict[str, SearchSpace] = {}
    for model in pipeline.tuned_models:
        source = pipeline.source(model)
        space = default_space(
            source.base_config,
            target,
            slo_p99_s=slo_p99_s,
            batch_dim_dynamic=batch_dims_dynamic.get(model, False),
            precision_variants=precision_variants,
        )
        sizes = space.dimensions.get("max_batch_size")
        if model == pipeline.name and isinstance(sizes, Choice):
            space = space.replace("max_batch_size", Choice((ensemble_limit,)))
        elif ensemble_limit > 0 and isinstance(sizes, Choice):
            allowed = tuple(size for size in sizes.values if size >= ensemble_limit)
            space = space.replace("max_batch_size", Choice(allowed or (ensemble_limit,)))
        parts[model] = space
    return PipelineSpace.of(parts, calls=pipeline.bls)


def group_space(parts: Mapping[str, SearchSpace], budget: InstanceBudget) -> PipelineSpace:
    """The joint space of models served side by side on one machine (a workload whose classes
    name their models): each model's own space, its instance counts narrowed to what fits the
    shared ``budget`` beside the others (:meth:`InstanceBudget.narrow`), and points over the budget
    clamped. No focus: each model serves classes of its own, so none is the others' bottleneck."""
    return PipelineSpace.of(budget.narrow(parts), budget=budget)
