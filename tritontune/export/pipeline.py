"""Export of a pipeline study: the ensemble and every composing model, under one record.

A trial's config is every composing model's config (:func:`~tritontune.config.pipeline.configs_to_text`).
Exported, it is a repository Triton serves as it was measured: the ensemble's directory (its
config as written, a version directory, the request data and the one tuning record, whose
``pipeline`` section lists each composing model with its knobs and digests) and each composing
model's directory (its files as measured, a precision variant in place of the weights it
replaced, its tuned config; no record of its own, since ``check`` measures the pipeline end to
end). A pipeline is exported alone and its winner only, since the steps name their models. The
rest is the single-class export's (:mod:`tritontune.export.single_class`), which calls this module.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tritontune.config.model_config import ModelConfig, config_digest, read_config, write_config
from tritontune.config.pipeline import (
    Pipeline,
    configs_from_text,
    is_pipeline,
    load_bls_pipeline,
    load_pipeline,
)
from tritontune.config.repository import ModelSource, file_sha256
from tritontune.config.variant import PIPELINE_KNOBS, Precision, describe_config, precision_of
from tritontune.errors import InputError
from tritontune.export.staging import (
    copy_files,
    model_files,
    precision_summary,
    precision_variant,
    refuse_changed_models,
)
from tritontune.study.figures import OperatingPoint, StepFigure
from tritontune.study.records import StudyRecord, TrialResult
from tritontune.tuning_record import ComposingModel, PipelineRecord, RecordedStep


@dataclass(frozen=True)
class MeasuredPipeline:
    """A study's pipeline as it is in the user's repository, checked to be what was measured."""

    pipeline: Pipeline
    model_files: dict[str, dict[str, str]]
    """Each composing model's files (relative to its directory) -> sha256: the copies' digests."""

    @property
    def models(self) -> tuple[str, ...]:
        return self.pipeline.composing_models


def measured_pipeline(
    study: StudyRecord, ensemble: ModelSource, warnings: list[str]
) -> MeasuredPipeline | None:
    """The pipeline a study measured, when its model is an ensemble (None: a single model).

    Every composing model's files are checked against the study's digests, as
    :func:`~tritontune.export.staging.measured_source` checks a single model's; a study made
    before they were recorded is exported with a warning that they could not be checked.
    """
    composing = study.context.composing
    if composing:  # a BLS model and the models its code calls, as the search was told
        pipeline = load_bls_pipeline(ensemble.directory.parent, ensemble.name, composing)
    elif is_pipeline(ensemble.base_config):
        pipeline = load_pipeline(ensemble.directory.parent, ensemble.name)
    else:
        if any(PIPELINE_KNOBS in trial.knobs for trial in study.trials):
            raise InputError(
                f"study {study.name!r} measured a pipeline, but {ensemble.directory} is no "
                "longer an ensemble (and the study names no models a BLS model calls); point "
                "--model-repository at the measured repository"
            )
        return None
    now: dict[str, dict[str, str]] = {}
    for source in pipeline.models:  # a model whose steps run two versions: both
        now.setdefault(source.name, {}).update(source.file_digests())
    refuse_changed_models(
        study.name,
        ensemble.directory.parent,
        study.context.step_model_files,
        now,
        warnings,
        what="composing models",
    )
    return MeasuredPipeline(pipeline, now)


def refuse_options(study: str, ensemble: str, *, endpoints: int, role: str | None, top_k: int) -> None:
    """The single-model export options that would rename a pipeline's models, refused."""
    if endpoints > 1 or role is not None or top_k != 1:
        raise InputError(
            f"study {study!r} tuned pipeline {ensemble!r}: export it alone, with --study NAME "
            "(--endpoint and --top-k rename the models they export, and an ensemble's steps, or "
            "a BLS model's code, name its composing models)"
        )


def entry_config(measured: MeasuredPipeline, result: TrialResult) -> ModelConfig:
    """A BLS model's own config, as the trial tuned it (an ensemble has none: see
    :func:`write_ensemble`)."""
    name = measured.pipeline.name
    configs = configs_from_text(result.config_pbtxt, source=f"trial {result.number}")
    if name not in configs:
        raise InputError(
            f"trial {result.number} keeps no config for BLS model {name!r} (its configs: "
            f"{', '.join(configs)}); search the pipeline again"
        )
    config = configs[name]
    config.name = name
    return config


