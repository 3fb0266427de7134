"""``search --workload``: the config with the highest capacity for a traffic mix.

The study driver (:mod:`tritontune.search.driver`) with a traffic mix's objective
(:mod:`tritontune.search.traffic_objective`: the work served at capacity; the space grows by the
priority levels, admission control and the serving layout, :mod:`tritontune.search.endpoint_layout`)
and final rounds (:mod:`tritontune.search.traffic_finals`), so it has every guarantee of the
single-class search. Batch sizes smaller than a class's requests are left out of the space
(:func:`workload_space`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from tritontune.errors import InputError
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import Layout, Traffic
from tritontune.precision.prepare import AccuracySettings
from tritontune.search.driver import StudyPlan, drive
from tritontune.search.endpoint_layout import EndpointChoices
from tritontune.search.first_trials import FirstTrials
from tritontune.search.loop import LoopProgress
from tritontune.search.phases import Phases
from tritontune.search.pipeline_space import PipelineSpace
from tritontune.search.precisions import PrecisionsProgress
from tritontune.search.setup import make_sampler
from tritontune.search.space import Choice, SearchSpace
from tritontune.search.traffic_capacity import DEFAULT_START_RATE, TrafficCapacity
from tritontune.search.traffic_finals import TrafficFinals
from tritontune.search.traffic_objective import WORKLOAD_MEASURE, RatesSoFar, TrafficObjective
from tritontune.serving.bench import Bench
from tritontune.study.figures import Finalist
from tritontune.study.handle import TuningStudy
from tritontune.study.records import RecordedPrecision, TrialResult, WorkloadFinal, WorkloadIdentity
from tritontune.study.storage import DEFAULT_STORAGE, storage_label


@dataclass(frozen=True)
class WorkloadSearchSettings:
    trials: int | None = 12
    timeout_s: float | None = None
    seed: int | None = None
    storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE
    study_name: str | None = None
    host_group: str | None = None
    """Workers on other hardware search as their own group (``NAME@GROUP``)."""
    start_rate: float = DEFAULT_START_RATE
    max_rate: float | None = None
    """The highest total rate (req/s, every class together) a capacity ramp tries (None:
    :data:`DEFAULT_MAX_RATE`): what the clients can ever send, or a small cap where a test
    checks plumbing."""
    top: int = 2
    """Configs re-measured against the baseline after the budget."""
    rounds: int = 3
    endpoints: bool = True
    """Also measure the best config as one endpoint per class (needs a server tritontune
    launched: the endpoints are models it adds to the repository)."""
    layouts: tuple[Layout, ...] | None = None
    """The serving layouts the trials search (None: both where :attr:`endpoints` allows them
    and the workload has several classes, else the shared model only)."""
    endpoint_knobs: bool = True
    """An endpoint trial also searches each endpoint's own ``max_batch_size`` and instance count
    (where the space has several), rather than only splitting the trial's config."""
    measure: MeasureSettings = WORKLOAD_MEASURE
    sampler: optuna.samplers.BaseSampler | None = None
    accuracy: AccuracySettings | None = None
    """How precision variants are judged (on the classes' own request data)."""

    def study_name_for(self, model: str, traffic: Traffic) -> str:
        names = "-".join(c.name for c in traffic.classes)
        name = self.study_name or f"{model}-workload-{names}"
        return f"{name}@{self.host_group}" if self.host_group else name

    @property
    def storage_name(self) -> str:
        return storage_label(self.storage)


