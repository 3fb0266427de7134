"""``search --workload``: the config with the highest capacity for a mixed workload.

The same ask-measure-tell loop as the single-class search, with a workload's objective: a trial's
value is the highest total rate (the workload's mix scaled up) at which every class met its
objective (:func:`find_traffic_capacity`). The space grows by the scheduler's knobs: whether the
classes' priority levels are used (``priorities``), and admission control, the lowest level's
``max_queue_size`` (``admission``, ``none`` for an unbounded queue). Batch sizes smaller than a
class's requests are left out of the space (those requests could not be served).

After the budget, the top configs, the best one split into one endpoint per class
(:func:`endpoint_variants`: the other serving layout) and the baseline (the model's own config as
it is) are measured again in interleaved rounds, and the winner is the best median: one screening
figure on a noisy machine picks a lucky config as often as a good one. Each finalist keeps the
config text of every model it serves, so ``export`` writes exactly what was measured.
"""

from __future__ import annotations

import dataclasses
import statistics
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import optuna

from tritontune.config.model_config import ModelConfig, config_to_text, copy_config
from tritontune.config.variant import Variant, describe_config
from tritontune.errors import ServerError
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import Layout, Traffic
from tritontune.search.optimize import study_context, trial_variant
from tritontune.search.sampler import snapping
from tritontune.search.space import Choice, SearchSpace
from tritontune.search.study import (
    WorkloadTrial,
    ensure_context,
    find_twin,
    open_workload_study,
    read_workload_trials,
    save_point,
    save_workload_final,
    tell_capacity,
    tell_copy,
    tell_failed,
)
from tritontune.search.traffic_capacity import TrafficCapacity, find_traffic_capacity
from tritontune.session import Session

#: Admission control bounds searched (the lowest priority level's queue, in requests).
ADMISSION_CHOICES: tuple[Any, ...] = ("none", 16, 64, 256)


@dataclass(frozen=True)
class WorkloadSearchSettings:
    trials: int = 12
    seed: int | None = None
    storage: str | optuna.storages.BaseStorage = "sqlite:///tritontune.db"
    study_name: str | None = None
    start_rate: float = 20.0
    top: int = 2
    """Configs re-measured against the baseline after the budget."""
    rounds: int = 3
    endpoints: bool = True
    """Also measure the best config as one endpoint per class (needs a server tritontune
    launched: the endpoints are models it adds to the repository)."""

    def study_name_for(self, model: str, traffic: Traffic) -> str:
        names = "-".join(c.name for c in traffic.classes)
        return self.study_name or f"{model}-workload-{names}"


