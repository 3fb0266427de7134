"""The one search loop: ask, dedupe, heartbeat, evaluate, tell (Optuna's ``_optimize.py`` shape).

Every kind of search runs this loop with its own :class:`~tritontune.search.objective.Objective`,
so every kind gets every guarantee: the budget (:class:`Budget`: trials of every worker,
``--timeout``, an exhausted space); dedupe (a config measured, or being measured by another
worker, is never measured again: :func:`~tritontune.search.space.effective_point`); workers'
heartbeats, and lost trials queued again; faults (:func:`tritontune.serving.faults.with_restarts`:
a dead server restarted and the config measured again); and Ctrl-C (the trial in flight queued
again, so the same command resumes). See ``docs/architecture.md``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from tritontune.config.pipeline import configs_to_text, describe_configs
from tritontune.errors import ConfigError
from tritontune.hostinfo import WorkerId, this_worker
from tritontune.search.objective import Objective
from tritontune.search.space import DIMENSIONS, effective_point
from tritontune.serving.bench import Bench
from tritontune.serving.faults import ConfigFailed, with_restarts
from tritontune.study.coordination import HEARTBEAT_INTERVAL_S
from tritontune.study.handle import TuningStudy
from tritontune.study.records import TrialResult

#: Re-proposals of known points in a row after which the search stops (the space is worn out).
MAX_REPEATS = 50
#: How often a worker with nothing left to start looks again at the others' running trials.
HEARTBEAT_WAIT_S = 0.2


@dataclass
class Budget:
    """When the search stops: the trial budget, the deadline, an exhausted space, or a sampler
    that keeps proposing configs it already has. Also the ETA, from the trials' durations."""

    trials: int | None
    deadline: float | None
    """``time.monotonic()`` after which no trial starts."""
    space_size: int | None
    counted: int = 0
    """Trials that count towards ``trials`` (resumed ones, and other workers', too)."""
    repeats: int = 0
    durations: list[float] = field(default_factory=list)
    stop_reason: str | None = None
    """Why the search stopped before the budget ran out, once it did."""

    @classmethod
    def start(cls, trials: int | None, timeout_s: float | None, space_size: int | None) -> Budget:
        deadline = time.monotonic() + timeout_s if timeout_s else None
        return cls(trials, deadline, space_size)

    def spent(self, distinct_configs: int, running: int = 0) -> bool:
        """Whether to start no more trials (``stop_reason`` says why, when it is not the budget
        itself). ``running``: other workers' trials in flight, which will count when done."""
        if self.trials is not None and self.counted + running >= self.trials:
            return True
        if self.deadline is not None and time.monotonic() >= self.deadline:
            return True
        if self.space_size is not None and distinct_configs >= self.space_size:
            self.stop_reason = f"every one of the space's {self.space_size} configs was tried"
            return True
        if self.repeats >= MAX_REPEATS:
            self.stop_reason = f"the sampler proposed only known configs {MAX_REPEATS} times in a row"
            return True
        return False

    def repeated(self) -> None:
        self.repeats += 1

    def finished(self, duration_s: float, counted: int) -> None:
        """A trial of this worker finished; ``counted``: the study's count now (all workers)."""
        self.repeats = 0
        self.counted = counted
        self.durations.append(duration_s)

    def eta(self) -> float | None:
        """Seconds left: the median trial's duration times the trials left, capped by the
        deadline; None when neither bounds the search."""
        eta = None
        if self.trials is not None and self.durations:
            eta = statistics.median(self.durations) * max(0, self.trials - self.counted)
        if self.deadline is not None:
            left = max(0.0, self.deadline - time.monotonic())
            eta = left if eta is None else min(eta, left)
        return eta

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline


@dataclass
class LoopProgress:
    """Optional hooks for a live display; every one gets plain data."""

    on_trial_start: Callable[[int, int | None, dict[str, Any]], None] | None = None
    """(the trial's count among the study's, the budget, its point)."""
    on_trial_done: Callable[[TrialResult, TrialResult | None, float | None], None] | None = None
    """(this trial, the best so far, ETA in seconds or None)."""


