"""What every exporter shares: the output directory written through a staging directory, the
model files copied as they were measured, and the models read back before they are moved into
place.

The output directory is written through a staging directory beside it, and the model directories
are moved into place only when every one of them is complete and read back (an ensemble's graph
checked against the composing models written beside it), so an error never leaves half a
repository, and a non-empty directory is only written into with ``force`` (which replaces just
the model directories being exported).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritontune.config.pipeline import is_pipeline, load_pipeline
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.config.variant import Precision, variant_filename
from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo
from tritontune.precision.convert import ConversionError, build_variant
from tritontune.precision.prepare import precision_data
from tritontune.precision.recipe import Recipe
from tritontune.study.records import RecordedPrecision, StudyContext
from tritontune.tuning_record import RECORD_FILE, TuningRecord, WorkloadRecord, read_record


@dataclass(frozen=True)
class ExportedModel:
    name: str
    directory: Path
    record: TuningRecord | WorkloadRecord
    warnings: tuple[str, ...] = ()


@dataclass
class ExportResult:
    out: Path
    models: list[ExportedModel] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def write_models(
    out: Path,
    names: Sequence[str],
    force: bool,
    write: Callable[[str, Path], TuningRecord | WorkloadRecord | None],
    result: ExportResult,
) -> ExportResult:
    """Write each model of ``names`` with ``write(name, staged_dir)`` into a staging directory,
    read them all back, and move them into ``out``; nothing is left behind when one failed.

    ``write`` returns the model's record, or None for a pipeline's composing model (the
    ensemble's record covers it; :attr:`ExportResult.models` lists the models with a record).
    """
    check_output(out, list(names), force)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tritontune-export-", dir=out))
    try:
        records = {}
        for name in names:
            (staging / name).mkdir(parents=True)
            records[name] = write(name, staging / name)
        for name, record in records.items():
            _verify(staging, name, record is not None)
        for name, record in records.items():
            target = out / name
            if target.exists():
                shutil.rmtree(target)  # only with force: check_output refused otherwise
            (staging / name).rename(target)
            if record is not None:
                result.models.append(ExportedModel(name, target, record))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def copy_files(files: Mapping[Path, Path], target: Path) -> None:
    """Copy each file to its path (relative to ``target``): the model files as measured."""
    for relative, origin in files.items():
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, destination)


def model_files(source: ModelSource) -> dict[Path, Path]:
    """The version files of ``source``: relative path -> the file."""
    return {Path(rel): source.directory / rel for rel in source.version_files()}


def precision_variant(
    source: ModelSource, precision: Precision, check: RecordedPrecision | None, request_data: str | None
) -> tuple[Path, Path]:
    """(its path in the model directory, the file) of ``source``'s ``precision`` variant as the
    search measured it: rebuilt by the recipe the search chose, from the same inputs (a cache
    hit unless the cache was cleared; the build is deterministic). ``request_data`` is the
    study's; a check that names its own inputs (a pipeline's composing model) uses those."""
    relative = Path(source.version) / variant_filename(source.model_file.name, precision)
    inputs = check.input_data if check and check.input_data else request_data
    calibration = check.calibration_data if check else None
    needs_data = precision == Precision.INT8_STATIC
    for name, path in (("inputs", inputs), ("calibration inputs", calibration)):
        if needs_data and path and not Path(path).exists():
            raise InputError(
                f"precision {precision} of {source.name!r} was calibrated on {name} that are "
                f"gone ({path}; a pipeline's are kept in the precision cache): search again"
            )
    data = precision_data(
        source.base_config,
        Path(inputs) if inputs and needs_data else None,
        calibration_data=Path(calibration) if calibration and needs_data else None,
    )
    recipe = Recipe.from_dict(check.recipe) if check and check.recipe else precision
    try:
        return relative, build_variant(source.model_file, recipe, calibration=data.calibration)
    except ConversionError as err:
        raise InputError(
            f"precision {precision} of {source.name!r} could not be rebuilt: {err}"
        ) from None


def precision_summary(precision: str, check: RecordedPrecision | None) -> dict:
    """A record's ``precision`` section: the precision served, how it was built and its accuracy
    against FP32, as the search checked it."""
    return {
        "precision": str(precision),
        "recipe": check.recipe_label if check else None,
        "accuracy": check.accuracy if check else None,
        "data": check.data if check else None,
    }


def measured_source(
    study: str, model: str, context: StudyContext, model_repository: Path | None
) -> tuple[ModelSource, dict[str, str]]:
    """The user's model, checked to be the very files the search measured, and their digests
    (hashed once here: a model can be gigabytes)."""
    source = load_model_source(measured_repository(study, context, model_repository), model)
    now = source.file_digests()
    if context.model_files is not None:
        refuse_changed(study, source.directory, context.model_files, now)
    return source, now


def measured_repository(study: str, context: StudyContext, model_repository: Path | None) -> Path:
    """Where the study's models are: ``--model-repository``, else where the search found them."""
    repository = model_repository or context.model_repository
    if not repository:
        raise InputError(
            f"study {study!r} does not say where its model repository is "
            "(made by an older tritontune); pass --model-repository DIR"
        )
    return Path(repository)


def refuse_changed(study: str, directory: Path, measured: dict[str, str], now: dict[str, str]) -> None:
    """Refuse a model directory whose files differ from those the study measured (``measured``
    and ``now``: path relative to ``directory`` -> sha256)."""
    changed = sorted(k for k in set(measured) | set(now) if measured.get(k) != now.get(k))
    if changed:
        raise InputError(
            f"{directory}: {', '.join(changed)} changed since study {study!r} measured it; its "
            "figures would not be true of these files (search again, or point "
            "--model-repository at the measured files)"
        )


def refuse_changed_models(
    study: str,
    repository: Path,
    measured: Mapping[str, dict[str, str]] | None,
    now: Mapping[str, dict[str, str]],
    warnings: list[str],
    *,
    what: str,
) -> None:
    """:func:`refuse_changed` for each model of ``now`` (model -> its digests), against the
    study's ``step_model_files`` (``measured``): a pipeline's composing models, a group's models
    (``what`` names them). A model the study did not measure is refused; a study made before
    they were recorded is exported with a warning that they could not be checked."""
    if measured is None:
        warnings.append(
            f"study {study!r} did not record its {what}' files (an older tritontune): they are "
            "exported as they are now, unchecked against what was measured"
        )
        return
    for model, digests in now.items():
        if model not in measured:
            raise InputError(
                f"{repository / model}: study {study!r} did not measure model {model!r} (its "
                f"{what}: {', '.join(measured)}); search again"
            )
        refuse_changed(study, repository / model, measured[model], digests)


def check_output(out: Path, names: list[str], force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(
            f"--out {out}: directory is not empty; pass --force to replace "
            f"{', '.join(names)} in it (other entries are left alone)"
        )


def measured_on(context: StudyContext) -> dict[str, Any]:
    """A record's provenance fields, from the study's context."""
    return {
        "triton_version": context.server_version,
        "triton_launch": context.launch,
        "served_via_python_backend": context.served_via_python_backend,
        "hardware": HostInfo.from_dict(context.host),
    }


def _verify(staging: Path, name: str, has_record: bool) -> None:
    """Read the written model back the way ``check`` and Triton will: an ensemble's graph too,
    against the composing models written beside it."""
    source = load_model_source(staging, name)
    if is_pipeline(source.base_config):
        load_pipeline(staging, name)
    if has_record:
        read_record(staging / name / RECORD_FILE)