@dataclass(frozen=True)
class Finalist:
    """One config of the final rounds: its rates (one per round) and their median."""

    trial: int | None
    """None: the baseline (the model's own config)."""
    knobs: dict[str, Any]
    rates: tuple[float, ...]
    layout: Layout = Layout.SHARED
    models: dict[str, str] = field(default_factory=dict)
    """The name of each model it serves -> its config.pbtxt text, as measured."""
    routes: dict[str, str] = field(default_factory=dict)
    """Class -> the model its requests go to."""

    @property
    def median(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def label(self) -> str:
        who = "baseline" if self.trial is None else f"trial {self.trial}"
        return who + (" as endpoints" if self.layout == Layout.ENDPOINTS else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "layout": str(self.layout),
            "knobs": self.knobs,
            "total_rates_per_s": [round(r, 3) for r in self.rates],
            "median_total_rate_per_s": round(self.median, 3),
            "routes": self.routes,
            "models": self.models,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finalist:
        return cls(
            trial=data.get("trial"),
            knobs=dict(data.get("knobs") or {}),
            rates=tuple(float(r) for r in data.get("total_rates_per_s") or ()),
            layout=Layout(data.get("layout", Layout.SHARED)),
            models=dict(data.get("models") or {}),
            routes=dict(data.get("routes") or {}),
        )


@dataclass(frozen=True)
class WorkloadSearchResult:
    study_name: str
    trials: list[WorkloadTrial]
    finalists: list[Finalist] = field(default_factory=list)
    last_capacity: dict[str, TrafficCapacity] = field(default_factory=dict)
    """Each finalist's capacity in the last round (by :attr:`Finalist.label`), every level's
    figures (for the report)."""

    def winner_capacity(self) -> TrafficCapacity | None:
        winner = self.winner
        return self.last_capacity.get(winner.label) if winner is not None else None

    @property
    def winner(self) -> Finalist | None:
        return max(self.finalists, key=lambda f: f.median, default=None)

    @property
    def baseline(self) -> Finalist | None:
        return next((f for f in self.finalists if f.trial is None), None)

    def best_of(self, layout: Layout) -> Finalist | None:
        """The best finalist served in ``layout`` (the baseline is a shared model)."""
        return max(
            (f for f in self.finalists if f.layout == layout and f.trial is not None),
            key=lambda f: f.median,
            default=None,
        )

    @property
    def layout_ratio(self) -> float | None:
        """The best shared config's median over the endpoints' (> 1: sharing wins)."""
        shared, endpoints = self.best_of(Layout.SHARED), self.best_of(Layout.ENDPOINTS)
        if shared is None or endpoints is None or endpoints.median <= 0:
            return None
        return shared.median / endpoints.median

    def to_dict(self) -> dict[str, Any]:
        winner, baseline = self.winner, self.baseline
        gain = None
        if winner is not None and baseline is not None and baseline.median > 0:
            gain = winner.median / baseline.median
        return {
            "study": self.study_name,
            "winner": winner.to_dict() if winner else None,
            "gain_over_baseline": gain,
            "shared_over_endpoints": self.layout_ratio,
            "finalists": [f.to_dict() for f in self.finalists],
            "trials": [
                {
                    "trial": t.number,
                    "point": t.params,
                    "knobs": t.knobs,
                    "total_rate_per_s": t.total_rate,
                    "error": t.error,
                }
                for t in self.trials
            ],
        }


@dataclass
class WorkloadSearchProgress:
    on_trial_done: Callable[[int, WorkloadTrial], None] | None = None
    on_final_round: Callable[[int, Finalist, float], None] | None = None


def workload_space(space: SearchSpace, traffic: Traffic) -> SearchSpace:
    """``space`` without batch sizes too small for a class's requests."""
    largest = max(c.request.batch_size for c in traffic.classes)
    batch_sizes = space.dimensions.get("max_batch_size")
    if isinstance(batch_sizes, Choice):
        kept = tuple(v for v in batch_sizes.values if v >= largest)
        return space.replace("max_batch_size", Choice(kept or (largest,)))
    return space


def _split_point(point: dict[str, Any]) -> tuple[dict[str, Any], int | None]:
    """A workload point's knobs of the space, and its admission bound (None: unbounded)."""
    knobs = {k: v for k, v in point.items() if k not in ("priorities", "admission")}
    admission = point.get("admission", "none")
    return knobs, None if admission == "none" else int(admission)


def point_variant(space: SearchSpace, traffic: Traffic, point: dict[str, Any]) -> Variant:
    """The config a workload point stands for: the space's knobs, then the scheduler's."""
    knobs, admission = _split_point(point)
    if point.get("dynamic_batching", True) is False:
        return space.to_variant(knobs)  # no scheduler queue: no priorities, timeouts or bound
    return traffic.scheduled(
        space.to_variant(knobs),
        priorities=bool(point.get("priorities", False)),
        admission=admission,
    )


def endpoint_variants(
    traffic: Traffic, variant: Variant, instances: int, admission: int | None
) -> dict[str, Variant]:
    """The other layout of a config: one endpoint per class, each with ``variant``'s knobs and no
    priority levels (it serves one class), the class's queue timeout as its queue's, the
    admission bound on the endpoints of classes that may be shed, and the class's share of the
    ``instances`` by inference demand (rate x batch size), at least one each."""
    fractions = traffic.fractions()
    demand = {c.name: fractions[c.name] * c.request.batch_size for c in traffic.classes}
    total = sum(demand.values())
    out = {}
    for c in traffic.classes:
        timeout = c.request.timeout_us or None
        out[c.name] = dataclasses.replace(
            variant,
            instance_count=max(1, round(instances * demand[c.name] / total)),
            priority_levels=0,
            default_priority_level=None,
            priority_queue_policies=(),
            max_queue_size=admission if c.may_shed else None,
            queue_timeout_us=timeout,
            timeout_action="reject" if timeout else None,
            allow_timeout_override=None,
        )
    return out


def _suggest(trial: optuna.Trial, space: SearchSpace, traffic: Traffic) -> dict[str, Any]:
    point = space.suggest(trial)
    if point.get("dynamic_batching", True) is False:
        return point  # no scheduler knobs without the dynamic batcher's queue
    if traffic.priority_levels:
        point["priorities"] = trial.suggest_categorical("priorities", [True, False])
    point["admission"] = trial.suggest_categorical("admission", list(ADMISSION_CHOICES))
    return point


def capacity_of(
    session: Session,
    traffic: Traffic,
    variant: Variant | dict[str, Variant],
    start_rate: float,
) -> TrafficCapacity:
    """The capacity of one config (a shared model), or of one endpoint per class (a mapping)."""
    if isinstance(variant, dict):
        session.load_endpoints(variant)
    else:
        session.load_variant(variant)

    def measure(rate: float) -> TrafficMeasurement:
        return session.measure_traffic(traffic, rate)

    return find_traffic_capacity(measure, traffic, start=start_rate)


def run_workload_search(
    session: Session,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    progress: WorkloadSearchProgress | None = None,
) -> WorkloadSearchResult:
    """Search, then re-measure the top configs and the baseline (the session's server must be
    started)."""
    progress = progress or WorkloadSearchProgress()
    space = workload_space(space, traffic)
    with warnings.catch_warnings():  # TPE's ``group`` option is marked experimental
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        base = optuna.samplers.TPESampler(
            seed=settings.seed,
            n_startup_trials=min(10, max(3, settings.trials // 3)),
            multivariate=True,
            group=True,
        )
    name = settings.study_name_for(session.name, traffic)
    study, _ = open_workload_study(
        settings.storage,
        name,
        model=session.name,
        workload=traffic.to_dict(),
        sampler=snapping(base, space),
    )
    ensure_context(study, lambda: study_context(session, session.settings))
    repeats = 0
    while len(read_workload_trials(study)) < settings.trials and repeats < 3 * settings.trials:
        trial = study.ask()
        point = _suggest(trial, space, traffic)
        save_point(trial, point)
        twin = find_twin(study.get_trials(deepcopy=False), trial.number, point)
        if twin is not None:
            tell_copy(study, trial, twin)
            repeats += 1
            continue
        _run_trial(study, trial, point, session, space, traffic, settings)
        if progress.on_trial_done:
            finished = read_workload_trials(study)
            done = next(t for t in finished if t.number == trial.number)
            progress.on_trial_done(len(finished), done)
    trials = read_workload_trials(study)
    finalists, last = _final_rounds(session, space, traffic, settings, trials, progress)
    result = WorkloadSearchResult(name, trials, finalists, last)
    save_workload_final(study, {k: v for k, v in result.to_dict().items() if k != "trials"})
    return result


def _run_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    point: dict[str, Any],
    session: Session,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
) -> None:
    variant = trial_variant(study, trial, session, lambda: point_variant(space, traffic, point))
    if variant is None:
        return
    try:
        capacity = capacity_of(session, traffic, variant, settings.start_rate)
    except ServerError as err:
        session.launcher.check_alive()
        tell_failed(study, trial, str(err))
        return
    tell_capacity(study, trial, capacity.to_dict(), capacity.highest_rate)


def _final_rounds(
    session: Session,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    trials: list[WorkloadTrial],
    progress: WorkloadSearchProgress,
) -> tuple[list[Finalist], dict[str, TrafficCapacity]]:
    entries = _finalist_entries(session, space, traffic, settings, trials)
    rates: list[list[float]] = [[] for _ in entries]
    last: dict[str, TrafficCapacity] = {}
    for round_number in range(settings.rounds):
        for i, (finalist, variant) in enumerate(entries):
            capacity = capacity_of(session, traffic, variant, settings.start_rate)
            last[finalist.label] = capacity
            rates[i].append(capacity.highest_rate)
            if progress.on_final_round:
                shown = dataclasses.replace(finalist, rates=tuple(rates[i]))
                progress.on_final_round(round_number + 1, shown, capacity.highest_rate)
    finalists = [
        dataclasses.replace(finalist, rates=tuple(r))
        for (finalist, _), r in zip(entries, rates, strict=True)
    ]
    return finalists, last


def _finalist_entries(
    session: Session,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    trials: list[WorkloadTrial],
) -> list[tuple[Finalist, Variant | dict[str, Variant]]]:
    """The finalists (not yet measured) and what each loads: the top trials, the best one as
    one endpoint per class, and the baseline."""
    name = session.name
    everyone = {c.name: name for c in traffic.classes}
    entries: list[tuple[Finalist, Variant | dict[str, Variant]]] = []
    top = [t for t in trials if t.total_rate][: settings.top]
    for t in top:
        variant = point_variant(space, traffic, t.params)
        config = session.build_config(variant)
        entries.append(
            (Finalist(t.number, t.knobs, (), Layout.SHARED, _texts({name: config}), everyone), variant)
        )
    if top and settings.endpoints and session.launcher.owns_server:
        best = top[0]
        knobs, admission = _split_point(best.params)
        variant = space.to_variant(knobs)
        instances = _instances(session.build_config(variant))
        split = endpoint_variants(traffic, variant, instances, admission)
        models = {f"{name}_{role}": session.build_config(v) for role, v in split.items()}
        knobs = {role: describe_config(models[f"{name}_{role}"]) for role in split}
        routes = {role: f"{name}_{role}" for role in split}
        entries.append(
            (Finalist(best.number, knobs, (), Layout.ENDPOINTS, _texts(models), routes), split)
        )
    baseline = Variant()
    config = session.build_config(baseline)
    entries.append(
        (
            Finalist(None, describe_config(config), (), Layout.SHARED, _texts({name: config}), everyone),
            baseline,
        )
    )
    return entries


def _instances(config: ModelConfig) -> int:
    return sum(group.count or 1 for group in config.instance_group) or 1


def _texts(configs: dict[str, ModelConfig]) -> dict[str, str]:
    """Each config's text, named for the model that serves it (as an export writes it)."""
    out = {}
    for model, config in configs.items():
        named = copy_config(config)
        named.name = model
        out[model] = config_to_text(named)
    return out
