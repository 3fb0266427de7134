"""Where a (possibly shared) search stands: workers, trials, the best so far, the ETA.

Read from the study alone, so it works from any machine that reaches the storage while workers
run elsewhere (``tritontune status``).
"""

from __future__ import annotations

import datetime as dt
import statistics
from dataclasses import dataclass

from tritontune.study.records import StudyRecord, TrialResult


@dataclass(frozen=True)
class WorkerStatus:
    """One worker as the study saw it."""

    label: str
    """``HOST:PID``."""
    last_seen: dt.datetime
    """When it last started or finished a trial."""
    running: int | None
    """The trial it is measuring now, if any."""
    trials: int
    """Trials it finished that count."""


@dataclass(frozen=True)
class StudyStatus:
    study: StudyRecord
    workers: list[WorkerStatus]
    budget: int | None
    eta_s: float | None
    """Seconds until the budget is done at the pace of the active workers (None: no budget, or
    nothing measured yet)."""

    @property
    def counted(self) -> list[TrialResult]:
        return [t for t in self.study.trials if t.counted]


def study_status(study: StudyRecord, now: dt.datetime | None = None) -> StudyStatus:
    """The status of ``study`` at ``now`` (the storage's clock is naive local time, as Optuna's)."""
    now = now or dt.datetime.now()
    workers: dict[str, dict] = {}
    for trial in study.trials:
        if trial.worker is None:
            continue
        seen = trial.finished or trial.started or now
        entry = workers.setdefault(
            trial.worker.label(), {"last_seen": seen, "running": None, "trials": 0}
        )
        entry["last_seen"] = max(entry["last_seen"], seen)
        if trial.state.name == "RUNNING":
            entry["running"] = trial.number
        elif trial.counted:
            entry["trials"] += 1
    listed = [WorkerStatus(label, **values) for label, values in sorted(workers.items())]
    counted = [t for t in study.trials if t.counted]
    durations = [t.duration_s for t in counted if t.duration_s]
    budget = study.budget_trials
    eta = None
    if budget is not None and durations:
        active = sum(1 for w in listed if w.running is not None) or 1
        left = max(0, budget - len(counted))
        eta = statistics.median(durations) * left / active
    return StudyStatus(study, listed, budget, eta)
