"""A user's model repository (read-only to tritontune) and the working repository a server sees.

The user's repository is never written. Servers tritontune launches are pointed at a private
*working repository* holding, per model, a config and links to the user's model files. When the
server lacks the model's backend (the bundled local server has only the Python backend), an ONNX
model is served there through the ``python_onnx`` template instead; every config tritontune shows
or exports keeps the user's backend.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tritontune import __version__
from tritontune.config.model_config import (
    ModelConfig,
    backend_of,
    copy_config,
    read_config,
    write_config,
)
from tritontune.config.onnx_model import derive_onnx_config
from tritontune.config.templates import render, render_config
from tritontune.errors import ConfigError, InputError

ONNX_BACKEND = "onnxruntime"
PYTHON_BACKEND = "python"
ENSEMBLE_BACKEND = "ensemble"
"""What :func:`~tritontune.config.model_config.backend_of` says of an ensemble (its
``platform: "ensemble"``: Triton's core, not a backend)."""


@dataclass(frozen=True)
class ModelSource:
    """One model of a user's repository: where it is and its base config."""

    name: str
    directory: Path
    base_config: ModelConfig
    version: str
    config_derived: bool
    """True when the directory had no config.pbtxt and the config was derived from the model."""

    @property
    def backend(self) -> str:
        return backend_of(self.base_config)

    @property
    def model_file(self) -> Path:
        filename = self.base_config.default_model_filename or (
            "model.onnx" if self.backend == ONNX_BACKEND else "model"
        )
        return self.directory / self.version / filename

    def version_files(self) -> list[Path]:
        """Every file of the served version, relative to the model directory (e.g. ``1/model.onnx``)."""
        root = self.directory / self.version
        return sorted(p.relative_to(self.directory) for p in root.rglob("*") if p.is_file())

    def file_digests(self) -> dict[str, str]:
        """sha256 of each file of the served version, keyed by its path in the model directory."""
        return {str(rel): file_sha256(self.directory / rel) for rel in self.version_files()}


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _latest_version(directory: Path) -> str:
    versions = [p.name for p in directory.iterdir() if p.is_dir() and p.name.isdigit()]
    if not versions:
        raise InputError(
            f"{directory}: no version directory (expected e.g. {directory / '1'}/model.onnx)"
        )
    return max(versions, key=int)


def load_model_source(repository: Path, name: str) -> ModelSource:
    """Find model ``name`` in ``repository`` and read (or derive) its base config."""
    repository = Path(repository)
    if not repository.is_dir():
        raise InputError(f"{repository}: model repository not found (expected a directory)")
    directory = repository / name
    if not directory.is_dir():
        present = sorted(p.name for p in repository.iterdir() if p.is_dir())
        hint = f"; models there: {', '.join(present)}" if present else "; it holds no models"
        raise InputError(f"{directory}: model {name!r} not found in the repository{hint}")
    version = _latest_version(directory)
    config_path = directory / "config.pbtxt"
    onnx_file = directory / version / "model.onnx"

    if config_path.is_file():
        config = read_config(config_path)
        derived = False
        if config.name and config.name != name:
            raise ConfigError(
                f"{config_path}: name {config.name!r} differs from the directory name {name!r}"
            )
        config.name = name
        if not config.backend and not config.platform and onnx_file.is_file():
            config.backend = ONNX_BACKEND
        if backend_of(config) == ONNX_BACKEND and (not config.input or not config.output):
            _complete_io_from_onnx(config, directory / version / _onnx_filename(config))
    elif onnx_file.is_file():
        config = derive_onnx_config(onnx_file, name)
        derived = True
    else:
        raise InputError(f"{directory}: no config.pbtxt and no {version}/model.onnx to derive one")

    source = ModelSource(name, directory, config, version, derived)
    if source.backend == ONNX_BACKEND and not source.model_file.is_file():
        raise InputError(f"{source.model_file}: model file not found")
    return source


def _onnx_filename(config: ModelConfig) -> str:
    return config.default_model_filename or "model.onnx"


def _complete_io_from_onnx(config: ModelConfig, onnx_file: Path) -> None:
    """Fill missing inputs/outputs (and a batch size) from the ONNX graph, as auto-complete does."""
    if not onnx_file.is_file():
        raise InputError(f"{onnx_file}: model file not found")
    derived = derive_onnx_config(onnx_file, config.name)
    if not config.input:
        config.input.extend(derived.input)
    if not config.output:
        config.output.extend(derived.output)


@dataclass(frozen=True)
class ServedModel:
    """A model as placed in a working repository, and how its configs must be served."""

    source: ModelSource
    via_python: bool
    """True when the ONNX file is served through the Python backend (``python_onnx`` template)."""

    @property
    def name(self) -> str:
        return self.source.name

    def served_config(self, tuned: ModelConfig) -> ModelConfig:
        """The config to send to the server for ``tuned`` (the user's backend kept in ``tuned``)."""
        served = copy_config(tuned)
        served.name = self.name
        if not self.via_python:
            return served
        skeleton = render_config(
            "python_onnx/config.pbtxt.j2",
            name=self.name,
            onnx_file=tuned.default_model_filename or self.source.model_file.name,
        )
        served.ClearField("platform")
        served.ClearField("default_model_filename")
        served.optimization.ClearField("execution_accelerators")
        if not served.HasField("optimization") or not served.optimization.ListFields():
            served.ClearField("optimization")
        served.MergeFrom(skeleton)
        return served


class WorkingRepository:
    """A private repository, under ``root``, that a server tritontune launched is pointed at."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def add(self, source: ModelSource, server_backends: frozenset[str]) -> ServedModel:
        """Place ``source`` in the working repository, served natively if the server can."""
        backend = source.backend
        # An ensemble is Triton's core scheduling composing models, not a backend's model.
        if backend in server_backends or not server_backends or backend == ENSEMBLE_BACKEND:
            served = ServedModel(source, via_python=False)
        elif backend == ONNX_BACKEND and PYTHON_BACKEND in server_backends:
            served = ServedModel(source, via_python=True)
        else:
            raise InputError(
                f"model {source.name!r} needs the {backend!r} backend, which this server lacks "
                f"(it has: {', '.join(sorted(server_backends))})"
            )
        target = self.root / source.name
        if target.exists():
            shutil.rmtree(target)
        version_dir = target / source.version
        version_dir.mkdir(parents=True)
        for entry in (source.directory / source.version).iterdir():
            (version_dir / entry.name).symlink_to(entry.resolve())
        if served.via_python:
            (version_dir / "model.py").write_text(
                render(
                    "python_onnx/model.py.j2",
                    name=source.name,
                    onnx_file=source.model_file.name,
                    tritontune_version=__version__,
                ),
                encoding="utf-8",
            )
        write_config(served.served_config(source.base_config), target / "config.pbtxt")
        return served

    def add_file(self, source: ModelSource, filename: str, target: Path) -> None:
        """Link ``target`` into ``source``'s version directory as ``filename`` (e.g. a precision
        variant ``model.fp16.onnx``); the model must have been added."""
        link = self.root / source.name / source.version / filename
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path(target).resolve())

    def __repr__(self) -> str:
        return f"WorkingRepository({os.fspath(self.root)!r})"
