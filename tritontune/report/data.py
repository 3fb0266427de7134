"""What a report shows, gathered from a finished study (nothing is re-measured or re-derived).

Every load level each trial measured becomes a point (throughput, p99); the ones no other point
beats on both (more throughput at no higher p99) form the Pareto frontier. The top configs, the
best config's and the baseline's latency curves, the capacity plan and the warnings all come from
the study's trials and attributes.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field, replace
from typing import Any

from tritontune.measure.gpu_metrics import NO_GPUS, GpuFigures
from tritontune.measure.loadgen import LoadMode
from tritontune.report.capacity import DEFAULT_HEADROOM, CapacityPlan, plan_capacity
from tritontune.study.figures import (
    Interval,
    LevelResult,
    OperatingPoint,
    PlayoffResult,
    StepFigure,
    pipeline_bottleneck,
)
from tritontune.study.records import StudyRecord, TrialResult
from tritontune.study.verdict import best_point, gain_of, gain_over_baseline

#: p99 over p50 above this means queueing, stragglers or pauses worth a look (background.md).
TAIL_RATIO_WARNING = 3.0


@dataclass(frozen=True)
class MeasuredPoint:
    """One measured load level of one config."""

    trial: int | None
    """None for the baseline (the model's own config)."""
    load: float
    throughput: float
    p50_s: float
    p99_s: float
    meets_slo: bool
    on_frontier: bool = False
    gpu: tuple[GpuFigures, ...] | None = None
    """Per GPU over the level's windows; None where the server reported no GPUs."""


@dataclass(frozen=True)
class PredictionCheck:
    """What ``--strategy predict`` said of a config before it was measured, and the measurement."""

    trial: int
    knobs: dict[str, Any]
    predicted: float
    """Inferences per second, with the correction the search had when it proposed the config."""
    band: float
    measured: float
    predicted_p99_s: float
    measured_p99_s: float

    @property
    def error(self) -> float:
        """|predicted - measured| / measured, of the throughput."""
        return abs(self.predicted / self.measured - 1) if self.measured else float("inf")

    @property
    def within_band(self) -> bool:
        return self.error <= self.band

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "predicted": self.predicted,
            "band": self.band,
            "measured": self.measured,
            "error": self.error,
            "predicted_p99_ms": _ms(self.predicted_p99_s),
            "measured_p99_ms": _ms(self.measured_p99_s),
        }


def prediction_checks(results: list[TrialResult]) -> list[PredictionCheck]:
    """Every measured config a prediction was made for (trial order)."""
    checks = []
    for result in sorted(results, key=lambda r: r.number):
        predicted, op = result.predicted, result.operating_point
        if not predicted or op is None or not op.feasible:
            continue
        checks.append(
            PredictionCheck(
                trial=result.number,
                knobs=result.knobs,
                predicted=float(predicted["throughput"]),
                band=float(predicted.get("band", 0.0)),
                measured=op.throughput,
                predicted_p99_s=float(predicted["p99_s"]),
                measured_p99_s=op.p99_s,
            )
        )
    return checks


