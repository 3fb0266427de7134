"""``tritontune predict``: what-if answers from a calibrated study, without a server.

A study searched with ``--strategy predict`` keeps its calibration (each execution setting's
service time per batch size) and, for every config it measured, what was predicted of it. From
those alone this module answers:

- a config at loads: "what does max_batch_size 32, 2 ms delay, 2 instances give at 400 req/s?"
  (:func:`what_if`; knobs not given are the study's winner's), or at its operating point under
  the study's SLO (:func:`at_slo`);
- the best configs for another SLO (:func:`best_for`).

Every answer is the simulator's figure times the setting's correction from the study's
measurements (:class:`~tritontune.predict.ranking.Corrections`), with its band and the calibrated
settings it came from. An answer is a prediction: nothing here is ever reported as a result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from tritontune.config.model_config import ModelConfig, parse_config_text
from tritontune.config.variant import apply_variant
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.batcher import (
    CLIENT_JITTER,
    BatcherConfig,
    ClosedLoop,
    OpenLoop,
    SimResult,
    operating_point,
    simulate,
)
from tritontune.predict.calibration import (
    Calibration,
    Derivation,
    Prediction,
    execution_setting,
    setting_key,
)
from tritontune.predict.config import batcher_config_of
from tritontune.predict.ranking import BANDS, Corrections, RankedSpace
from tritontune.search.grid import all_points
from tritontune.search.predicted import corrections_of
from tritontune.search.space import DIMENSIONS, SearchSpace, parse_knob
from tritontune.study.handle import TuningStudy
from tritontune.study.verdict import best_point

#: Requests simulated per answer (closed loop: at least this many per client too).
ANSWER_REQUESTS = 4000


@dataclass(frozen=True)
class Answer:
    """One predicted figure."""

    point: dict[str, Any]
    load: float
    """Concurrency, or req/s (the study's load mode)."""
    throughput: float
    """Inferences per second, corrected."""
    p50_s: float
    p99_s: float
    mean_batch: float
    correction: float
    """The measured/predicted factor applied to the throughput."""
    band: float
    """How far the throughput may be off (a share)."""
    sources: tuple[str, ...]
    """The calibrated settings the service curve came from."""
    derivation: Derivation
    """How its service curve was obtained (calibrated itself, composed, with contention)."""

    @property
    def calibrated(self) -> bool:
        """The config's own execution setting was calibrated (else composed from others)."""
        return self.derivation == Derivation.MEASURED


@dataclass(frozen=True)
class StudyModel:
    """What a study gives a prediction."""

    name: str
    space: SearchSpace
    calibration: Calibration
    base: ModelConfig
    slo_p99_s: float
    load_mode: LoadMode
    request_batch: int
    corrections: Corrections
    start: dict[str, Any]
    """The point a what-if starts from: the study's winner (or its best screening trial)."""

    def build(self, point: Mapping[str, Any]) -> ModelConfig:
        return apply_variant(self.base, self.space.to_variant(dict(point)))

    def simulate(self, prediction: Prediction, config: BatcherConfig, load: float) -> SimResult:
        """``config`` at ``load`` (the study's load mode) with ``prediction``'s curve, simulated
        as the ranking simulates a config (uncorrected)."""
        arrivals = (
            ClosedLoop(int(load), request_batch=self.request_batch)
            if self.load_mode == LoadMode.CONCURRENCY
            else OpenLoop(load, request_batch=self.request_batch)
        )
        return simulate(
            prediction.curve,
            config,
            arrivals,
            n_requests=max(ANSWER_REQUESTS, 8 * int(load)),
            overhead_s=prediction.overhead_s,
            path_s=prediction.path_s,
            jitter=CLIENT_JITTER,
        )


def study_model(study: TuningStudy) -> StudyModel:
    """The prediction a study supports; a clear error when it has no calibration."""
    calibration = study.calibration()
    record = study.read()
    if calibration is None or not calibration.settings:
        raise InputError(
            f"study {record.name!r} has no calibration: search it with --strategy predict first"
        )
    if record.space is None or record.baseline_config_pbtxt is None:
        raise InputError(f"study {record.name!r} keeps no space or base config to predict from")
    winner = best_point(record)
    best = winner.result if winner is not None else record.best
    space = SearchSpace.from_dict(record.space)
    start = dict(best.params) if best is not None else next(iter(all_points(space)))
    return StudyModel(
        name=record.name,
        space=space,
        calibration=calibration,
        base=parse_config_text(record.baseline_config_pbtxt, source=f"study {record.name}"),
        slo_p99_s=record.identity.slo_p99_s,
        load_mode=record.identity.load_mode,
        request_batch=record.context.request_shape.batch_size,
        corrections=corrections_of(record.results),
        start=start,
    )


def parse_assignments(space: SearchSpace, assignments: Sequence[str]) -> dict[str, Any]:
    """``KNOB=VALUE`` pairs (``max_queue_delay=2ms``, ``instance_count=2``), each checked as a
    space file's value of that knob is."""
    point: dict[str, Any] = {}
    for text in assignments:
        name, sep, value = text.partition("=")
        name = name.strip()
        if not sep or not value.strip():
            raise InputError(f"--set {text!r}: expected KNOB=VALUE, e.g. max_batch_size=32")
        if name not in DIMENSIONS:
            raise InputError(f"--set {text!r}: unknown knob {name!r}; known: {', '.join(DIMENSIONS)}")
        point[name] = parse_knob(f"--set {name}", name, yaml.safe_load(value))
    return point


def _changed(model: StudyModel, changes: Mapping[str, Any]) -> tuple[dict[str, Any], Prediction]:
    point = {**model.start, **changes}
    if point.get("dynamic_batching") is False:
        point.pop("max_queue_delay", None)
        point.pop("preferred_batch_size", None)
    setting = execution_setting(point)
    try:
        return point, model.calibration.predict(setting)
    except KeyError as missing:
        known = "; ".join(s.key for s in model.calibration.settings.values())
        raise InputError(
            f"no calibration covers {setting_key(setting)} ({missing.args[0]}); calibrated: {known}"
        ) from None


def at_slo(model: StudyModel, changes: Mapping[str, Any]) -> Answer:
    """The study's winner with ``changes`` at its operating point under the study's SLO."""
    point, prediction = _changed(model, changes)
    key = setting_key(execution_setting(point))
    load, result = operating_point(
        prediction.curve,
        batcher_config_of(model.build(point)),
        slo_p99_s=model.slo_p99_s,
        mode="rate" if model.load_mode == LoadMode.RATE else "concurrency",
        request_batch=model.request_batch,
        overhead_s=prediction.overhead_s,
        path_s=prediction.path_s,
        jitter=CLIENT_JITTER,
    )
    correction = model.corrections.factor(key)
    return Answer(
        point=point,
        load=load,
        throughput=result.throughput_ips * correction if load else 0.0,
        p50_s=result.p50_s,
        p99_s=result.p99_s,
        mean_batch=result.mean_batch,
        correction=correction,
        band=model.corrections.band(key, BANDS[prediction.derivation]),
        sources=prediction.sources,
        derivation=prediction.derivation,
    )


def what_if(model: StudyModel, changes: Mapping[str, Any], loads: Sequence[float]) -> list[Answer]:
    """The study's winner with ``changes``, at each of ``loads`` (the study's load mode)."""
    point, prediction = _changed(model, changes)
    config = batcher_config_of(model.build(point))
    key = setting_key(execution_setting(point))
    correction = model.corrections.factor(key)
    band = model.corrections.band(key, BANDS[prediction.derivation])
    answers = []
    for load in loads:
        if load <= 0:
            raise InputError(f"--load {load:g}: must be above 0")
        result = model.simulate(prediction, config, load)
        answers.append(
            Answer(
                point=point,
                load=load,
                throughput=result.throughput_ips * correction,
                p50_s=result.p50_s,
                p99_s=result.p99_s,
                mean_batch=result.mean_batch,
                correction=correction,
                band=band,
                sources=prediction.sources,
                derivation=prediction.derivation,
            )
        )
    return answers


def best_for(model: StudyModel, slo_p99_s: float, top: int = 5) -> list[Answer]:
    """The best ``top`` configs of the study's space under another SLO, by corrected prediction."""
    ranking = RankedSpace(
        all_points(model.space),
        model.calibration,
        model.build,
        slo_p99_s=slo_p99_s,
        load_mode=model.load_mode,
        request_batch=model.request_batch,
    ).rank(model.corrections.factor)  # best first by corrected throughput
    answers = []
    for predicted in ranking.predicted[:top]:
        correction = model.corrections.factor(predicted.setting)
        answers.append(
            Answer(
                point=predicted.point,
                load=predicted.load,
                throughput=predicted.throughput * correction,
                p50_s=predicted.p50_s,
                p99_s=predicted.p99_s,
                mean_batch=predicted.mean_batch,
                correction=correction,
                band=model.corrections.band(predicted.setting, predicted.default_band),
                sources=predicted.sources,
                derivation=predicted.derivation,
            )
        )
    return answers
