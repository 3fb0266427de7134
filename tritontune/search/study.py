"""The study: tritontune's database, and the one module that knows its format.

A search keeps everything in an Optuna study (any Optuna RDB storage, SQLite by default): the
study's *context* (what was searched and how it was measured) as study attributes, and each
trial's config and operating point as trial attributes. Only this module names those attributes.
The search writes through the ``save_*`` and ``tell_*`` functions; ``export``, ``report`` and the
tests read a typed :class:`StudyRecord` through :func:`read_study`, so a reader never guesses a
key or its default, and a study can be built and read in memory without a server. A study opens
in ``optuna-dashboard`` as it is.

Studies written by earlier versions read back unchanged: the attribute names are those they
used, and every field added since has a default.

Several workers (``tritontune search`` on several hosts, one storage such as PostgreSQL) share a
study. Each running trial names its worker and sends Optuna heartbeats; a trial whose worker is
gone (no heartbeat for :data:`HEARTBEAT_GRACE_S`, or a dead process on this same machine) is
*lost*: failed without a reason and its config queued again, so another worker measures it. Jobs
that one worker must do once (the baseline, the confirmation) are *claimed*: a claim is a study
named ``STUDY~claim~JOB``, and the storage's unique study names make the claim atomic.
"""

from __future__ import annotations

import datetime as dt
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tritontune import __version__
from tritontune.errors import InputError
from tritontune.hostinfo import WorkerId
from tritontune.measure.loadgen import LoadMode
from tritontune.search.operating_point import OperatingPoint
from tritontune.search.playoff import Interval, PlayoffEntry, PlayoffResult
from tritontune.search.space import DIMENSIONS
from tritontune.units import format_duration

DEFAULT_STORAGE = "sqlite:///tritontune.db"

#: Optuna's name for the constraint a trial reports: how far p99 is over the SLO (> 0 infeasible).
SLO_CONSTRAINT = "p99_over_slo_s"
#: Seconds between a running trial's heartbeats, and without one after which its worker is
#: taken as gone (a measurement holds no lock the heartbeat thread waits for).
HEARTBEAT_INTERVAL_S = 5
HEARTBEAT_GRACE_S = 30
#: A claim older than this, by a worker this machine can't see, may be taken over.
CLAIM_TTL_S = 30 * 60
_CLAIM = "~claim~"
#: Times to open a storage again when another worker was creating its tables at that moment.
SCHEMA_RACE_RETRIES = 3


class _StudyKey:
    """Names of the study attributes (kept as earlier versions wrote them)."""

    MODEL = "model"
    SLO = "slo_p99_s"
    LOAD_MODE = "load_mode"
    VERSION = "tritontune_version"
    CREATED = "created"
    SPACE = "space"
    PRECISIONS = "precisions"
    BASELINE = "baseline"
    BASELINE_CONFIG = "baseline_config_pbtxt"
    CONFIRMED = "confirmed"
    PLAYOFF = "playoff"
    BUDGET = "budget_trials"
    WORKLOAD = "workload"
    """A workload study's traffic classes (``Traffic.to_dict``): its identity."""
    WORKLOAD_FINAL = "workload_final"


class _TrialKey:
    """Names of the trial attributes."""

    POINT = "point"
    KNOBS = "knobs"
    CONFIG = "config_pbtxt"
    OPERATING_POINT = "operating_point"
    SWITCH = "switch_s"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    DUPLICATE_OF = "duplicate_of"
    SERVER_RESTARTS = "server_restarts"
    WORKER = "worker"
    SURPLUS = "surplus"
    TRAFFIC_CAPACITY = "traffic_capacity"
    #: ``value:KNOB`` (``value:max_queue_delay_us`` for a delay): each knob of the point as its
    #: own attribute, named with its unit, for optuna-dashboard. The trial's params show the same
    #: values (the search's sampler snaps ordered dimensions before they are stored, see
    #: :mod:`tritontune.search.sampler`); studies made before that kept the sampler's float.
    VALUE_PREFIX = "value:"


# -- the records ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyIdentity:
    """What a study is for; a study is never resumed for another identity (results never mix)."""

    model: str
    slo_p99_s: float
    load_mode: LoadMode

    def describe(self) -> str:
        return f"model {self.model!r}, p99 SLO {format_duration(self.slo_p99_s)}, {self.load_mode} load"


@dataclass(frozen=True)
class RecordedWorkload:
    """What each request of the search carried (``check`` sends the same)."""

    batch_size: int = 1
    dynamic_dim: int = 16
    input_data: str | None = None
    """The ``--input-data`` file, if the requests came from one."""