@dataclass(frozen=True)
class LoopOutcome:
    """What this run of the loop did."""

    trials_this_run: int
    stop_reason: str | None
    """Why the search stopped before its budget, if it did."""


def optimize(
    study: TuningStudy,
    objective: Objective,
    bench: Bench,
    budget: Budget,
    *,
    progress: LoopProgress | None = None,
    worker: WorkerId | None = None,
) -> LoopOutcome:
    """Run trials until ``budget`` is spent (see the module docstring)."""
    progress = progress or LoopProgress()
    worker = worker or this_worker()
    run_now = 0
    next_recovery = 0.0
    while True:
        if time.monotonic() >= next_recovery:  # lost trials show within a heartbeat interval
            study.recover_lost_trials()
            next_recovery = time.monotonic() + HEARTBEAT_INTERVAL_S
        snapshot = study.snapshot()  # one read per iteration: the storage is shared
        known = snapshot.counted()  # this worker's and the others' finished configs
        budget.counted = len(known)
        others = snapshot.running()
        if budget.spent(len(known), running=others):
            if others and budget.stop_reason is None and not budget.out_of_time():
                time.sleep(HEARTBEAT_WAIT_S)  # wait for other workers' trials: done or lost
                continue
            break
        trial = study.ask()
        point = objective.suggest(trial)
        study.save_point(trial, point, DIMENSIONS)
        now = study.snapshot()  # after the point is saved: see _twin in coordination
        twin = now.twin(trial.number, point, effective_point)  # one config, one measurement
        if twin is not None:
            if twin.running:
                study.tell_deferred(trial, twin.number)  # another worker is measuring it
            else:  # a known config re-proposed: tell its result again, don't measure
                study.tell_copy(trial, twin.number)
            budget.repeated()
            continue
        if budget.trials is not None and now.ahead(trial.number) >= budget.trials:
            study.tell_surplus(trial)  # another worker took the budget's last trial meanwhile
            continue
        study.save_worker(trial, worker)
        started = time.monotonic()
        try:
            if progress.on_trial_start:
                progress.on_trial_start(budget.counted + others + 1, budget.trials, point)
            with study.heartbeat(trial):
                run_trial(study, trial, point, objective, bench)
        except KeyboardInterrupt:
            study.tell_interrupted(trial)
            raise
        budget.finished(time.monotonic() - started, counted=budget.counted + 1)
        run_now += 1
        if progress.on_trial_done:
            result = study.read_trial(trial.number)
            progress.on_trial_done(result, _best([*known.values(), result]), budget.eta())
    return LoopOutcome(run_now, budget.stop_reason)


def run_trial(
    study: TuningStudy,
    trial: optuna.Trial,
    point: Mapping[str, Any],
    objective: Objective,
    bench: Bench,
) -> None:
    """Measure one proposed config and tell the study its figure, or why it failed.

    The config is built (and kept in the trial) before it is measured, so a failed trial still
    shows it; Triton refusing it, or it bringing the server down twice, fails the trial."""
    try:
        variant = objective.variant(point)
        configs = bench.configs(variant)
    except ConfigError as err:
        study.tell_failed(trial, str(err))
        return
    study.save_config(trial, describe_configs(configs), configs_to_text(configs))
    try:
        evaluation, deaths = with_restarts(bench, lambda: objective.evaluate(bench, variant))
    except ConfigFailed as failed:
        study.tell_failed(trial, failed.reason, server_restarts=failed.server_deaths)
        return
    study.tell_measured(trial, evaluation.figure, switch_s=evaluation.switch_s, server_restarts=deaths)


def _best(results: list[TrialResult]) -> TrialResult | None:
    """The best feasible trial among the study's counted ones (as of this iteration's read)
    and the one just finished."""
    return max((r for r in results if r.feasible), key=lambda r: r.value, default=None)
