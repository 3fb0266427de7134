"""A pipeline's search space: every composing model's own space, searched together.

An ensemble has no knobs of its own, so a pipeline's space is each composing model's default
space side by side: a point's names are ``MODEL/KNOB``, the sampler sees one joint space, and
:meth:`PipelineSpace.to_variant` gives a :class:`~tritontune.config.pipeline.PipelineVariant`. A
space file is keyed by model, each value what a model's own space file holds
(:func:`apply_model_spaces`; the same for several models on one server, :func:`group_space`).
The search starts *focused* on the bottleneck, the step whose queue plus compute time per request
was the largest in the baseline by Triton's own statistics
(:func:`tritontune.study.figures.bottleneck`): a faster tokenizer does not help while requests
queue for the encoder, so for ``focus_trials`` trials only its knobs are proposed; then every
step's are, so a cheap step's batching can follow the bottleneck's. See
``docs/concepts/pipelines.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from tritontune.config.pipeline import Pipeline, PipelineVariant
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import FP32
from tritontune.errors import InputError
from tritontune.search.instance_budget import InstanceBudget, fixed_instances
from tritontune.search.space import (
    DIMENSIONS,
    SEPARATOR,
    SETTING_KEYS,
    Choice,
    Dimension,
    SearchSpace,
    SpaceSource,
    apply_space_mapping,
    default_space,
    is_fixed,
)


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
    pinned: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """(model, the knobs a space file fixed for it): kept while the focus searches another
    model alone, which otherwise leaves a model its own config (:func:`apply_pipeline_space`)."""

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
        return cls(dimensions, parts=tuple(parts.items()), calls=calls, budget=budget)

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
        """``variant`` clamped to :attr:`budget` (as it is without one); a model whose space
        fixes its instance count keeps it."""
        if self.budget is None:
            return variant
        fixed = [model for model, space in self.parts if fixed_instances(space)]
        return self.budget.clamp(variant, keep=fixed)

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
                space = self._pins(model)  # its own config while the bottleneck is searched alone
            knobs = space.suggest(trial, prefix=prefix + knob_name(model, ""))
            point.update({knob_name(model, knob): value for knob, value in knobs.items()})
        return point

    def _pins(self, model: str) -> SearchSpace:
        """The knobs a space file fixed for ``model`` (one value each: nothing for the sampler
        to ask): the delay and preferred sizes only where batching is fixed too, and preferred
        sizes only with the batch size they derive from (else they would change what its own
        config leaves alone)."""
        part = self.part(model)
        names = {
            name
            for name in dict(self.pinned).get(model, ())
            if name in part.dimensions and is_fixed(part.dimensions[name])
        }
        if "dynamic_batching" not in names:
            names -= {"max_queue_delay", "preferred_batch_size"}
        if "max_batch_size" not in names:
            names.discard("preferred_batch_size")
        return SearchSpace({k: v for k, v in part.dimensions.items() if k in names})

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
        rebuilt = PipelineSpace.of(parts, calls=self.calls, budget=self.budget)
        return dataclasses.replace(self, dimensions=rebuilt.dimensions, parts=rebuilt.parts)

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


def apply_model_spaces(
    source: SpaceSource,
    parts: Mapping[str, SearchSpace],
    *,
    owner: str,
    untuned: Mapping[str, str] | None = None,
) -> dict[str, SearchSpace]:
    """``parts`` (each tuned model's space) with ``source``'s mapping of each model it names
    applied to that model's space, as a space file of the model alone would be
    (:func:`~tritontune.search.space.apply_space_mapping`); models it does not name keep theirs.

    ``owner`` names what the models make up in errors (``pipeline``, ``group``); ``untuned``:
    models the file may not name, each with the reason (an ensemble has no knobs of its own).
    A model's ``accuracy_kind`` is refused (``--accuracy-kind`` is read for every model), and so
    are precision variants where the model's space has none (a model of another backend, a
    group's models)."""
    return _apply_model_spaces(source, parts, owner, untuned or {})[0]


def _apply_model_spaces(
    source: SpaceSource, parts: Mapping[str, SearchSpace], owner: str, untuned: Mapping[str, str]
) -> tuple[dict[str, SearchSpace], dict[str, tuple[str, ...]]]:
    """:func:`apply_model_spaces`, and the knobs the file fixed (one value), by model."""
    data = source.read()
    if data is None:
        return dict(parts), {}
    where, models = source.where, ", ".join(parts)

    def keyed(knob: str) -> str:
        return f"a {owner}'s space is keyed by model: MODEL: {{{knob}: ...}}; models: {models}"

    no_accuracy = (
        "not read per model; give --accuracy-kind (by output name, or *), which every model's "
        "precision checks read"
    )
    if not isinstance(data, dict):
        raise InputError(f"{where}: {keyed('instance_count')}")
    applied, pinned = dict(parts), {}
    for key, mapping in data.items():
        name = str(key)
        if name in untuned:
            raise InputError(f"{where}: {name}: {untuned[name]}; models: {models}")
        if name not in parts:
            if name in SETTING_KEYS:
                raise InputError(f"{where}: {name}: {no_accuracy}")
            if name in DIMENSIONS:
                raise InputError(f"{where}: {name}: {keyed(name)}")
            raise InputError(f"{where}: {name}: not a model of the {owner}; models: {models}")
        at = f"{where}: {name}"
        if not isinstance(mapping, dict):
            raise InputError(
                f"{at}: expected a mapping of dimension names to values, e.g. "
                f"{name}: {{instance_count: 1}}"
            )
        settings = [setting for setting in SETTING_KEYS if setting in mapping]
        if settings:
            raise InputError(f"{at}: {settings[0]}: {no_accuracy}")
        space = apply_space_mapping(at, mapping, parts[name])
        precision = space.dimensions.get("precision")
        if "precision" not in parts[name].dimensions and precision not in (None, _FP32_ONLY):
            raise InputError(
                f"{at}: precision: {name!r} has no precision variants to search (they are built "
                f"for the ONNX models of a pipeline on a server tritontune launched, not for a "
                f"{owner}'s other models); fp32 alone is allowed"
            )
        applied[name] = space
        pinned[name] = tuple(k for k in mapping if k in DIMENSIONS and is_fixed(space.dimensions[k]))
    return applied, pinned


_FP32_ONLY = Choice((str(FP32),))


def apply_pipeline_space(source: SpaceSource, space: PipelineSpace, pipeline: Pipeline) -> PipelineSpace:
    """``space`` (the pipeline's :func:`default_pipeline_space`) with ``source``'s changes,
    per model (:func:`apply_model_spaces`); its calls, budget and focus are kept. The file is
    held to the default's rules: a composing model's ``max_batch_size`` at or above the entry's,
    a BLS model's own kept; a file that asks otherwise is refused, naming the model and why. The
    knobs it fixes are :attr:`PipelineSpace.pinned`: a model keeps them while the search focuses
    on another."""
    untuned = (
        {}
        if pipeline.bls
        else {
            pipeline.name: f"{pipeline.name!r} is the ensemble: it has no knobs of its own (Triton "
            "refuses instances or a batcher on it), its composing models are tuned"
        }
    )
    parts, pinned = _apply_model_spaces(source, dict(space.parts), "pipeline", untuned)
    for model, part in parts.items():
        _check_batch_limit(f"{source.where}: {model}: max_batch_size", pipeline, model, part)
    applied = PipelineSpace.of(parts, calls=space.calls, budget=space.budget)
    return dataclasses.replace(
        space,
        dimensions=applied.dimensions,
        parts=applied.parts,
        pinned=tuple((model, knobs) for model, knobs in pinned.items() if knobs),
    )


def _check_batch_limit(where: str, pipeline: Pipeline, model: str, space: SearchSpace) -> None:
    """Refuse ``model``'s batch sizes where :func:`default_pipeline_space` would not give them."""
    sizes = space.dimensions.get("max_batch_size")
    if not isinstance(sizes, Choice):
        return
    limit = pipeline.config.max_batch_size
    if model == pipeline.name:
        if sizes.values != (limit,):
            raise InputError(
                f"{where}: a BLS model's own max_batch_size is its clients' contract: it stays "
                f"{limit} (its config's)"
            )
        return
    below = [str(size) for size in sizes.values if limit > 0 and size < limit]
    if below:
        raise InputError(
            f"{where}: {', '.join(below)} below the entry's max_batch_size {limit}: Triton refuses "
            f"a pipeline that lets a client send a batch one of its models cannot take (give "
            f"sizes of {limit} or more)"
        )


def apply_group_space(
    source: SpaceSource,
    parts: Mapping[str, SearchSpace],
    budget: InstanceBudget,
    *,
    untuned: Mapping[str, str] | None = None,
) -> PipelineSpace:
    """:func:`group_space` of ``parts`` with ``source``'s changes per model
    (:func:`apply_model_spaces`), applied before the instance counts are narrowed to the
    ``budget``; fixed counts (or ranges' low ends) that do not fit it together are refused."""
    applied = apply_model_spaces(source, parts, owner="group", untuned=untuned)
    budget.check_fits(applied, source.where)
    return group_space(applied, budget)
