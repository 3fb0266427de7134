"""``tritontune search``: the highest-throughput config whose p99 meets the SLO.

Optuna's TPE sampler proposes points of the :class:`SearchSpace`; each becomes a config that is
loaded on the running server (a reload, not a restart) and measured for its
:class:`OperatingPoint`. A config that can't meet the SLO even at the lowest load is an Optuna
*constraint violation* (``trial.set_constraint``), which the sampler learns from, rather than a
result filtered out afterwards. Trials whose config fails to load, or whose server crashes, are
recorded as failed with the reason, the server is restarted when it died, and the search goes on.

Ctrl-C marks the trial in flight as interrupted and queues its point again, so running the same
command resumes with no finished trial lost or repeated.

The loop has Optuna's own shape (``optuna/study/_optimize.py``): a :class:`Budget` says when to
stop, :func:`_run_trial` asks, measures and tells, and every read and write of the study goes
through :mod:`tritontune.search.study`. A server that dies under a config is restarted and the
config measured once more: only a config that brings the server down twice fails its trial, so
the sampler does not learn from a fault that was not the config's.

Several workers can share one study (an RDB storage such as PostgreSQL): each iteration re-reads
what the others finished, recovers trials whose worker is gone, leaves a config another worker
is measuring to it, and waits for the others' running trials before it stops, so no config is
lost or measured twice. One worker measures the baseline and one runs the playoff (claims).

After the budget, the verdict comes from the playoff (:mod:`tritontune.search.playoff`): the top
candidates and the baseline re-measured interleaved, at loads that held; the trials' own figures
are screening figures.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import optuna

from tritontune import __version__
from tritontune.config.model_config import ModelConfig, config_to_text
from tritontune.config.variant import Precision, Variant, describe_config
from tritontune.errors import ConfigError, InputError, ServerDiedError, ServerError
from tritontune.hostinfo import HostInfo, WorkerId, describe_host, this_worker
from tritontune.measure.gpu_metrics import NO_GPUS
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck
from tritontune.search.operating_point import OperatingPoint, find_operating_point
from tritontune.search.playoff import (
    Contender,
    PlayoffResult,
    PlayoffSettings,
    RoundFigure,
    run_playoff,
)
from tritontune.search.sampler import snapping
from tritontune.search.space import Choice, SearchSpace, SpaceSource, apply_space, default_space
from tritontune.search.study import (
    DEFAULT_STORAGE,
    HEARTBEAT_INTERVAL_S,
    BestPoint,
    RecordedWorkload,
    StudyContext,
    StudyIdentity,
    StudyRecord,
    TrialResult,
    claim,
    counted_trials,
    default_study_name,
    ensure_context,
    find_twin,
    heartbeat,
    open_study,
    read_study,
    read_trial,
    recorded_space,
    recover_lost_trials,
    save_baseline,
    save_budget,
    save_config,
    save_playoff,
    save_point,
    save_precisions,
    save_space,
    save_worker,
    tell_copy,
    tell_deferred,
    tell_failed,
    tell_interrupted,
    tell_measured,
    tell_surplus,
    trials_ahead,
)
from tritontune.session import Session

#: Shorter windows than ``profile``'s: a search measures many levels, and the stability rule and
#: the minimum of replies per window still hold.
SEARCH_MEASURE = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=50, max_windows=6)
#: The playoff's rounds: longer windows than the search's (more samples, a truer p99), short
#: enough that a dozen of them take about a minute.
PLAYOFF_MEASURE = MeasureSettings(warmup_s=0.5, window_s=0.5, min_window_requests=100, max_windows=6)

#: Re-proposals of known points in a row after which the search stops (the space is worn out).
MAX_REPEATS = 50
#: A config that brings the server down this many times fails its trial (once may be a fault
#: of the machine, e.g. the server killed from outside; twice is the config's).
SERVER_DEATHS_TO_FAIL = 2
#: How long a server that stopped answering after an error gets to show whether it died.
FAULT_GRACE_S = 2.0
#: How often a worker with nothing left to start looks again at the others' running trials.
HEARTBEAT_WAIT_S = 0.2

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class SearchSettings:
    slo_p99_s: float
    trials: int | None = 20
    timeout_s: float | None = None
    load_mode: LoadMode = LoadMode.CONCURRENCY
    """Closed-loop concurrency, or open-loop Poisson arrivals (``--load poisson``)."""
    seed: int | None = None
    storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE
    """An Optuna storage URL, or a storage object (tests use ``InMemoryStorage``)."""
    study_name: str | None = None
    measure: MeasureSettings = SEARCH_MEASURE
    max_load: float = 512
    accuracy: AccuracySettings = field(default_factory=AccuracySettings)
    """How precision variants are judged and calibrated (bounds, output kinds, calibration)."""
    sampler: optuna.samplers.BaseSampler | None = None
    """Another Optuna sampler (e.g. ``GridSampler`` for an exhaustive baseline); TPE by default."""
    host_group: str | None = None
    """Workers on other hardware search as their own group: the study ``NAME@GROUP``, so that
    figures of different machines never mix (each group has its own baseline and winner)."""
    playoff: PlayoffSettings = field(default_factory=lambda: PlayoffSettings(measure=PLAYOFF_MEASURE))
    """The verdict's re-measurement (``top`` 0: no playoff, the screening figures stand)."""

    def study_name_for(self, model: str) -> str:
        """The study this search reads and writes: ``--study`` or the default name, in the host
        group's own study when there is one."""
        name = self.study_name or default_study_name(model, self.slo_p99_s, self.load_mode)
        return f"{name}@{self.host_group}" if self.host_group else name

    @property
    def storage_name(self) -> str:
        return self.storage if isinstance(self.storage, str) else type(self.storage).__name__


