"""Before any trial, whatever the mode: the space's precision variants built and accuracy-checked
(a rejected one leaves the space, never measured), every check kept in the study.

One step for every search, so a mode never lacks it: a single model judged on the request data
(``--input-data``); a pipeline per composing model, on what reaches it; a traffic mix on its
classes' own request data (every class's file, judged as one); several models on one server,
each model on the data of the classes that call it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tritontune.config.variant import Precision
from tritontune.errors import InputError
from tritontune.measure.traffic import Traffic
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck
from tritontune.search.pipeline_space import PipelineSpace, knob_name
from tritontune.search.space import Choice, Dimension, SearchSpace
from tritontune.serving.bench import Bench
from tritontune.study.handle import TuningStudy
from tritontune.study.records import precision_key

PrecisionsProgress = Callable[[dict[str, PrecisionCheck]], None]
"""Told the checks of one model's variants (accepted or not), keyed by ``precision_key``."""


def checked_precisions(
    study: TuningStudy,
    bench: Bench,
    space: SearchSpace,
    accuracy: AccuracySettings | None,
    on_checked: PrecisionsProgress | None = None,
    traffic: Traffic | None = None,
) -> SearchSpace:
    """``space`` with each precision dimension narrowed to the variants that passed their check.
    ``traffic``: a workload's, whose classes' request data judge the variants (the bench's own
    request data otherwise)."""
    if isinstance(space, PipelineSpace):
        for model in space.models:
            name = knob_name(model, "precision")
            narrowed = _narrowed(study, bench, space, name, accuracy, on_checked, model, traffic)
            space = space.replace(name, narrowed)
        return space
    narrowed = _narrowed(study, bench, space, "precision", accuracy, on_checked, None, traffic)
    return space.replace("precision", narrowed)


def _inputs(traffic: Traffic | None, model: str | None) -> tuple[Path, ...]:
    """The request data files of ``traffic``'s classes (those calling ``model``, when they name
    their models)."""
    if traffic is None:
        return ()
    classes = traffic.served_by(model).classes if model and traffic.routed else traffic.classes
    return tuple(dict.fromkeys(c.request.input_data for c in classes if c.request.input_data))


def _narrowed(
    study: TuningStudy,
    bench: Bench,
    space: SearchSpace,
    name: str,
    accuracy: AccuracySettings | None,
    on_checked: PrecisionsProgress | None,
    model: str | None,
    traffic: Traffic | None,
) -> Dimension | None:
    """The precision dimension ``name`` of ``space`` narrowed to the variants that passed their
    accuracy check (as it is when it has none to check)."""
    dimension = space.dimensions.get(name)
    if not isinstance(dimension, Choice) or dimension.values == (Precision.FP32,):
        return dimension
    wanted = [str(p) for p in dimension.values]
    checks = bench.prepare_precisions(
        wanted, accuracy=accuracy, model=model, input_data=_inputs(traffic, model)
    )
    study.save_precisions({p: check.to_dict() for p, check in checks.items()}, model=model)
    if on_checked:
        on_checked({precision_key(p, model): check for p, check in checks.items()})
    accepted = tuple(p for p in dimension.values if checks[str(p)].accepted)
    if not accepted:
        whose = f" of {model!r}" if model else ""
        raise InputError(
            f"no precision{whose} of the space passed its accuracy check: "
            + "; ".join(f"{p}: {checks[p].reason}" for p in wanted)
        )
    return Choice(accepted)
