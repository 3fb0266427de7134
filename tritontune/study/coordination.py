"""Workers sharing one study: heartbeats, lost trials, claims and twins.

Several workers (``tritontune search`` on several hosts, one storage such as PostgreSQL) share a
study. Each running trial names its worker and sends heartbeats; a trial whose worker is gone (no
heartbeat for :data:`HEARTBEAT_GRACE_S`, or a dead process on this same machine) is *lost*:
failed without a reason and its config queued again, so another worker measures it. Jobs that one
worker must do once (the baseline, the playoff) are *claimed*: a claim is a study named
``STUDY~claim~JOB``, and the storage's unique study names make the claim atomic.

Heartbeats use Optuna's public API where it fits: the storage is opened with
``heartbeat_interval``, ``grace_period`` and a stale-trial callback, and
``optuna.storages.fail_stale_trials`` fails the trials whose heartbeats stopped. Optuna sends the
heartbeats itself only inside ``study.optimize()``, and tritontune's loop asks and tells (it must
measure the baseline, dedupe proposals and run final rounds around the trials), so
:func:`heartbeat` sends them from a thread through the storage's public ``record_heartbeat``.
"""

from __future__ import annotations

import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tritontune.hostinfo import WorkerId
from tritontune.study.codec import trial_result
from tritontune.study.records import TrialResult
from tritontune.study.schema import ClaimKey, TrialKey

#: Seconds between a running trial's heartbeats, and without one after which its worker is
#: taken as gone (a measurement holds no lock the heartbeat thread waits for).
HEARTBEAT_INTERVAL_S = 5
HEARTBEAT_GRACE_S = 30
#: A claim older than this, by a worker this machine can't see, may be taken over.
CLAIM_TTL_S = 30 * 60

PointKey = tuple[tuple[str, Any], ...]
#: The search's rule for what of a point makes its config (the point itself by default).
Effective = Callable[[Mapping[str, Any]], Mapping[str, Any]]


def point_key(point: Mapping[str, Any]) -> PointKey:
    """A point as a hashable key (the same config proposed twice has the same key)."""
    return tuple(sorted(point.items()))