@dataclass
class SearchProgress:
    """Optional hooks for a live display; every one gets plain data."""

    on_baseline_start: Callable[[], None] | None = None
    on_baseline: Callable[[OperatingPoint], None] | None = None
    on_trial_start: Callable[[int, int | None, dict[str, Any]], None] | None = None
    on_trial_done: Callable[[TrialResult, TrialResult | None, float | None], None] | None = None
    """(this trial, the best so far, ETA in seconds or None)."""
    on_precisions: Callable[[dict[str, PrecisionCheck]], None] | None = None
    """The precision variants built and checked before the search (accepted or not)."""
    on_playoff_start: Callable[[list[Contender], int], None] | None = None
    """(the contenders, rounds per stage)."""
    on_playoff_round: Callable[[int, int, Contender, RoundFigure | None], None] | None = None
    """(stage, round, contender, its figure or None when it failed)."""


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
    def start(cls, settings: SearchSettings, space_size: int | None, counted: int) -> Budget:
        deadline = time.monotonic() + settings.timeout_s if settings.timeout_s else None
        return cls(settings.trials, deadline, space_size, counted)

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
class SearchResult:
    """A search's outcome: the study as it stands after this run, and what this run did."""

    study: StudyRecord
    storage: str
    resumed: bool
    stop_reason: str | None = None
    """Why the search stopped before its budget, if it did."""
    trials_this_run: int = 0
    restarts: int = 0

    @property
    def study_name(self) -> str:
        return self.study.name

    @property
    def slo_p99_s(self) -> float:
        return self.study.identity.slo_p99_s

    @property
    def load_mode(self) -> LoadMode:
        return self.study.identity.load_mode

    @property
    def baseline(self) -> OperatingPoint | None:
        return self.study.baseline

    @property
    def results(self) -> list[TrialResult]:
        return self.study.results

    @property
    def failed(self) -> list[TrialResult]:
        return self.study.failed

    def _has_gpu_figures(self) -> bool:
        points = [self.baseline] + [r.operating_point for r in self.results]
        return any(lv.gpu for p in points if p is not None for lv in p.levels)

    def troubles(self) -> list[str]:
        """What went wrong, for keeping the server's log: failed trials, no config met the SLO."""
        troubles = []
        if self.failed:
            troubles.append(f"{len(self.failed)} trial(s) failed")
        if self.best is None:
            troubles.append("no config met the SLO")
        return troubles

    @property
    def best(self) -> TrialResult | None:
        return self.study.best

    @property
    def winner(self) -> BestPoint | None:
        """The verdict: the playoff's winner and its figures; None when nothing held its SLO."""
        return self.study.best_point()

    @property
    def playoff(self) -> PlayoffResult | None:
        return self.study.playoff

    @property
    def precisions(self) -> dict[str, dict[str, Any]]:
        """The precision variants checked before the search: accepted or not, with accuracy."""
        return self.study.precisions

    def improvement(self, result: TrialResult) -> float | None:
        """Screening throughput relative to the baseline's screening figure (0.25 = 25 % better)."""
        return self.study.gain(result.throughput)

    def to_dict(self, top: int = 10) -> dict[str, Any]:
        def entry(r: TrialResult) -> dict[str, Any]:
            return {
                "trial": r.number,
                "params": r.params,
                "config": r.knobs,
                "screening_operating_point": r.operating_point.to_dict() if r.operating_point else None,
                "screening_improvement_over_baseline": self.improvement(r),
                "accuracy": r.accuracy,
                "config_pbtxt": r.config_pbtxt,
            }

        winner = self.winner
        best = None
        if winner is not None:
            gain = self.study.gain_of(winner)
            best = {
                **entry(winner.result),
                "operating_point": winner.point.to_dict(),
                "figures": winner.figures,
                "improvement_over_baseline": gain.to_dict(4) if gain else None,
            }
        return {
            "tritontune_version": __version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "study": self.study_name,
            "storage": self.storage,
            "slo_p99_ms": self.slo_p99_s * 1e3,
            "load_mode": self.load_mode.value,
            # Each measured level's "gpu" holds its per-GPU figures; without any, the reason.
            "gpu_metrics": None if self._has_gpu_figures() else NO_GPUS,
            "space": self.study.space,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "best": best,
            "playoff": self.playoff.to_dict() if self.playoff else None,
            "screening_top": [entry(r) for r in self.results[:top]],
            "failed": [{"trial": r.number, "params": r.params, "error": r.error} for r in self.failed],
            "completed_trials": len(self.results),
            "trials_this_run": self.trials_this_run,
            "stopped_early_because": self.stop_reason,
            "server_restarts": self.restarts,
            "precisions": self.study.precisions or None,
        }