@dataclass(frozen=True)
class WorkloadSearchResult:
    study_name: str
    trials: list[TrialResult]
    """The measured (or failed) trials, best first."""
    final: WorkloadFinal = field(default_factory=lambda: WorkloadFinal((), None))
    last_capacity: dict[str, TrafficCapacity] = field(default_factory=dict)
    """Each finalist's capacity in the last round (by :attr:`Finalist.label`), every level's
    figures (for the report)."""
    stop_reason: str | None = None
    trials_this_run: int = 0
    restarts: int = 0
    precisions: dict[str, RecordedPrecision] = field(default_factory=dict)
    """The precision variants checked before the search: accepted or not, with accuracy."""
    final_rounds_reused: bool = False
    """The final rounds were not run by this run: the study's were over the same finalists
    (kept; empty while another worker of a shared study runs them)."""
    phases: Phases = field(default_factory=Phases)
    """Seconds per phase of this run."""
    settled_after: dict[str, int] = field(default_factory=dict)
    """Finalists whose place no further round could change, by label: after how many rounds
    they sat out the rest (:func:`tritontune.study.duet.settled`)."""

    @property
    def finalists(self) -> tuple[Finalist, ...]:
        return self.final.finalists

    @property
    def winner(self) -> Finalist | None:
        return self.final.winner

    @property
    def baseline(self) -> Finalist | None:
        return self.final.baseline

    def best_of(self, layout: Layout) -> Finalist | None:
        return self.final.best_of(layout)

    @property
    def layout_ratio(self) -> float | None:
        return self.final.layout_ratio

    def winner_capacity(self) -> TrafficCapacity | None:
        winner = self.winner
        return self.last_capacity.get(winner.label) if winner is not None else None

    def winner_at_capacity(self) -> dict[str, Any] | None:
        """The winner's last final round at its capacity: each class's work served, and each
        model's own figures from Triton's statistics of the same span (which class it served,
        its requests, batches, queue and compute time per request)."""
        winner, capacity = self.winner, self.winner_capacity()
        if winner is None or capacity is None or capacity.best is None:
            return None
        by_model = {}
        for model, split in capacity.best.server.items():
            by_model[model] = {
                "classes": [c for c, m in winner.routes.items() if m == model],
                "requests": split.requests,
                "executions": split.executions,
                "avg_batch_size": round(split.avg_batch_size, 3),
                "avg_queue_ms": round(split.avg_queue_s * 1e3, 4),
                "avg_compute_ms": round(split.avg_compute_s * 1e3, 4),
            }
        return {
            "total_rate_per_s": round(capacity.total_rate, 3),
            "served_infer_per_s_by_class": {
                name: round(v, 3) for name, v in capacity.served_by_class().items()
            },
            "by_class": capacity.class_figures(),
            "by_model": by_model,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "study": self.study_name,
            "precisions": {p: c.to_dict() for p, c in self.precisions.items()} or None,
            **self.final.to_dict(),
            "trials": [
                {
                    "trial": t.number,
                    "point": t.params,
                    "knobs": t.knobs,
                    "served_infer_per_s": t.served,
                    "served_infer_per_s_by_class": (
                        t.capacity.detail.get("served_infer_per_s_by_class") if t.capacity else None
                    ),
                    "total_rate_per_s": t.total_rate,
                    "error": t.error,
                }
                for t in self.trials
            ],
            "winner_at_capacity": self.winner_at_capacity(),
            "final_rounds_reused": self.final_rounds_reused,
            "final_rounds_settled_after": dict(self.settled_after),
            "phase_seconds": dict(self.phases.seconds),
            "stopped_early_because": self.stop_reason,
            "trials_this_run": self.trials_this_run,
            "server_restarts": self.restarts,
        }


@dataclass
class WorkloadSearchProgress:
    on_trial_start: Callable[[int, int | None, dict[str, Any]], None] | None = None
    on_trial_done: Callable[[TrialResult, TrialResult | None, float | None], None] | None = None
    """(this trial, the best so far, ETA in seconds or None)."""
    on_final_round: Callable[[int, Finalist, float | None], None] | None = None
    """(round, finalist, its total rate; None when it failed)."""
    on_precisions: PrecisionsProgress | None = None
    """The precision variants built and checked before the search (accepted or not)."""
    on_first_trials: Callable[[FirstTrials], None] | None = None
    """The first trials (each accepted precision, each compute setting)."""
    on_settled: Callable[[dict[str, int]], None] | None = None
    """The finalists that sat out the last rounds, by label: after how many rounds."""