@dataclass
class ReportData:
    study_name: str
    model: str
    slo_p99_s: float
    load_mode: LoadMode
    server_version: str
    host: dict[str, Any]
    created: str
    baseline: OperatingPoint | None
    best: TrialResult | None
    """The winner's trial (the playoff's winner; without a playoff, the best screening figure)."""
    top: list[TrialResult]
    failed: list[TrialResult]
    points: list[MeasuredPoint]
    capacity: CapacityPlan | None
    precisions: dict | None
    warnings: list[str] = field(default_factory=list)
    trials: int = 0

    best_point: OperatingPoint | None = None
    """What the report states for the winner (:func:`tritontune.study.verdict.best_point`): the playoff's
    figures (older studies: the confirmed point when it held)."""
    figures: str = "screening"
    """Where ``best_point`` comes from: playoff, confirmed or screening."""
    gain: Interval | None = None
    """The winner's gain over the baseline (the playoff's per-round ratios)."""
    playoff: PlayoffResult | None = None
    predictions: list[PredictionCheck] = field(default_factory=list)
    """``--strategy predict``: each measured config's prediction (empty for other searches)."""
    steps: dict[str, tuple[StepFigure, ...]] = field(default_factory=dict)
    """A pipeline's models at the baseline's and the winner's operating points ("baseline",
    "winner"): queue and compute per request, and the bottleneck (empty for one model)."""

    def bottleneck_of(self, which: str) -> str | None:
        """The model the :attr:`steps` of ``which`` spend the most time in."""
        step = pipeline_bottleneck(self.steps.get(which, ()), self.model)
        return step.model if step else None

    @property
    def calls(self) -> bool:
        """The pipeline's entry is a BLS model (its compute includes the calls it waits for)."""
        return any(step.model == self.model for steps in self.steps.values() for step in steps)

    @property
    def prediction_error(self) -> tuple[float, float] | None:
        """Median and 90th percentile of the throughput predictions' errors."""
        errors = sorted(check.error for check in self.predictions)
        if not errors:
            return None
        return statistics.median(errors), errors[min(len(errors) - 1, int(0.9 * len(errors)))]

    @property
    def gpu_points(self) -> list[MeasuredPoint]:
        """The measured levels that have GPU figures (none on a CPU-only server)."""
        return [p for p in self.points if p.gpu]

    @property
    def gpu_note(self) -> str | None:
        """Why the report has no GPU figures, said rather than shown as zeros."""
        return None if self.gpu_points else NO_GPUS

    def improvement(self, result: TrialResult) -> float | None:
        """A screening figure's gain over the baseline's screening figure."""
        return gain_over_baseline(self.baseline, result.throughput)

    def to_dict(self) -> dict:
        """The report's figures as JSON (embedded in the HTML for machines and tests)."""
        return {
            "study": self.study_name,
            "model": self.model,
            "slo_p99_ms": self.slo_p99_s * 1e3,
            "load_mode": self.load_mode.value,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "best_trial": self.best.number if self.best else None,
            "best": self.best_point.to_dict() if self.best_point else None,
            "figures": self.figures,
            "gain": self.gain.to_dict(4) if self.gain else None,
            "playoff": self.playoff.to_dict() if self.playoff else None,
            "top": [
                {
                    "trial": r.number,
                    "knobs": r.knobs,
                    "accuracy": r.accuracy,
                    "load": r.operating_point.load if r.operating_point else None,
                    "throughput": r.throughput,
                    "p50_ms": _ms(r.operating_point.p50_s) if r.operating_point else None,
                    "p95_ms": _ms(p95_at(r.operating_point)) if r.operating_point else None,
                    "p99_ms": _ms(r.operating_point.p99_s) if r.operating_point else None,
                    "improvement": self.improvement(r),
                }
                for r in self.top
            ],
            "points": len(self.points),
            "frontier": [
                {"trial": p.trial, "load": p.load, "throughput": p.throughput, "p99_ms": _ms(p.p99_s)}
                for p in self.points
                if p.on_frontier
            ],
            "capacity": self.capacity.to_dict() if self.capacity else None,
            "predictions": [check.to_dict() for check in self.predictions],
            "steps": {
                which: {
                    "steps": [step.to_dict() for step in steps],
                    "bottleneck": self.bottleneck_of(which),
                }
                for which, steps in self.steps.items()
            },
            "warnings": self.warnings,
            "trials": self.trials,
            "gpu": [
                {
                    "trial": p.trial,
                    "load": p.load,
                    "p99_ms": _ms(p.p99_s),
                    "gpus": [g.to_dict() for g in p.gpu or ()],
                }
                for p in self.gpu_points
            ]
            or self.gpu_note,
        }


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1e3, 4)


def level_at(op: OperatingPoint) -> LevelResult | None:
    """The measured level the operating point was taken from."""
    return next((lv for lv in op.levels if lv.load == op.load), None)


def p95_at(op: OperatingPoint) -> float | None:
    level = level_at(op)
    return level.p95_s if level else None