def make_sampler(settings: SearchSettings) -> optuna.samplers.BaseSampler:
    """TPE with a short random start: a search is budgeted in tens of trials, not hundreds."""
    if settings.sampler is not None:
        return settings.sampler
    startup = min(10, max(3, (settings.trials or 30) // 3))
    with warnings.catch_warnings():  # TPE's ``group`` option is marked experimental
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=settings.seed,
            n_startup_trials=startup,
            multivariate=True,
            group=True,  # batching knobs exist only when batching is on
        )


def run_search(
    session: Session,
    space: SearchSpace,
    settings: SearchSettings,
    progress: SearchProgress | None = None,
) -> SearchResult:
    """Run (or resume, or join) the search; the session's server must be started."""
    progress = progress or SearchProgress()
    identity = StudyIdentity(session.name, settings.slo_p99_s, settings.load_mode)
    name = settings.study_name_for(session.name)
    study, resumed = open_study(
        settings.storage, name, identity=identity, sampler=make_sampler(settings)
    )
    space = _prepare_precisions(study, session, space, settings, progress)
    study.sampler = snapping(study.sampler, space)
    _keep_space(study, resumed, space, settings)
    ensure_context(study, lambda: study_context(session, settings.measure))
    _check_host(study, session, settings)
    save_budget(study, settings.trials)
    worker = this_worker()
    _baseline(study, session, settings, progress, worker)

    budget = Budget.start(settings, space.size(), counted=0)
    restarts_before = session.restarts
    run_now = 0
    next_recovery = 0.0
    while True:
        if time.monotonic() >= next_recovery:  # lost trials show within a heartbeat interval
            recover_lost_trials(study)
            next_recovery = time.monotonic() + HEARTBEAT_INTERVAL_S
        trials = study.get_trials(deepcopy=False)  # one read per iteration: storage is shared
        known = counted_trials(trials)  # this worker's and the others' finished configs
        budget.counted = len(known)
        others = sum(1 for t in trials if t.state == optuna.trial.TrialState.RUNNING)
        if budget.spent(len(known), running=others):
            if others and budget.stop_reason is None and not budget.out_of_time():
                time.sleep(HEARTBEAT_WAIT_S)  # wait for other workers' trials: done or lost
                continue
            break
        with warnings.catch_warnings():  # Optuna expects heartbeats with optimize(); we ask/tell
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            trial = study.ask()
        point = space.suggest(trial)
        save_point(trial, point)
        now = study.get_trials(deepcopy=False)
        twin = find_twin(now, trial.number, point)
        if twin is not None:
            if twin.state == optuna.trial.TrialState.RUNNING:
                tell_deferred(study, trial, twin.number)  # another worker is measuring it
            else:  # a known config re-proposed: tell its result again, don't measure
                tell_copy(study, trial, twin)
            budget.repeated()
            continue
        if settings.trials is not None and trials_ahead(now, trial.number) >= settings.trials:
            tell_surplus(study, trial)  # another worker took the budget's last trial meanwhile
            continue
        save_worker(trial, worker)
        started = time.monotonic()
        try:
            if progress.on_trial_start:
                progress.on_trial_start(budget.counted + others + 1, settings.trials, point)
            with heartbeat(study, trial):
                _run_trial(study, trial, point, session, space, settings)
        except KeyboardInterrupt:
            tell_interrupted(study, trial)
            raise
        budget.finished(time.monotonic() - started, counted=budget.counted + 1)
        run_now += 1
        if progress.on_trial_done:
            progress.on_trial_done(read_trial(study, trial.number), read_study(study).best, budget.eta())

    _playoff(study, session, space, settings, worker, progress)
    return SearchResult(
        study=read_study(study),
        storage=settings.storage_name,
        resumed=resumed,
        stop_reason=budget.stop_reason,
        trials_this_run=run_now,
        restarts=session.restarts - restarts_before,
    )


def _run_trial(
    study: optuna.Study,
    trial: optuna.Trial,
    point: dict[str, Any],
    session: Session,
    space: SearchSpace,
    settings: SearchSettings,
) -> None:
    """Measure one proposed config and tell the study: its operating point, or why it failed."""
    variant = trial_variant(study, trial, session, lambda: space.to_variant(point))
    if variant is None:
        return
    try:
        op, deaths = _measure_config(session, variant, settings)
    except _ConfigFailed as failed:
        tell_failed(study, trial, failed.reason, server_restarts=failed.server_deaths)
        return
    tell_measured(study, trial, op, switch_s=session.last_switch_s, server_restarts=deaths)


def trial_variant(
    study: optuna.Study,
    trial: optuna.Trial,
    session: Session,
    make: Callable[[], Variant],
) -> Variant | None:
    """The trial's variant, its config kept in the trial before it is measured (so a failed
    trial still shows it); None, with the trial told failed, when the config is invalid."""
    try:
        variant = make()
        config = session.build_config(variant)
    except ConfigError as err:
        tell_failed(study, trial, str(err))
        return None
    save_config(trial, describe_config(config), config_to_text(config))
    return variant


class _ConfigFailed(Exception):
    """A config that could not be measured, for a reason that is the config's own."""

    def __init__(self, reason: str, server_deaths: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.server_deaths = server_deaths


def _measure_config(
    session: Session, variant: Variant, settings: SearchSettings
) -> tuple[OperatingPoint, int]:
    """The config's operating point and how often the server died on the way.

    Faults are blamed on their cause: Triton refusing the config (or failing its requests) is
    the config's; a server that died is restarted and the config measured again, and only a
    second death is the config's, with Triton's last log lines as the reason.
    """
    deaths = 0
    while True:
        try:
            return measure_operating_point(session, variant, settings), deaths
        except ServerError as err:
            died = _server_fault(session, err)
            if died is None:
                raise _ConfigFailed(str(err), deaths) from None
            deaths += 1
            session.restart(reload=False)
            if deaths >= SERVER_DEATHS_TO_FAIL:
                tail = _last_lines(died.log_tail)
                raise _ConfigFailed(
                    f"brought the server down {deaths} times: {died}"
                    + (f"; last log lines: {tail}" if tail else ""),
                    deaths,
                ) from None


def _server_fault(session: Session, err: ServerError) -> ServerDiedError | None:
    """The server's death behind ``err``, or None when the server is fine (then ``err`` is the
    config's). A killed server can close its sockets a moment before its process is gone, so a
    server that doesn't answer gets :data:`FAULT_GRACE_S` to show which it is."""
    if isinstance(err, ServerDiedError):
        return err
    deadline = time.monotonic() + FAULT_GRACE_S
    while True:
        try:
            session.launcher.check_alive()
        except ServerDiedError as died:
            return died
        if session.server_ready():
            return None
        if time.monotonic() >= deadline:
            return ServerDiedError(f"the server stopped answering ({err})", session.launcher.log_tail())
        time.sleep(0.1)


def _last_lines(log_tail: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in log_tail.strip().splitlines()[-lines:])


def space_for_session(
    session: Session, slo_p99_s: float, space_source: SpaceSource | None = None
) -> SearchSpace:
    """The default space for the session's model and server, with ``space_source``'s changes.

    Precision variants are in it for an ONNX model on a server tritontune launched (a remote
    server can't be given the variant files)."""
    defaults = default_space(
        session.source.base_config,
        session.info.capabilities,
        slo_p99_s=slo_p99_s,
        batch_dim_dynamic=session.batch_dim_dynamic,
        precision_variants=session.launcher.owns_server,
    )
    return apply_space(space_source, defaults) if space_source else defaults


def _prepare_precisions(
    study: optuna.Study,
    session: Session,
    space: SearchSpace,
    settings: SearchSettings,
    progress: SearchProgress,
) -> SearchSpace:
    """Build and accuracy-check the space's precision variants before any trial: a rejected one
    leaves the space (never measured), and every check is kept in the study for the results."""
    dimension = space.dimensions.get("precision")
    if not isinstance(dimension, Choice) or dimension.values == (Precision.FP32,):
        return space
    wanted = [str(p) for p in dimension.values]
    checks = session.prepare_precisions(wanted, accuracy=settings.accuracy)
    save_precisions(study, {p: check.to_dict() for p, check in checks.items()})
    if progress.on_precisions:
        progress.on_precisions(checks)
    accepted = tuple(p for p in dimension.values if checks[str(p)].accepted)
    if not accepted:
        raise InputError(
            "no precision of the space passed its accuracy check: "
            + "; ".join(f"{p}: {checks[p].reason}" for p in wanted)
        )
    return space.replace("precision", Choice(accepted))


def _keep_space(
    study: optuna.Study, resumed: bool, space: SearchSpace, settings: SearchSettings
) -> None:
    """A new study keeps its space; a resumed one must search the same space."""
    recorded = recorded_space(study)
    if not resumed or recorded is None:
        save_space(study, space.to_dict())
    elif recorded != space.to_dict():
        raise InputError(
            f"study {study.study_name!r} in {settings.storage_name} searched another space "
            f"({recorded}); this run's is {space.to_dict()}: "
            "use the same --space (and --accuracy), or another --study"
        )


def study_context(session: Session, measure: MeasureSettings) -> StudyContext:
    """What export and check need to reproduce a study's results (kept from its first run)."""
    source = session.source
    workload = session.workload
    return StudyContext(
        model_repository=str(source.directory.parent.resolve()),
        model_version=source.version,
        model_files=source.file_digests(),
        workload=RecordedWorkload(
            batch_size=workload.batch_size,
            dynamic_dim=workload.dynamic_dim,
            input_data=str(workload.input_data) if workload.input_data else None,
        ),
        server_version=session.info.version,
        launch=session.info.launch,
        served_via_python_backend=bool(session.served and session.served.via_python),
        host=describe_host().to_dict(),
        measure=asdict(measure),
    )


def _check_host(study: optuna.Study, session: Session, settings: SearchSettings) -> None:
    """A worker on other hardware (or another Triton) must not add its figures to the study."""
    context = read_study(study).context
    recorded = HostInfo.from_dict(context.host) if context.host else None
    differences = recorded.differences(describe_host()) if recorded else []
    if context.server_version not in ("unknown", session.info.version):
        differences.append(f"Triton {context.server_version} vs {session.info.version}")
    if differences:
        raise InputError(
            f"study {study.study_name!r} was measured on other hardware ({'; '.join(differences)}): "
            "figures of different machines must not mix; search as a group of your own with "
            "--host-group NAME (or use another --study)"
        )


def _baseline(
    study: optuna.Study,
    session: Session,
    settings: SearchSettings,
    progress: SearchProgress,
    worker: WorkerId,
) -> OperatingPoint | None:
    """The model's own config, measured once per study by one worker (a resumed search, or
    another worker, reuses it; a worker that finds it claimed goes on without it)."""
    baseline = read_study(study).baseline
    if baseline is None:
        if not claim(study, "baseline", worker):
            return None
        if progress.on_baseline_start:
            progress.on_baseline_start()
        try:
            baseline, _ = _measure_config(session, Variant(), settings)
        except _ConfigFailed as failed:
            raise ServerError(f"the model's own config could not be measured: {failed}") from None
        save_baseline(study, baseline, config_to_text(session.source.base_config))
    if progress.on_baseline:
        progress.on_baseline(baseline)
    return baseline


def _playoff(
    study: optuna.Study,
    session: Session,
    space: SearchSpace,
    settings: SearchSettings,
    worker: WorkerId,
    progress: SearchProgress,
) -> None:
    """The playoff of the top candidates and the baseline, run once by one worker and kept in
    the study (a resumed search whose top candidates are unchanged reuses it)."""
    record = read_study(study)
    top = [r for r in record.feasible if r.operating_point is not None][: settings.playoff.top]
    if not top:
        return
    numbers = sorted(r.number for r in top)
    if record.playoff is not None:
        had = sorted(e.trial for e in record.playoff.entries if e.trial is not None)
        if had == numbers:
            return  # the same contenders as the last playoff: its verdict stands
    if not claim(study, "playoff-" + "-".join(map(str, numbers)), worker):
        return  # another worker runs it
    contenders = []
    for trial in top:
        assert trial.operating_point is not None
        variant = space.to_variant(trial.params)
        contenders.append(
            Contender(
                trial=trial.number,
                variant=variant,
                load=trial.operating_point.load,
                screening_throughput=trial.operating_point.throughput,
                simplicity=simplicity(session.build_config(variant)),
            )
        )
    if record.baseline is not None and record.baseline.levels:
        base = record.baseline
        load = base.load if base.feasible else min(level.load for level in base.levels)
        contenders.append(Contender(None, Variant(), load, base.throughput if base.feasible else 0.0))
    if progress.on_playoff_start:
        progress.on_playoff_start(contenders, settings.playoff.rounds)
    result = run_playoff(
        session,
        contenders,
        settings.slo_p99_s,
        settings.load_mode,
        settings.playoff,
        on_round=progress.on_playoff_round,
    )
    save_playoff(study, result)


def simplicity(config: ModelConfig) -> tuple[float, ...]:
    """How much a config costs to run, for the playoff's tie rule: instances, then the largest
    batch, then the queue delay (smaller is simpler)."""
    instances = sum(max(group.count, 1) for group in config.instance_group) or 1
    delay = 0
    if config.HasField("dynamic_batching"):
        delay = config.dynamic_batching.max_queue_delay_microseconds
    return (float(instances), float(config.max_batch_size), float(delay))


def measure_operating_point(
    session: Session, variant: Variant, settings: SearchSettings
) -> OperatingPoint:
    """Load ``variant`` and find its operating point, exactly as a search trial does."""
    session.load_variant(variant)

    def measure(spec: LoadSpec) -> Measurement:
        return session.measure(spec, settings.measure)

    start = 1.0
    if settings.load_mode == LoadMode.RATE:
        # Open loop needs a first rate: half of what one request at a time achieves.
        unloaded = session.measure(LoadSpec.concurrency(1), settings.measure)
        start = max(1.0, 0.5 * unloaded.request_rate)
    return find_operating_point(
        measure,
        settings.slo_p99_s,
        load_mode=settings.load_mode,
        start=start,
        max_load=settings.max_load if settings.load_mode == LoadMode.CONCURRENCY else start * 256,
    )
