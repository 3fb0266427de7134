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
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

from tritontune import __version__
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode
from tritontune.search.operating_point import OperatingPoint
from tritontune.units import format_duration

DEFAULT_STORAGE = "sqlite:///tritontune.db"

#: Optuna's name for the constraint a trial reports: how far p99 is over the SLO (> 0 infeasible).
SLO_CONSTRAINT = "p99_over_slo_s"


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


# -- the records ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class StudyIdentity:
    """What a study is for; a study is never resumed for another identity (results never mix)."""

    model: str
    slo_p99_s: float
    load_mode: LoadMode

    def default_name(self) -> str:
        return default_study_name(self.model, self.slo_p99_s, self.load_mode)

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
        if self.duplicate_of is not None:
            return False
        if self.state == TrialState.COMPLETE:
            return True
        return self.state == TrialState.FAIL and not self.interrupted


@dataclass(frozen=True)
class ConfirmedPoint:
    """The winner's operating point re-measured with longer windows (see
    :func:`tritontune.search.operating_point.confirm_operating_point`)."""

    trial: int
    operating_point: OperatingPoint


@dataclass(frozen=True)
class BestPoint:
    """The best config and the figure to state for it: the confirmed point when the confirmation
    held, else the search's own (screening) measurement."""

    result: TrialResult
    point: OperatingPoint
    confirmed: bool


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
    context: StudyContext = field(default_factory=StudyContext)
    trials: tuple[TrialResult, ...] = ()
    """Every trial, in order (running, interrupted and duplicate ones included)."""

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
        """The best config with the one figure every output states for it."""
        best = self.best
        if best is None or best.operating_point is None:
            return None
        confirmed = self.confirmed_point(best.number)
        if confirmed is not None and confirmed.feasible:
            return BestPoint(best, confirmed, True)
        return BestPoint(best, best.operating_point, False)

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


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``, or a one-line error saying why it can't be opened."""
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as err:  # SQLAlchemy and Optuna raise many kinds for a bad URL or file
        reason = " ".join(str(err).split())[:300]
        raise InputError(f"--storage {url}: cannot be opened ({reason})") from None


def load_existing_study(storage_url: str, study_name: str) -> optuna.Study:
    """A study that must already exist (``export``, ``check``, ``report`` read finished ones)."""
    if storage_url.startswith("sqlite:///"):
        path = Path(storage_url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise InputError(f"--storage {storage_url}: no such file ({path})")
    storage = open_storage(storage_url)
    names = sorted(s.study_name for s in optuna.study.get_all_study_summaries(storage))
    if study_name not in names:
        listed = ", ".join(names) if names else "none"
        raise InputError(f"study {study_name!r} not found in {storage_url} (studies there: {listed})")
    return optuna.load_study(study_name=study_name, storage=storage)


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
    backend = open_storage(storage) if isinstance(storage, str) else storage
    existing = {s.study_name for s in optuna.study.get_all_study_summaries(backend)}
    study = optuna.create_study(
        storage=backend,
        study_name=study_name,
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    resumed = study_name in existing
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
        study.set_user_attr(_StudyKey.VERSION, __version__)
        study.set_user_attr(
            _StudyKey.CREATED, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
        )
    return study, resumed


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
    study.set_user_attr(_StudyKey.CONFIRMED, {"trial": trial_number, "operating_point": point.to_dict()})


# -- writing trials ----------------------------------------------------------------------------------
def save_point(trial: optuna.Trial, point: Mapping[str, Any]) -> None:
    """The point the sampler proposed (as the search uses it: snapped values, ``None`` kept)."""
    trial.set_user_attr(_TrialKey.POINT, dict(point))


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


def counted_trials(study: optuna.Study) -> dict[tuple[tuple[str, Any], ...], FrozenTrial]:
    """The study's counted trials by point: what a re-proposal is answered from."""
    known = {}
    for trial in study.get_trials(deepcopy=False):
        result = _trial_result(trial, {})
        if result.counted:
            known[point_key(result.params)] = trial
    return known


# -- reading ------------------------------------------------------------------------------------------
def read_study(study: optuna.Study) -> StudyRecord:
    """The whole study, typed. Raises :class:`InputError` for a study tritontune did not make."""
    attrs = study.user_attrs
    identity = _identity(attrs)
    if identity is None:
        raise InputError(
            f"study {study.study_name!r} was not made by tritontune search (it has no model, SLO "
            "and load mode)"
        )
    precisions = dict(attrs.get(_StudyKey.PRECISIONS) or {})
    baseline = attrs.get(_StudyKey.BASELINE)
    confirmed = attrs.get(_StudyKey.CONFIRMED)
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
        context=StudyContext.from_attrs(attrs),
        trials=tuple(_trial_result(t, precisions) for t in study.get_trials(deepcopy=False)),
    )


def read_trial(study: optuna.Study, number: int) -> TrialResult:
    """One trial of ``study``, typed (with its precision's accuracy)."""
    precisions = study.user_attrs.get(_StudyKey.PRECISIONS) or {}
    return _trial_result(study.trials[number], precisions)


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
    )
