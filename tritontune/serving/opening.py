"""Opening the bench for a model: the one place that picks a
:class:`~tritontune.serving.session.TuningSession` or its subclass for pipelines,
:class:`~tritontune.serving.pipeline_session.PipelineSession`, by what the model is (its own
module, so that the base session never imports the subclass that extends it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tritontune.config.pipeline import is_pipeline
from tritontune.config.repository import load_model_source
from tritontune.errors import InputError
from tritontune.serving.bench import Capability
from tritontune.serving.pipeline_session import PipelineSession, open_pipeline_session
from tritontune.serving.session import TuningSession


def open_session(
    model_repository: Path,
    model: str,
    *,
    composing: tuple[str, ...] = (),
    for_traffic: bool = False,
    **options: Any,
) -> TuningSession:
    """A :class:`TuningSession` for ``model`` of ``model_repository`` (not started yet); for an
    ensemble, or a BLS model calling the ``composing`` models, a
    :class:`~tritontune.serving.pipeline_session.PipelineSession` (validated first).
    ``for_traffic``: the session will measure a workload's classes, which a pipeline's does not
    (refused here, before any server is launched)."""
    source = load_model_source(Path(model_repository), model)
    pipeline = bool(composing) or is_pipeline(source.base_config)
    if pipeline and for_traffic:
        why = PipelineSession.LACKS[Capability.TRAFFIC]
        raise InputError(f"--model {model}: a pipeline (an ensemble or a BLS model): {why}")
    if pipeline:
        return open_pipeline_session(Path(model_repository), model, composing, **options)
    return TuningSession(source, **options)