def requeue(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue a lost trial's config again (the next worker to ask measures it)."""
    study.enqueue_trial(trial.params, skip_if_exists=False)


def is_queued(trial: FrozenTrial) -> bool:
    """Whether ``trial`` runs a config queued for it (a lost or interrupted trial's, queued
    again) rather than one its sampler picks (Optuna marks those with fixed params)."""
    return "fixed_params" in trial.system_attrs


def _trial_id(storage: optuna.storages.BaseStorage, study_name: str, number: int) -> int:
    study_id = storage.get_study_id_from_name(study_name)
    return storage.get_trial_id_from_study_id_trial_number(study_id, number)


@contextmanager
def heartbeat(storage: optuna.storages.BaseStorage, study_name: str, number: int) -> Iterator[None]:
    """Send trial ``number``'s heartbeats while the block runs (none without heartbeats)."""
    get_interval = getattr(storage, "get_heartbeat_interval", None)
    interval = get_interval() if get_interval is not None else None
    if interval is None:
        yield
        return
    trial_id = _trial_id(storage, study_name, number)
    stop = threading.Event()

    def beat() -> None:
        while True:
            storage.record_heartbeat(trial_id)  # type: ignore[attr-defined]
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name="tritontune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def recover_lost_trials(storage: optuna.storages.BaseStorage, study: optuna.Study) -> list[int]:
    """Fail the running trials whose worker is gone and queue their configs again; returns
    their numbers. Gone: no heartbeat for :data:`HEARTBEAT_GRACE_S` (any machine), or a worker
    process that no longer exists on this machine (found at once, e.g. after SIGKILL)."""
    lost = []
    with warnings.catch_warnings():  # fail_stale_trials is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        before = {t.number for t in study.get_trials(deepcopy=False, states=[TrialState.RUNNING])}
        optuna.storages.fail_stale_trials(study)  # calls requeue for each
        running = study.get_trials(deepcopy=False, states=[TrialState.RUNNING])
    lost += sorted(before - {t.number for t in running})
    for trial in running:
        worker = trial.user_attrs.get(TrialKey.WORKER)
        if worker is None or not WorkerId.from_dict(worker).is_gone():
            continue
        try:
            trial_id = _trial_id(storage, study.study_name, trial.number)
            if storage.set_trial_state_values(trial_id, state=TrialState.FAIL):
                requeue(study, trial)
                lost.append(trial.number)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker got there first
    return lost


def claim(storage: optuna.storages.BaseStorage, study_name: str, job: str, worker: WorkerId) -> bool:
    """Claim ``job`` of ``study_name`` for ``worker``; True for the one worker that gets it.

    A claim held by a worker that is gone (on this machine), or older than :data:`CLAIM_TTL_S`,
    is taken over: its job was never finished."""
    name = f"{study_name}{ClaimKey.SEPARATOR}{job}"
    for _ in range(2):
        try:
            held = optuna.create_study(storage=storage, study_name=name)
        except optuna.exceptions.DuplicatedStudyError:
            holder = optuna.load_study(study_name=name, storage=storage).user_attrs
            worker_data = holder.get(ClaimKey.WORKER)
            stale = time.time() - float(holder.get(ClaimKey.CLAIMED_AT, time.time())) > CLAIM_TTL_S
            if not stale and not (worker_data and WorkerId.from_dict(worker_data).is_gone()):
                return False
            with suppress(KeyError):  # another worker took it over first: claim it again
                optuna.delete_study(study_name=name, storage=storage)
            continue
        held.set_user_attr(ClaimKey.WORKER, worker.to_dict())
        held.set_user_attr(ClaimKey.CLAIMED_AT, time.time())
        return True
    return False


@dataclass(frozen=True)
class Twin:
    """Another trial with the same config."""

    number: int
    running: bool
    """Another worker is measuring it now."""


@dataclass(frozen=True)
class Snapshot:
    """The study's trials as of one read: what a worker decides its next step from."""

    trials: Sequence[FrozenTrial]

    def counted(self) -> dict[PointKey, TrialResult]:
        """The counted trials by point: what counts towards the budget (this worker's and the
        others')."""
        known = {}
        for trial in self.trials:
            result = trial_result(trial, {})
            if result.counted:
                known[point_key(result.params)] = result
        return known

    def running(self) -> int:
        return sum(1 for t in self.trials if t.state == TrialState.RUNNING)

    def taken(self, effective: Effective = dict) -> set[PointKey]:
        """The points of every trial measured, failed or being measured (each as ``effective``
        makes it, see :meth:`twin`): a strategy that proposes configs itself never proposes
        these again."""
        return {point_key(effective(point)) for point in self.taken_points()}

    def taken_points(self) -> list[dict[str, Any]]:
        """The points themselves of :meth:`taken` (a proposer matching some knobs only)."""
        return [
            dict(t.user_attrs[TrialKey.POINT])
            for t in self.trials
            if TrialKey.POINT in t.user_attrs and t.state != TrialState.WAITING
        ]

    def twin(
        self,
        number: int,
        point: Mapping[str, Any],
        effective: Effective = dict,
    ) -> Twin | None:
        """Another trial than ``number`` with the same config, finished or running: the same
        point once ``effective`` (the search's rule) made the knobs that change nothing equal.

        Take the snapshot after the point was saved: of two workers that draw the same config at
        once, at least one then sees the other's; a finished twin's result is told again, a
        running twin's config is left to it (both leaving it is harmless; both measuring it is
        what this prevents)."""
        key = point_key(effective(point))
        for other in self.trials:
            if other.number == number:
                continue
            if point_key(effective(other.user_attrs.get(TrialKey.POINT, {}))) != key:
                continue
            if other.state == TrialState.RUNNING:
                return Twin(other.number, running=True)
            if trial_result(other, {}).counted:
                return Twin(other.number, running=False)
        return None

    def ahead(self, number: int) -> int:
        """Counted or running trials numbered before ``number``: when several workers start a
        trial at once, the earlier numbers fill the budget first."""
        ahead = 0
        for other in self.trials:
            if other.number >= number:
                continue
            if other.state == TrialState.RUNNING or trial_result(other, {}).counted:
                ahead += 1
        return ahead