def pareto_front(points: list[MeasuredPoint]) -> list[MeasuredPoint]:
    """``points`` with ``on_frontier`` set: no other point has more throughput at no higher p99."""
    ordered = sorted(points, key=lambda p: (p.p99_s, -p.throughput))
    best_so_far = float("-inf")
    front = set()
    for point in ordered:
        if point.throughput > best_so_far:
            front.add(id(point))
            best_so_far = point.throughput
    return [replace(p, on_frontier=id(p) in front) for p in points]


def _points(baseline: OperatingPoint | None, results: list[TrialResult]) -> list[MeasuredPoint]:
    points = []
    sources = [(None, baseline)] + [(r.number, r.operating_point) for r in results]
    for trial, op in sources:
        if op is None:
            continue
        for level in op.levels:
            points.append(
                MeasuredPoint(
                    trial,
                    level.load,
                    level.throughput,
                    level.p50_s,
                    level.p99_s,
                    level.meets_slo,
                    gpu=level.gpu,
                )
            )
    return pareto_front(points)


def _warnings(
    baseline: OperatingPoint | None, results: list[TrialResult], best: OperatingPoint | None
) -> list[str]:
    found = []
    if best is not None and best.p50_s > 0 and best.p99_s / best.p50_s > TAIL_RATIO_WARNING:
        found.append(
            f"the best config's p99/p50 is {best.p99_s / best.p50_s:.1f} at its operating point "
            f"(above {TAIL_RATIO_WARNING:g}): queueing, stragglers or pauses; look before relying "
            "on the tail"
        )
    levels = [(None, lv) for lv in (baseline.levels if baseline else [])] + [
        (r.number, lv) for r in results if r.operating_point for lv in r.operating_point.levels
    ]
    with_errors = [(t, lv) for t, lv in levels if lv.errors]
    if with_errors:
        worst_trial, worst = max(
            with_errors, key=lambda tl: tl[1].errors / max(tl[1].requests, tl[1].errors, 1)
        )
        rate = worst.errors / max(worst.requests, worst.errors, 1)
        where = "the baseline" if worst_trial is None else f"trial {worst_trial}"
        found.append(
            f"{len(with_errors)} measured level(s) had failed requests; worst: {where} at "
            f"load {worst.load:g}, {worst.errors} failed ({rate:.1%})"
        )
    unstable = [(t, lv) for t, lv in levels if not lv.stable]
    if unstable:
        found.append(
            f"{len(unstable)} of {len(levels)} measured levels never became stable (their "
            "windows kept disagreeing): figures from a noisy machine; measure longer "
            "(--window) or on a quieter one"
        )
    return found


def collect(
    study: StudyRecord,
    *,
    top: int = 10,
    headroom: float = DEFAULT_HEADROOM,
    peak: float | None = None,
) -> ReportData:
    """Everything a report of ``study`` shows (read it with ``TuningStudy.read()``)."""
    results = study.results
    stated = best_point(study)
    best = stated.result if stated else (None if study.playoff else study.best)
    baseline = study.baseline
    data = ReportData(
        study_name=study.name,
        model=study.identity.model,
        slo_p99_s=study.identity.slo_p99_s,
        load_mode=study.identity.load_mode,
        server_version=study.context.server_version,
        host=study.context.host,
        created=study.created,
        baseline=baseline,
        best=best,
        top=study.feasible[:top],
        failed=study.failed,
        points=_points(baseline, results),
        capacity=None,
        precisions={p: check.to_dict() for p, check in study.precisions.items()} or None,
        trials=len(results),
        best_point=stated.point if stated else None,
        figures=stated.figures if stated else "screening",
        gain=gain_of(study, stated) if stated else None,
        playoff=study.playoff,
        predictions=prediction_checks(results),
    )
    winner_op = best.operating_point if best else None
    for which, op in (("baseline", baseline), ("winner", winner_op)):
        if op is not None and op.steps:
            data.steps[which] = op.steps
    point = data.best_point
    data.capacity = plan_capacity(point, headroom=headroom, peak=peak) if point else None
    data.warnings = _warnings(baseline, results, point)
    return data
