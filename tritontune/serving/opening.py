"""Opening the bench: a :class:`~tritontune.serving.session.TuningSession` serving what the
user named, validated before anything is launched: one model, a pipeline (an ensemble, or a BLS
model with the models it calls), or the models a workload's classes name
(:mod:`tritontune.serving.served`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritontune.config.pipeline import is_pipeline, load_bls_pipeline, load_pipeline
from tritontune.config.repository import load_model_source
from tritontune.errors import InputError
from tritontune.measure.traffic import Traffic, check_models
from tritontune.serving.served import Capability, ModelGroup, ServedPipeline
from tritontune.serving.session import TuningSession


def open_session(
    model_repository: Path,
    model: str,
    *,
    composing: tuple[str, ...] = (),
    for_traffic: bool = False,
    **options: Any,
) -> TuningSession:
    """A session for ``model`` of ``model_repository`` (not started yet); for an ensemble, or a
    BLS model calling the ``composing`` models, serving the pipeline (validated first).
    ``for_traffic``: the session will measure a workload's classes, which a pipeline's does not
    (refused here, before any server is launched)."""
    repository = Path(model_repository)
    source = load_model_source(repository, model)
    pipeline = bool(composing) or is_pipeline(source.base_config)
    if pipeline and for_traffic:
        why = ServedPipeline.LACKS[Capability.TRAFFIC]
        raise InputError(f"--model {model}: a pipeline (an ensemble or a BLS model): {why}")
    if pipeline:
        return open_pipeline_session(repository, model, composing, **options)
    return TuningSession(source, **options)


def open_pipeline_session(
    model_repository: Path, model: str, composing: tuple[str, ...] = (), **options: Any
) -> TuningSession:
    """A session serving the pipeline ``model`` of ``model_repository`` (validated, not started
    yet): an ensemble, or with ``composing``, a BLS model calling those models."""
    repository = Path(model_repository)
    if composing:
        return TuningSession(ServedPipeline(load_bls_pipeline(repository, model, composing)), **options)
    return TuningSession(ServedPipeline(load_pipeline(repository, model)), **options)


def open_group_session(
    model_repository: Path, traffic: Traffic, model: str | None = None, **options: Any
) -> TuningSession:
    """A session serving every model ``traffic``'s classes name (checked against
    ``model_repository``; not started yet), tuning them all, or only ``model``."""
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
    return TuningSession(ModelGroup(tuple(sources), (model,) if model else None), **options)