@dataclass(frozen=True)
class StudyContext:
    """What ``export`` and ``check`` need to reproduce a result: where the model is, what each
    request carried, which server and machine measured it. Written once, when a study is new."""

    model_repository: str | None = None
    model_version: str | None = None
    model_files: dict[str, str] | None = None
    """sha256 of the model's version files as measured (``export`` refuses changed files)."""
    workload: RecordedWorkload = field(default_factory=RecordedWorkload)
    server_version: str = "unknown"
    launch: str = "local"
    served_via_python_backend: bool = False
    host: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)

    def to_attrs(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> StudyContext:
        workload = attrs.get("workload") or {}
        return cls(
            model_repository=attrs.get("model_repository"),
            model_version=attrs.get("model_version"),
            model_files=attrs.get("model_files"),
            workload=RecordedWorkload(
                batch_size=int(workload.get("batch_size", 1)),
                dynamic_dim=int(workload.get("dynamic_dim", 16)),
                input_data=workload.get("input_data"),
            ),
            server_version=str(attrs.get("server_version", "unknown")),
            launch=str(attrs.get("launch", "local")),
            served_via_python_backend=bool(attrs.get("served_via_python_backend", False)),
            host=dict(attrs.get("host") or {}),
            measure=dict(attrs.get("measure") or {}),
        )


_CONTEXT_KEYS = tuple(StudyContext.__dataclass_fields__)


@dataclass(frozen=True)
class TrialResult:
    """One trial as the study keeps it."""

    number: int
    params: dict[str, Any]
    """The point of the space (what the sampler proposed)."""
    knobs: dict[str, Any]
    """The config's knobs as applied (:func:`tritontune.config.variant.describe_config`)."""
    operating_point: OperatingPoint | None
    config_pbtxt: str
    duration_s: float | None
    error: str | None = None
    accuracy: dict[str, Any] | None = None
    """For a precision variant: its accuracy against FP32 (shown wherever its speed is)."""
    state: TrialState = TrialState.COMPLETE
    switch_s: float | None = None
    """Seconds the server took to switch to this config."""
    interrupted: bool = False
    """Cut off by Ctrl-C (measured again when the search resumes)."""
    duplicate_of: int | None = None
    """A re-proposal of that trial's point: its result told again, not measured."""
    server_restarts: int = 0
    """Times the server died under this config and was restarted (it is measured once more
    after a death; a second one fails the trial)."""
    worker: WorkerId | None = None
    """The worker that ran it (None in studies made before workers were recorded)."""
    surplus: bool = False
    """Started when other workers' trials already filled the budget: not measured."""
    started: dt.datetime | None = None
    finished: dt.datetime | None = None

    @property
    def lost(self) -> bool:
        """Failed without a reason: its worker was gone (the config was queued again)."""
        return (
            self.state == TrialState.FAIL
            and self.error is None
            and not self.interrupted
            and self.duplicate_of is None
            and not self.surplus
        )

    @property
    def feasible(self) -> bool:
        return self.operating_point is not None and self.operating_point.feasible

    @property
    def throughput(self) -> float:
        return self.operating_point.throughput if self.operating_point else 0.0

    @property
    def counted(self) -> bool:
        """Counts towards ``--trials``: a distinct config that finished (measured or failed), not
        one cut off by Ctrl-C, nor a re-proposal of a known point."""
        if self.duplicate_of is not None or self.surplus:
            return False
        if self.state == TrialState.COMPLETE:
            return True
        return self.state == TrialState.FAIL and not self.interrupted and not self.lost


@dataclass(frozen=True)
class ConfirmedPoint:
    """Studies made before the playoff: the winner's operating point re-measured once with
    longer windows (the confirmation the playoff replaced)."""

    trial: int
    operating_point: OperatingPoint


@dataclass(frozen=True)
class BestPoint:
    """A config of the verdict and the figure to state for it: the playoff's figures where there
    was a playoff (studies before it: the confirmed point), else the search's own screening
    measurement."""

    result: TrialResult
    point: OperatingPoint
    confirmed: bool
    """The figure was re-measured and held (playoff, or an older study's confirmation)."""
    playoff: PlayoffEntry | None = None
    """Its playoff entry: rounds, intervals, gain over the baseline within the same rounds."""

    @property
    def figures(self) -> str:
        """Where the figure comes from: ``playoff``, ``confirmed`` (older studies) or
        ``screening`` (the search's short measurement, not re-measured)."""
        if self.playoff is not None:
            return "playoff"
        return "confirmed" if self.confirmed else "screening"


@dataclass(frozen=True)
class StudyRecord:
    """Everything a study holds, typed. Read with :func:`read_study`."""

    name: str
    identity: StudyIdentity
    created: str = ""
    tritontune_version: str = ""
    space: dict[str, Any] | None = None
    precisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The precision checks made before the search, by precision (accepted or not)."""
    baseline: OperatingPoint | None = None
    baseline_config_pbtxt: str | None = None
    confirmed: ConfirmedPoint | None = None
    """Studies made before the playoff: the winner re-measured once."""
    playoff: PlayoffResult | None = None
    context: StudyContext = field(default_factory=StudyContext)
    trials: tuple[TrialResult, ...] = ()
    """Every trial, in order (running, interrupted and duplicate ones included)."""
    budget_trials: int | None = None
    """The ``--trials`` of the latest run (for the ETA of ``tritontune status``)."""

    @property
    def running(self) -> list[TrialResult]:
        return [t for t in self.trials if t.state == TrialState.RUNNING]

    @property
    def lost(self) -> list[TrialResult]:
        return [t for t in self.trials if t.lost]

    @property
    def results(self) -> list[TrialResult]:
        """Completed, counted trials, best (feasible, highest throughput) first."""
        done = [t for t in self.trials if t.state == TrialState.COMPLETE and t.counted]
        return sorted(done, key=lambda r: (r.feasible, r.throughput), reverse=True)

    @property
    def failed(self) -> list[TrialResult]:
        return [t for t in self.trials if t.state == TrialState.FAIL and t.counted]

    @property
    def feasible(self) -> list[TrialResult]:
        return [r for r in self.results if r.feasible]

    @property
    def best(self) -> TrialResult | None:
        feasible = self.feasible
        return feasible[0] if feasible else None

    def confirmed_point(self, trial_number: int) -> OperatingPoint | None:
        """The confirmed operating point of ``trial_number``, if the search made one for it."""
        if self.confirmed is not None and self.confirmed.trial == trial_number:
            return self.confirmed.operating_point
        return None

    def best_point(self) -> BestPoint | None:
        """The winner with the one figure every output states for it; None when nothing met the
        SLO, or when the playoff found that nothing held."""
        verdict = self.verdict()
        return verdict[0] if verdict else None

    def verdict(self) -> list[BestPoint]:
        """The configs to state and export, best first. After a playoff: the contenders that
        held, the winner first, with the playoff's figures (what did not hold is left out).
        Without one: the screening ranking, the winner with its confirmed point if it held."""
        if self.playoff is not None:
            playoff = self.playoff
            by_number = {t.number: t for t in self.trials}
            return [
                BestPoint(
                    by_number[entry.trial],
                    entry.operating_point(playoff.slo_p99_s, playoff.load_mode),
                    True,
                    entry,
                )
                for entry in playoff.held
                if entry.trial in by_number
            ]
        ranked = []
        for rank, result in enumerate(self.feasible):
            assert result.operating_point is not None
            confirmed = self.confirmed_point(result.number) if rank == 0 else None
            if confirmed is not None and confirmed.feasible:
                ranked.append(BestPoint(result, confirmed, True))
            else:
                ranked.append(BestPoint(result, result.operating_point, False))
        return ranked

    def gain_of(self, point: BestPoint) -> Interval | None:
        """``point``'s gain over the baseline: the playoff's per-round ratios where it has them,
        else the screening figures' ratio (an interval of one value)."""
        if point.playoff is not None:
            return point.playoff.gain
        gain = self.gain(point.point.throughput)
        return None if gain is None else Interval(gain, gain, gain)

    def gain(self, throughput: float) -> float | None:
        """``throughput`` over the baseline's, minus one (0.25: 25 % more); None without a
        feasible baseline to compare with."""
        return gain_over_baseline(self.baseline, throughput)


def gain_over_baseline(baseline: OperatingPoint | None, throughput: float) -> float | None:
    """Throughput relative to the baseline's operating point (0.25 = 25 % better); None when the
    baseline missed the SLO or measured nothing. The one definition of "gain over the baseline"."""
    if baseline is None or not baseline.feasible or baseline.throughput <= 0:
        return None
    return throughput / baseline.throughput - 1


# -- opening ---------------------------------------------------------------------------------------
def default_study_name(model: str, slo_p99_s: float, load_mode: LoadMode | str) -> str:
    return f"{model}-p99-{format_duration(slo_p99_s)}-{LoadMode(load_mode).value}"


def open_storage(url: str, *, heartbeat: bool = False) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``, or a one-line error saying why it can't be opened.

    With ``heartbeat`` (a searching worker), running trials send heartbeats and a trial whose
    worker stopped sending them is failed and its config queued again (:func:`recover_lost_trials`).
    """
    options: dict[str, Any] = {}
    if heartbeat:
        options = {
            "heartbeat_interval": HEARTBEAT_INTERVAL_S,
            "grace_period": HEARTBEAT_GRACE_S,
            "heartbeat_stale_trial_callback": _requeue,
        }
    for attempt in range(SCHEMA_RACE_RETRIES + 1):
        try:
            with warnings.catch_warnings():  # heartbeats are marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **options)
        except Exception as err:  # SQLAlchemy and Optuna raise many kinds for a bad URL or file
            reason = " ".join(str(err).split())[:300]
            if "already exists" in reason and attempt < SCHEMA_RACE_RETRIES:
                # Workers started at once on an empty database all create Optuna's tables; the
                # losers find them made a moment later.
                time.sleep(0.5 + attempt)
                continue
            raise InputError(f"--storage {url}: cannot be opened ({reason})") from None
    raise AssertionError("unreachable")


def load_existing_study(storage_url: str, study_name: str) -> optuna.Study:
    """A study that must already exist (``export``, ``check``, ``report`` read finished ones)."""
    if storage_url.startswith("sqlite:///"):
        path = Path(storage_url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise InputError(f"--storage {storage_url}: no such file ({path})")
    storage = open_storage(storage_url)
    names = study_names(storage)
    if study_name not in names:
        listed = ", ".join(names) if names else "none"
        raise InputError(f"study {study_name!r} not found in {storage_url} (studies there: {listed})")
    return optuna.load_study(study_name=study_name, storage=storage)


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    """The storage's studies (claims left out: they are bookkeeping, not studies)."""
    summaries = optuna.study.get_all_study_summaries(storage, include_best_trial=False)
    return sorted(s.study_name for s in summaries if _CLAIM not in s.study_name)


def open_study(
    storage: str | optuna.storages.BaseStorage,
    study_name: str,
    *,
    identity: StudyIdentity,
    sampler: optuna.samplers.BaseSampler,
) -> tuple[optuna.Study, bool]:
    """Create or resume ``study_name``; returns the study and whether it was resumed.

    ``storage`` is a URL or an Optuna storage (tests use ``InMemoryStorage``). A study created
    for another model, SLO or load mode is refused, so results never mix.
    """
    url = storage if isinstance(storage, str) else type(storage).__name__
    backend = open_storage(storage, heartbeat=True) if isinstance(storage, str) else storage
    study, resumed = _create_or_resume(backend, study_name, sampler)
    if resumed:
        recorded = _identity(study.user_attrs)
        if recorded != identity:
            what = recorded.describe() if recorded else "something else (no identity recorded)"
            raise InputError(
                f"study {study_name!r} in {url} was created for {what}, "
                f"not {identity.describe()}; pick another --study name"
            )
    else:
        study.set_user_attr(_StudyKey.MODEL, identity.model)
        study.set_user_attr(_StudyKey.SLO, identity.slo_p99_s)
        study.set_user_attr(_StudyKey.LOAD_MODE, identity.load_mode.value)
        _stamp(study)
    return study, resumed


def _create_or_resume(
    backend: optuna.storages.BaseStorage, study_name: str, sampler: optuna.samplers.BaseSampler
) -> tuple[optuna.Study, bool]:
    existing = {s.study_name for s in optuna.study.get_all_study_summaries(backend)}
    study = optuna.create_study(
        storage=backend,
        study_name=study_name,
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    return study, study_name in existing


def _stamp(study: optuna.Study) -> None:
    """Which tritontune made a new study, and when."""
    study.set_user_attr(_StudyKey.VERSION, __version__)
    study.set_user_attr(
        _StudyKey.CREATED, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    )


def open_workload_study(
    storage: str | optuna.storages.BaseStorage,
    study_name: str,
    *,
    model: str,
    workload: dict[str, Any],
    sampler: optuna.samplers.BaseSampler,
) -> tuple[optuna.Study, bool]:
    """Create or resume a workload study (``search --workload``): its identity is the model and
    the workload's classes, so a study is never resumed for other traffic."""
    backend = open_storage(storage) if isinstance(storage, str) else storage
    study, resumed = _create_or_resume(backend, study_name, sampler)
    if resumed:
        attrs = study.user_attrs
        if attrs.get(_StudyKey.MODEL) != model or attrs.get(_StudyKey.WORKLOAD) != workload:
            raise InputError(
                f"study {study_name!r} was created for another model or workload; "
                "pick another --study name"
            )
    else:
        study.set_user_attr(_StudyKey.MODEL, model)
        study.set_user_attr(_StudyKey.WORKLOAD, workload)
        _stamp(study)
    return study, resumed


def tell_capacity(
    study: optuna.Study, trial: optuna.Trial, capacity: dict[str, Any], total_rate: float
) -> None:
    """A workload trial: the highest total rate at which every class met its objective is the
    objective; the capacity search's levels are kept for the report."""
    trial.set_user_attr(_TrialKey.TRAFFIC_CAPACITY, capacity)
    study.tell(trial, total_rate)


def save_workload_final(study: optuna.Study, final: dict[str, Any]) -> None:
    study.set_user_attr(_StudyKey.WORKLOAD_FINAL, final)


@dataclass(frozen=True)
class WorkloadTrial:
    """One trial of a workload study as the study keeps it."""

    number: int
    params: dict[str, Any]
    knobs: dict[str, Any]
    capacity: dict[str, Any] | None
    total_rate: float | None
    error: str | None


def read_workload_trials(study: optuna.Study) -> list[WorkloadTrial]:
    """The measured (or failed) trials of a workload study, best first; re-proposals left out."""
    out = []
    for trial in study.get_trials(deepcopy=False):
        attrs = trial.user_attrs
        if trial.state not in (TrialState.COMPLETE, TrialState.FAIL) or _TrialKey.DUPLICATE_OF in attrs:
            continue
        out.append(
            WorkloadTrial(
                number=trial.number,
                params=dict(attrs.get(_TrialKey.POINT, {})),
                knobs=dict(attrs.get(_TrialKey.KNOBS, {})),
                capacity=attrs.get(_TrialKey.TRAFFIC_CAPACITY),
                total_rate=trial.value if trial.state == TrialState.COMPLETE else None,
                error=attrs.get(_TrialKey.ERROR),
            )
        )
    return sorted(out, key=lambda t: -(t.total_rate or -1.0))


@dataclass(frozen=True)
class WorkloadStudyRecord:
    """A workload study (``search --workload``), typed: what ``export`` reads of it."""

    name: str
    model: str
    workload: dict[str, Any]
    """The traffic classes (``Traffic.to_dict``)."""
    context: StudyContext
    trials: list[WorkloadTrial]
    final: dict[str, Any] | None
    """The final rounds (``WorkloadSearchResult.to_dict`` less the trials); None until run."""


def is_workload_study(study: optuna.Study) -> bool:
    attrs = study.user_attrs
    return _identity(attrs) is None and _StudyKey.WORKLOAD in attrs


def read_workload_study(study: optuna.Study) -> WorkloadStudyRecord:
    attrs = study.user_attrs
    if not is_workload_study(study):
        raise InputError(f"study {study.study_name!r} is not a workload study (search --workload)")
    return WorkloadStudyRecord(
        name=study.study_name,
        model=str(attrs[_StudyKey.MODEL]),
        workload=dict(attrs[_StudyKey.WORKLOAD]),
        context=StudyContext.from_attrs(attrs),
        trials=read_workload_trials(study),
        final=attrs.get(_StudyKey.WORKLOAD_FINAL),
    )


def _identity(attrs: Mapping[str, Any]) -> StudyIdentity | None:
    try:
        return StudyIdentity(
            model=str(attrs[_StudyKey.MODEL]),
            slo_p99_s=float(attrs[_StudyKey.SLO]),
            load_mode=LoadMode(attrs[_StudyKey.LOAD_MODE]),
        )
    except (KeyError, TypeError, ValueError):
        return None


# -- writing the study's context -------------------------------------------------------------------
def recorded_space(study: optuna.Study) -> dict[str, Any] | None:
    return study.user_attrs.get(_StudyKey.SPACE)


def save_space(study: optuna.Study, space: dict[str, Any]) -> None:
    study.set_user_attr(_StudyKey.SPACE, space)


def save_precisions(study: optuna.Study, checks: Mapping[str, dict[str, Any]]) -> None:
    """The precision checks made before the search (each a ``PrecisionCheck.to_dict()``)."""
    study.set_user_attr(_StudyKey.PRECISIONS, {str(p): check for p, check in checks.items()})


def ensure_context(study: optuna.Study, build: Callable[[], StudyContext]) -> None:
    """Write the study's context unless it has one: kept from the study's first run, and built
    only when missing (hashing a large model on every resume would be wasted)."""
    missing = [key for key in _CONTEXT_KEYS if key not in study.user_attrs]
    if not missing:
        return
    attrs = build().to_attrs()
    for key in missing:
        study.set_user_attr(key, attrs[key])


def save_baseline(study: optuna.Study, point: OperatingPoint, config_pbtxt: str) -> None:
    study.set_user_attr(_StudyKey.BASELINE, point.to_dict())
    study.set_user_attr(_StudyKey.BASELINE_CONFIG, config_pbtxt)


def save_confirmed(study: optuna.Study, trial_number: int, point: OperatingPoint) -> None:
    """(Kept for tests of studies made before the playoff.)"""
    study.set_user_attr(_StudyKey.CONFIRMED, {"trial": trial_number, "operating_point": point.to_dict()})


def save_playoff(study: optuna.Study, result: PlayoffResult) -> None:
    study.set_user_attr(_StudyKey.PLAYOFF, result.to_dict())


# -- writing trials ----------------------------------------------------------------------------------
def save_point(trial: optuna.Trial, point: Mapping[str, Any]) -> None:
    """The point the sampler proposed (as the search uses it: snapped values, ``None`` kept),
    and each of its knobs as a ``value:`` attribute for optuna-dashboard."""
    trial.set_user_attr(_TrialKey.POINT, dict(point))
    for name, value in dashboard_values(point).items():
        trial.set_user_attr(name, value)


def dashboard_values(point: Mapping[str, Any]) -> dict[str, Any]:
    """The ``value:`` attributes of ``point``: one per knob, named with its unit where it has
    one (``value:max_batch_size`` 16, ``value:max_queue_delay_us`` 2000)."""
    return {
        f"{_TrialKey.VALUE_PREFIX}{name}{'_' + DIMENSIONS[name] if DIMENSIONS.get(name) else ''}": value
        for name, value in point.items()
    }


def save_config(trial: optuna.Trial, knobs: Mapping[str, Any], config_pbtxt: str) -> None:
    """The config a trial measures, kept before measuring so a failed trial still shows it."""
    trial.set_user_attr(_TrialKey.KNOBS, dict(knobs))
    trial.set_user_attr(_TrialKey.CONFIG, config_pbtxt)


def tell_measured(
    study: optuna.Study,
    trial: optuna.Trial,
    point: OperatingPoint,
    *,
    switch_s: float | None,
    server_restarts: int = 0,
) -> None:
    """A measured config: its throughput is the objective, its SLO excess the constraint (an
    infeasible config teaches the sampler instead of being filtered out afterwards)."""
    trial.set_user_attr(_TrialKey.OPERATING_POINT, point.to_dict())
    trial.set_user_attr(_TrialKey.SWITCH, switch_s)
    if server_restarts:
        trial.set_user_attr(_TrialKey.SERVER_RESTARTS, server_restarts)
    trial.set_constraint(SLO_CONSTRAINT, point.slo_excess_s)
    study.tell(trial, point.throughput)


def tell_failed(
    study: optuna.Study, trial: optuna.Trial, error: str, *, server_restarts: int = 0
) -> None:
    """A config that could not be measured (Triton refused it, or it brought the server down)."""
    trial.set_user_attr(_TrialKey.ERROR, error)
    if server_restarts:
        trial.set_user_attr(_TrialKey.SERVER_RESTARTS, server_restarts)
    study.tell(trial, state=TrialState.FAIL)


def tell_interrupted(study: optuna.Study, trial: optuna.Trial) -> None:
    """Cut off by Ctrl-C: not counted, and queued to be measured first when the search resumes."""
    trial.set_user_attr(_TrialKey.INTERRUPTED, True)
    study.tell(trial, state=TrialState.FAIL)
    study.enqueue_trial(trial.params)


def tell_copy(study: optuna.Study, trial: optuna.Trial, twin: FrozenTrial) -> None:
    """Tell ``trial`` the result of the finished trial ``twin`` with the same point, without
    measuring it again (the sampler proposed a known config)."""
    for key, value in twin.user_attrs.items():
        if key != _TrialKey.POINT:
            trial.set_user_attr(key, value)
    trial.set_user_attr(_TrialKey.DUPLICATE_OF, twin.number)
    if twin.state == TrialState.COMPLETE:
        for key, value in twin.constraints.items():
            trial.set_constraint(key, value)
        study.tell(trial, twin.value)
    else:
        study.tell(trial, state=TrialState.FAIL)


def point_key(point: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """A point as a hashable key (the same config proposed twice has the same key)."""
    return tuple(sorted(point.items()))


def counted_trials(trials: Sequence[FrozenTrial]) -> dict[tuple[tuple[str, Any], ...], FrozenTrial]:
    """The counted trials of ``trials`` (one read of a study) by point: what a re-proposal is
    answered from, and what counts towards the budget."""
    known = {}
    for trial in trials:
        result = _trial_result(trial, {})
        if result.counted:
            known[point_key(result.params)] = trial
    return known


def save_budget(study: optuna.Study, trials: int | None) -> None:
    study.set_user_attr(_StudyKey.BUDGET, trials)


# -- workers -------------------------------------------------------------------------------------------
def save_worker(trial: optuna.Trial, worker: WorkerId) -> None:
    trial.set_user_attr(_TrialKey.WORKER, worker.to_dict())


@contextmanager
def heartbeat(study: optuna.Study, trial: optuna.Trial) -> Iterator[None]:
    """Send the trial's heartbeats while the block runs (a storage without heartbeats: none)."""
    # Optuna keeps the study's storage private (a cache around the RDB storage); heartbeats need it.
    storage: Any = study._storage
    interval = storage.get_heartbeat_interval() if hasattr(storage, "record_heartbeat") else None
    if interval is None:
        yield
        return
    stop = threading.Event()

    def beat() -> None:
        while True:
            storage.record_heartbeat(trial._trial_id)
            if stop.wait(interval):
                return

    thread = threading.Thread(target=beat, name="tritontune-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def recover_lost_trials(study: optuna.Study) -> list[int]:
    """Fail the running trials whose worker is gone and queue their configs again; returns
    their numbers. Gone: no heartbeat for :data:`HEARTBEAT_GRACE_S` (any machine), or a worker
    process that no longer exists on this machine (found at once, e.g. after SIGKILL)."""
    storage = study._storage
    lost = []
    with warnings.catch_warnings():  # fail_stale_trials is marked experimental
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        before = {t.number for t in study.get_trials(deepcopy=False, states=[TrialState.RUNNING])}
        optuna.storages.fail_stale_trials(study)  # calls _requeue for each
        after = {t.number for t in study.get_trials(deepcopy=False, states=[TrialState.RUNNING])}
    lost += sorted(before - after)
    for trial in study.get_trials(deepcopy=False, states=[TrialState.RUNNING]):
        worker = trial.user_attrs.get(_TrialKey.WORKER)
        if worker is None or not WorkerId.from_dict(worker).is_gone():
            continue
        try:
            if storage.set_trial_state_values(trial._trial_id, state=TrialState.FAIL):
                _requeue(study, trial)
                lost.append(trial.number)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker got there first
    return lost


def _requeue(study: optuna.Study, trial: FrozenTrial) -> None:
    """Queue a lost trial's config again (the next worker to ask measures it)."""
    study.enqueue_trial(trial.params, skip_if_exists=False)


def find_twin(
    trials: Sequence[FrozenTrial], number: int, point: Mapping[str, Any]
) -> FrozenTrial | None:
    """Another trial than ``number`` with the same config, finished or running.

    Read ``trials`` after :func:`save_point`: of two workers that draw the same config at once, at
    least one then sees the other's; a finished twin's result is told again, a running twin's
    config is left to it (both leaving it is harmless; both measuring it is what this prevents)."""
    key = point_key(point)
    for other in trials:
        if other.number == number or point_key(other.user_attrs.get(_TrialKey.POINT, {})) != key:
            continue
        if other.state == TrialState.RUNNING or _trial_result(other, {}).counted:
            return other
    return None


def trials_ahead(trials: Sequence[FrozenTrial], number: int) -> int:
    """Counted or running trials numbered before ``number``: when several workers start a trial
    at once, the earlier numbers fill the budget first."""
    ahead = 0
    for other in trials:
        if other.number >= number:
            continue
        if other.state == TrialState.RUNNING or _trial_result(other, {}).counted:
            ahead += 1
    return ahead


def tell_surplus(study: optuna.Study, trial: optuna.Trial) -> None:
    """``trial`` started after other workers' trials had filled the budget: not measured."""
    trial.set_user_attr(_TrialKey.SURPLUS, True)
    study.tell(trial, state=TrialState.FAIL)


def tell_deferred(study: optuna.Study, trial: optuna.Trial, twin: int) -> None:
    """``trial`` drew a config that ``twin`` is measuring: not measured, not counted."""
    trial.set_user_attr(_TrialKey.DUPLICATE_OF, twin)
    study.tell(trial, state=TrialState.FAIL)


def claim(study: optuna.Study, job: str, worker: WorkerId) -> bool:
    """Claim ``job`` of ``study`` for ``worker``; True for the one worker that gets it.

    A claim held by a worker that is gone (on this machine), or older than :data:`CLAIM_TTL_S`,
    is taken over: its job was never finished."""
    storage = study._storage
    name = f"{study.study_name}{_CLAIM}{job}"
    for _ in range(2):
        try:
            held = optuna.create_study(storage=storage, study_name=name)
        except optuna.exceptions.DuplicatedStudyError:
            holder = optuna.load_study(study_name=name, storage=storage).user_attrs
            worker_data = holder.get("worker")
            stale = time.time() - float(holder.get("claimed_at", time.time())) > CLAIM_TTL_S
            if not stale and not (worker_data and WorkerId.from_dict(worker_data).is_gone()):
                return False
            with suppress(KeyError):  # another worker took it over first: claim it again
                optuna.delete_study(study_name=name, storage=storage)
            continue
        held.set_user_attr("worker", worker.to_dict())
        held.set_user_attr("claimed_at", time.time())
        return True
    return False


# -- reading ------------------------------------------------------------------------------------------
def read_study(study: optuna.Study) -> StudyRecord:
    """The whole study, typed. Raises :class:`InputError` for a study tritontune did not make."""
    attrs = study.user_attrs
    identity = _identity(attrs)
    if identity is None and _StudyKey.WORKLOAD in attrs:
        raise InputError(
            f"study {study.study_name!r} is a workload study (search --workload): status and "
            "report don't read those yet (export does); its results are in the search's results "
            "JSON"
        )
    if identity is None:
        raise InputError(
            f"study {study.study_name!r} was not made by tritontune search (it has no model, SLO "
            "and load mode)"
        )
    precisions = dict(attrs.get(_StudyKey.PRECISIONS) or {})
    baseline = attrs.get(_StudyKey.BASELINE)
    confirmed = attrs.get(_StudyKey.CONFIRMED)
    playoff = attrs.get(_StudyKey.PLAYOFF)
    return StudyRecord(
        name=study.study_name,
        identity=identity,
        created=str(attrs.get(_StudyKey.CREATED, "")),
        tritontune_version=str(attrs.get(_StudyKey.VERSION, "")),
        space=attrs.get(_StudyKey.SPACE),
        precisions=precisions,
        baseline=OperatingPoint.from_dict(baseline) if baseline else None,
        baseline_config_pbtxt=attrs.get(_StudyKey.BASELINE_CONFIG),
        confirmed=ConfirmedPoint(
            trial=int(confirmed["trial"]),
            operating_point=OperatingPoint.from_dict(confirmed["operating_point"]),
        )
        if confirmed
        else None,
        playoff=PlayoffResult.from_dict(playoff) if playoff else None,
        context=StudyContext.from_attrs(attrs),
        trials=tuple(_trial_result(t, precisions) for t in study.get_trials(deepcopy=False)),
        budget_trials=attrs.get(_StudyKey.BUDGET),
    )


def read_trial(study: optuna.Study, number: int) -> TrialResult:
    """One trial of ``study``, typed (with its precision's accuracy)."""
    precisions = study.user_attrs.get(_StudyKey.PRECISIONS) or {}
    return _trial_result(study.get_trials(deepcopy=False)[number], precisions)


def _trial_result(trial: FrozenTrial, precisions: Mapping[str, Any]) -> TrialResult:
    attrs = trial.user_attrs
    op = attrs.get(_TrialKey.OPERATING_POINT)
    knobs = dict(attrs.get(_TrialKey.KNOBS) or {})
    check = precisions.get(str(knobs.get("precision", "")))
    duplicate_of = attrs.get(_TrialKey.DUPLICATE_OF)
    return TrialResult(
        number=trial.number,
        params=dict(attrs.get(_TrialKey.POINT, trial.params)),
        knobs=knobs,
        operating_point=OperatingPoint.from_dict(op) if op else None,
        config_pbtxt=str(attrs.get(_TrialKey.CONFIG, "")),
        duration_s=trial.duration.total_seconds() if trial.duration else None,
        error=attrs.get(_TrialKey.ERROR),
        accuracy=check.get("accuracy") if check else None,
        state=trial.state,
        switch_s=attrs.get(_TrialKey.SWITCH),
        interrupted=bool(attrs.get(_TrialKey.INTERRUPTED, False)),
        duplicate_of=None if duplicate_of is None else int(duplicate_of),
        server_restarts=int(attrs.get(_TrialKey.SERVER_RESTARTS, 0)),
        worker=WorkerId.from_dict(attrs[_TrialKey.WORKER]) if _TrialKey.WORKER in attrs else None,
        surplus=bool(attrs.get(_TrialKey.SURPLUS, False)),
        started=trial.datetime_start,
        finished=trial.datetime_complete,
    )