@dataclass(frozen=True)
class ComposingExport:
    """What a composing model's exported directory holds."""

    config: ModelConfig
    files: dict[Path, Path]
    """Relative path -> the file to copy: every version its steps run, a precision variant in
    place of the weights it replaces."""
    digests: dict[str, str]
    precision: dict | None = None
    """The precision variant served (the record's ``precision`` section), if any."""


def composing_exports(
    measured: MeasuredPipeline, study: StudyRecord, result: TrialResult
) -> dict[str, ComposingExport]:
    """Each composing model as the trial ran it, in the pipeline's order."""
    configs = configs_from_text(result.config_pbtxt, source=f"trial {result.number}")
    missing = [model for model in measured.models if model not in configs]
    if missing:
        raise InputError(
            f"trial {result.number} keeps no config for composing model(s) {', '.join(missing)} "
            f"of pipeline {measured.pipeline.name!r} (its configs: {', '.join(configs)}); "
            "search the pipeline again"
        )
    out = {}
    for model in measured.models:
        config = configs[model]
        config.name = model
        files: dict[Path, Path] = {}
        for source in measured.pipeline.models:
            if source.name == model:
                files.update(model_files(source))
        digests = dict(measured.model_files.get(model, {}))
        source = measured.pipeline.source(model)
        precision, summary = Precision(precision_of(config, source.model_file.name)), None
        if precision != Precision.FP32:  # the variant replaces the weights, as for one model
            weights = source.model_file.relative_to(source.directory)
            files.pop(weights, None)
            digests.pop(str(weights), None)
            check = study.precision_check(precision, model)
            input_data = study.context.request_shape.input_data
            relative, variant = precision_variant(source, precision, check, input_data)
            files[relative], digests[str(relative)] = variant, file_sha256(variant)
            summary = precision_summary(precision, check)
        out[model] = ComposingExport(config, files, digests, summary)
    return out


def write_ensemble(source: ModelSource, target: Path) -> ModelConfig:
    """The ensemble's config, as written, and its version directory, beside the files of that
    version (none, usually) already copied into ``target``; returns the config."""
    (target / source.version).mkdir(exist_ok=True)
    shutil.copy2(source.directory / "config.pbtxt", target / "config.pbtxt")
    config = read_config(target / "config.pbtxt")
    config.name = source.name  # as load_model_source names it, which check's digest reads
    return config


def write_composing(export: ComposingExport, target: Path) -> None:
    """A composing model's directory: its files and its tuned config (no record: the
    ensemble's covers it)."""
    copy_files(export.files, target)
    write_config(export.config, target / "config.pbtxt")


def pipeline_record(
    measured: MeasuredPipeline,
    exports: dict[str, ComposingExport],
    result: TrialResult,
    point: OperatingPoint,
) -> PipelineRecord:
    """The record's ``pipeline`` section: each composing model as written, and its share of a
    request's time where the study has it: at the record's operating point (a playoff winner's:
    the median of its rounds), else, for studies whose playoff kept no per-step figures, the
    search's first measurement of the config, and the record says so."""
    screening = result.operating_point
    steps, figures, load = point.steps, "operating point", point.load
    if not steps and screening is not None:
        steps, figures, load = screening.steps, "screening", screening.load
    return PipelineRecord(
        models=tuple(
            ComposingModel(
                model=model,
                knobs=describe_config(export.config),
                config_sha256=config_digest(export.config),
                model_files=export.digests,
                precision=export.precision,
            )
            for model, export in exports.items()
        ),
        steps=_recorded_steps(steps),
        steps_load=load if steps else 0.0,
        steps_figures=figures,
        bls=measured.pipeline.bls,
    )


def _recorded_steps(steps: Sequence[StepFigure]) -> tuple[RecordedStep, ...]:
    return tuple(
        RecordedStep(s.model, s.queue_s * 1e3, s.compute_s * 1e3, s.avg_batch_size) for s in steps
    )