def workload_space(space: SearchSpace, traffic: Traffic) -> SearchSpace:
    """``space`` without batch sizes too small for a class's requests; for several models (a
    workload whose classes name them), each model's without those too small for its classes."""
    if isinstance(space, PipelineSpace) and traffic.routed:
        parts = {m: workload_space(space.part(m), traffic.served_by(m)) for m in space.models}
        return PipelineSpace.of(parts, budget=space.budget)
    largest = max(c.request.batch_size for c in traffic.classes)
    batch_sizes = space.dimensions.get("max_batch_size")
    if isinstance(batch_sizes, Choice):
        kept = tuple(v for v in batch_sizes.values if v >= largest)
        return space.replace("max_batch_size", Choice(kept or (largest,)))
    return space


def searched_layouts(
    settings: WorkloadSearchSettings, owns_server: bool, traffic: Traffic
) -> tuple[Layout, ...]:
    """The serving layouts the trials search: both where the settings allow endpoints, the
    server is tritontune's (endpoints are models it adds to the repository) and the workload has
    several classes; else the shared model only. A workload whose classes name their models has
    no endpoints to split (each class has its model already): asking for them is refused."""
    if traffic.routed:
        if settings.layouts is not None and Layout.ENDPOINTS in settings.layouts:
            raise InputError(_ROUTED_ENDPOINTS)
        return (Layout.SHARED,)
    both = settings.endpoints and owns_server and len(traffic.classes) > 1
    layouts = settings.layouts or ((Layout.SHARED, Layout.ENDPOINTS) if both else (Layout.SHARED,))
    return layouts if owns_server else (Layout.SHARED,)


_ROUTED_ENDPOINTS = (
    "--layout endpoints: the classes of this workload name their models, so each class has its "
    "own model already; the endpoints layout splits one model's classes (leave --layout out)"
)


def run_workload_search(
    session: Bench,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    progress: WorkloadSearchProgress | None = None,
) -> WorkloadSearchResult:
    """Search, then re-measure the top configs and the baseline (the bench's server must be
    started)."""
    progress = progress or WorkloadSearchProgress()
    endpoint_choices = EndpointChoices.of(space)  # before the shared model's batch sizes narrow
    layouts = searched_layouts(settings, session.owns_server, traffic)
    space = workload_space(space, traffic)
    model = session.source.name
    name = settings.study_name_for(model, traffic)
    study = TuningStudy.create_or_resume(
        settings.storage,
        name,
        identity=WorkloadIdentity(model, traffic.to_dict()),
        sampler=make_sampler(settings.trials, settings.seed, settings.sampler),
    )
    finals = TrafficFinals(
        session,
        settings.top,
        settings.rounds,
        settings.endpoints,
        on_final_round=progress.on_final_round,
        on_settled=progress.on_settled,
    )

    def objective(checked: SearchSpace, _: Phases) -> TrafficObjective:
        return TrafficObjective(
            checked,
            traffic,
            settings.start_rate,
            settings.measure,
            settings.max_rate,
            layouts=layouts,
            endpoint_choices=endpoint_choices if settings.endpoint_knobs else EndpointChoices(),
            rates_so_far=lambda: RatesSoFar.of(study.read_workload().results, settings.top),
        )

    driven = drive(
        study,
        session,
        space,
        StudyPlan(
            objective=objective,
            finals=finals,
            limits=settings,
            traffic=traffic,
            sized_budget=False,
            on_precisions=progress.on_precisions,
            on_first_trials=progress.on_first_trials,
            loop=LoopProgress(progress.on_trial_start, progress.on_trial_done),
        ),
    )
    record = finals.record or study.read_workload()  # read once for the finals, after the trials
    return WorkloadSearchResult(
        name,
        record.results,
        finals.final or record.final or WorkloadFinal((), None),
        finals.last,
        stop_reason=driven.outcome.stop_reason,
        trials_this_run=driven.outcome.trials_this_run,
        restarts=driven.restarts,
        precisions=record.precisions,
        final_rounds_reused=not driven.finals_run,
        phases=driven.phases,
        settled_after=finals.settled_after,
    )
