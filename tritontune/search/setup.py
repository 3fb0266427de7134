"""What every search does before its first trial: the sampler, the study's space and context,
and the check that a worker's figures may join the study.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import asdict

import optuna

from tritontune.config.variant import Variant
from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo, describe_host
from tritontune.measure.measurement import MeasureSettings
from tritontune.search.instance_budget import InstanceBudget, instances_of
from tritontune.search.pipeline_space import (
    PipelineSpace,
    apply_group_space,
    apply_pipeline_space,
    default_pipeline_space,
    group_space,
)
from tritontune.search.sampler import snapping
from tritontune.search.space import SearchSpace, SpaceSource, apply_space, default_space
from tritontune.serving.bench import Bench
from tritontune.serving.served import ModelGroup, ServedPipeline
from tritontune.study.handle import TuningStudy
from tritontune.study.records import RecordedRequestShape, StudyContext


def make_sampler(
    trials: int | None, seed: int | None, sampler: optuna.samplers.BaseSampler | None = None
) -> optuna.samplers.BaseSampler:
    """TPE with a short random start (a search is budgeted in tens of trials, not hundreds), or
    the given ``sampler``."""
    if sampler is not None:
        return sampler
    startup = min(10, max(3, (trials or 30) // 3))
    with warnings.catch_warnings():  # TPE's ``group`` option is marked experimental
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed,
            n_startup_trials=startup,
            multivariate=True,
            group=True,  # batching knobs exist only when batching is on
        )


def use_space(study: TuningStudy, space: SearchSpace, *, what: str = "--space") -> None:
    """Sample ``space`` (ordered choices snapped) and keep it: a new study keeps its space; a
    resumed one must search the same space."""
    study.optuna_study.sampler = snapping(study.optuna_study.sampler, space)
    recorded = study.recorded_space()
    if not study.resumed or recorded is None:
        study.save_space(space.to_dict())
    elif recorded != space.to_dict():
        raise InputError(
            f"study {study.name!r} in {study.url} searched another space "
            f"({recorded}); this run's is {space.to_dict()}: use the same {what}, or another --study"
        )


def space_for(bench: Bench, slo_p99_s: float, space_source: SpaceSource | None = None) -> SearchSpace:
    """The default space for the bench's model and server, with ``space_source``'s changes.

    Precision variants are in it for an ONNX model on a server tritontune launched (a remote
    server can't be given the variant files). A pipeline's is every composing model's
    (:mod:`tritontune.search.pipeline_space`), and so is a group's; their space file is keyed by
    model, each value the mapping a model's own space file holds
    (:func:`~tritontune.search.pipeline_space.apply_pipeline_space`,
    :func:`~tritontune.search.pipeline_space.apply_group_space`)."""
    serves = bench.serves
    if isinstance(serves, ModelGroup):
        return _group_space(bench, serves, slo_p99_s, space_source)
    if isinstance(serves, ServedPipeline):
        space = default_pipeline_space(
            serves.pipeline,
            bench.info.capabilities,
            slo_p99_s=slo_p99_s,
            batch_dims_dynamic={m: bench.batch_dim_dynamic_of(m) for m in serves.step_models},
            precision_variants=bench.owns_server,
        )
        return apply_pipeline_space(space_source, space, serves.pipeline) if space_source else space
    defaults = default_space(
        bench.source.base_config,
        bench.info.capabilities,
        slo_p99_s=slo_p99_s,
        batch_dim_dynamic=bench.batch_dim_dynamic,
        precision_variants=bench.owns_server,
    )
    return apply_space(space_source, defaults) if space_source else defaults


def _group_space(
    bench: Bench, group: ModelGroup, slo_p99_s: float, space_source: SpaceSource | None
) -> PipelineSpace:
    """Each tuned model's default space (precision variants too, as for one model) with
    ``space_source``'s changes, their instances one budget: the machine's, less what the models
    served with their own configs run."""
    target = bench.info.capabilities
    parts = {
        model: default_space(
            group.source_of(model).base_config,
            target,
            slo_p99_s=slo_p99_s,
            batch_dim_dynamic=bench.batch_dim_dynamic_of(model),
            precision_variants=bench.owns_server,
        )
        for model in group.tuned_models
    }
    own = bench.configs(Variant())
    untuned = [m for m in group.step_models if m not in group.tuned_models]
    reserved = sum(instances_of(own[m]) for m in untuned)
    budget = InstanceBudget.of(target, os.cpu_count() or 1, reserved)
    if space_source is None:
        return group_space(parts, budget)
    tuned = ", ".join(group.tuned_models)
    why = f"served with its own config in this search (--model tunes {tuned} only)"
    return apply_group_space(space_source, parts, budget, untuned=dict.fromkeys(untuned, why))


def study_context(bench: Bench, measure: MeasureSettings) -> StudyContext:
    """What export and check need to reproduce a study's results (kept from its first run)."""
    source = bench.source
    shape = bench.request_shape
    return StudyContext(
        model_repository=str(source.directory.parent.resolve()),
        model_version=source.version,
        model_files=source.file_digests(),
        composing=list(serves.pipeline.composing_models)
        if isinstance(serves := bench.serves, ServedPipeline) and serves.pipeline.bls
        else None,
        step_model_files=_step_model_files(bench),
        request_shape=RecordedRequestShape(
            batch_size=shape.batch_size,
            dynamic_dim=shape.dynamic_dim,
            input_data=str(shape.input_data) if shape.input_data else None,
        ),
        server_version=bench.info.version,
        launch=bench.info.launch,
        served_via_python_backend=bench.via_python,
        host=describe_host().to_dict(),
        measure=asdict(measure),
    )


def _step_model_files(bench: Bench) -> dict[str, dict[str, str]] | None:
    """The files of every model a pipeline or a group serves, as measured, by model: ``export``
    writes each model's own files and refuses them changed (the context's ``model_files`` are
    the one model's that names the study: a group's first tuned model only)."""
    serves = bench.serves
    if isinstance(serves, ModelGroup):
        sources = serves.models
    elif isinstance(serves, ServedPipeline):
        sources = serves.pipeline.models
    else:
        return None
    digests: dict[str, dict[str, str]] = {}
    for source in sources:  # a pipeline model whose steps run two versions: both
        digests.setdefault(source.name, {}).update(source.file_digests())
    return digests


def check_host(study: TuningStudy, bench: Bench) -> None:
    """A worker on other hardware (or another Triton) must not add its figures to the study."""
    context = study.context()
    recorded = HostInfo.from_dict(context.host) if context.host else None
    differences = recorded.differences(describe_host()) if recorded else []
    if context.server_version not in ("unknown", bench.info.version):
        differences.append(f"Triton {context.server_version} vs {bench.info.version}")
    if differences:
        raise InputError(
            f"study {study.name!r} was measured on other hardware ({'; '.join(differences)}): "
            "figures of different machines must not mix; search as a group of your own with "
            "--host-group NAME (or use another --study)"
        )


def start_study(study: TuningStudy, bench: Bench, measure: MeasureSettings, budget: int | None) -> None:
    """The context a new study keeps, the host check of a resumed one, and this run's budget."""
    study.ensure_context(lambda: study_context(bench, measure))
    check_host(study, bench)
    study.save_budget(budget)
