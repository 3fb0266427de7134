"""What every exporter shares: the output directory written through a staging directory, the
model files copied as they were measured, and each model read back before it is moved into place.

The output directory is written through a staging directory beside it and each model directory
is moved into place only when complete, so an error never leaves half a repository, and a
non-empty directory is only written into with ``force`` (which replaces just the model
directories being exported).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritontune.config.repository import ModelSource, load_model_source
from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo
from tritontune.record import RECORD_FILE, TuningRecord, WorkloadRecord, read_record
from tritontune.study.records import StudyContext


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
    write: Callable[[str, Path], TuningRecord | WorkloadRecord],
    result: ExportResult,
) -> ExportResult:
    """Write each model of ``names`` with ``write(name, staged_dir)`` into a staging directory,
    read it back, and move it into ``out``; nothing of a model that failed is left behind."""
    check_output(out, list(names), force)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tritontune-export-", dir=out))
    try:
        for name in names:
            staged = staging / name
            staged.mkdir(parents=True)
            record = write(name, staged)
            _verify(staged, name)
            target = out / name
            if target.exists():
                shutil.rmtree(target)  # only with force: check_output refused otherwise
            staged.rename(target)
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


def measured_source(
    study: str, model: str, context: StudyContext, model_repository: Path | None
) -> tuple[ModelSource, dict[str, str]]:
    """The user's model, checked to be the very files the search measured, and their digests
    (hashed once here: a model can be gigabytes)."""
    repository = model_repository or context.model_repository
    if not repository:
        raise InputError(
            f"study {study!r} does not say where its model repository is "
            "(made by an older tritontune); pass --model-repository DIR"
        )
    source = load_model_source(Path(repository), model)
    measured = context.model_files
    now = source.file_digests()
    if measured is not None:
        changed = sorted(k for k in set(measured) | set(now) if measured.get(k) != now.get(k))
        if changed:
            raise InputError(
                f"{source.directory}: {', '.join(changed)} changed since study "
                f"{study!r} measured it; its figures would not be true of these files "
                "(search again, or point --model-repository at the measured files)"
            )
    return source, now


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


def _verify(model_dir: Path, name: str) -> None:
    """Read the written model back the way ``check`` and Triton will."""
    load_model_source(model_dir.parent, name)
    read_record(model_dir / RECORD_FILE)
