"""``tritontune search``: the highest-throughput config whose p99 meets the SLO.

Optuna's TPE sampler proposes points of the :class:`SearchSpace`; each becomes a config that is
loaded on the running server (a reload, not a restart) and measured for its
:class:`OperatingPoint`. A config that can't meet the SLO even at the lowest load is an Optuna
*constraint violation* (``trial.set_constraint``), which the sampler learns from, rather than a
result filtered out afterwards. Trials whose config fails to load, or whose server crashes, are
recorded as failed with the reason, the server is restarted when it died, and the search goes on.

Ctrl-C marks the trial in flight as interrupted and queues its point again, so running the same
command resumes with no finished trial lost or repeated.
"""

from __future__ import annotations

import datetime as dt
import statistics
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

import optuna
from optuna.trial import TrialState

from tritontune import __version__
from tritontune.config.model_config import config_to_text
from tritontune.config.variant import FP32, Variant, describe_config
from tritontune.errors import (
    ConfigError,
    InputError,
    ModelLoadError,
    ServerDiedError,
    ServerError,
)
from tritontune.hostinfo import describe_host
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings
from tritontune.precision.prepare import PrecisionCheck
from tritontune.search.operating_point import (
    OperatingPoint,
    confirm_operating_point,
    find_operating_point,
)
from tritontune.search.space import Choice, SearchSpace, default_space, load_space_file
from tritontune.search.study import (
    DEFAULT_STORAGE,
    TrialResult,
    baseline_of,
    confirmed_of,
    default_study_name,
    failed_results,
    finished_results,
    is_counted,
    open_study,
    trial_result,
)
from tritontune.session import TuningSession

LoadChoice = Literal["concurrency", "poisson"]

#: Shorter windows than ``profile``'s: a search measures many levels, and the stability rule and
#: the minimum of replies per window still hold.
SEARCH_MEASURE = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=50, max_windows=6)
#: The winner is confirmed with longer windows: more samples, a truer p99.
CONFIRM_MEASURE = MeasureSettings(warmup_s=0.5, window_s=1.0, min_window_requests=200, max_windows=8)

#: Re-proposals of known points in a row after which the search stops (the space is worn out).
MAX_REPEATS = 50

optuna.logging.set_verbosity(optuna.logging.WARNING)


@dataclass(frozen=True)
class SearchSettings:
    slo_p99_s: float
    trials: int | None = 20
    timeout_s: float | None = None
    load: LoadChoice = "concurrency"
    seed: int | None = None
    storage: str = DEFAULT_STORAGE
    study_name: str | None = None
    measure: MeasureSettings = SEARCH_MEASURE
    max_load: float = 512
    accuracy_overrides: dict[str, float] | None = None
    """Accuracy bounds for precision variants (see :func:`tritontune.precision.parse_tolerance`)."""
    sampler: optuna.samplers.BaseSampler | None = None
    """Another Optuna sampler (e.g. ``GridSampler`` for an exhaustive baseline); TPE by default."""

    @property
    def load_mode(self) -> str:
        return "concurrency" if self.load == "concurrency" else "rate"


@dataclass
class SearchProgress:
    """Optional hooks for a live display; every one gets plain data."""

    on_baseline_start: Callable[[], None] | None = None
    on_baseline: Callable[[OperatingPoint], None] | None = None
    on_trial_start: Callable[[int, int | None, dict], None] | None = None
    on_trial_done: Callable[[TrialResult, TrialResult | None, float | None], None] | None = None
    """(this trial, the best so far, ETA in seconds or None)."""
    on_precisions: Callable[[dict[str, PrecisionCheck]], None] | None = None
    """The precision variants built and checked before the search (accepted or not)."""


@dataclass
class SearchResult:
    study_name: str
    storage: str
    resumed: bool
    slo_p99_s: float
    load_mode: str
    space: dict
    baseline: OperatingPoint | None
    confirmed: OperatingPoint | None = None
    """The best config's operating point re-measured with longer windows (see
    :func:`confirm_operating_point`); ``None`` when nothing met the SLO."""
    stop_reason: str | None = None
    """Why the search stopped before its budget, if it did."""
    results: list[TrialResult] = field(default_factory=list)
    failed: list[TrialResult] = field(default_factory=list)
    trials_this_run: int = 0
    restarts: int = 0
    precisions: dict | None = None
    """The precision variants checked before the search: accepted or not, with accuracy."""

    @property
    def best(self) -> TrialResult | None:
        return self.results[0] if self.results and self.results[0].feasible else None

    def improvement(self, result: TrialResult) -> float | None:
        """Throughput relative to the baseline's (0.25 = 25 % better)."""
        if self.baseline is None or not self.baseline.feasible or self.baseline.throughput <= 0:
            return None
        return result.throughput / self.baseline.throughput - 1

    def to_dict(self, top: int = 10) -> dict:
        def entry(r: TrialResult) -> dict:
            return {
                "trial": r.number,
                "params": r.params,
                "config": r.knobs,
                "operating_point": r.operating_point.to_dict() if r.operating_point else None,
                "improvement_over_baseline": self.improvement(r),
                "accuracy": r.accuracy,
                "config_pbtxt": r.config_pbtxt,
            }

        return {
            "tritontune_version": __version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "study": self.study_name,
            "storage": self.storage,
            "slo_p99_ms": self.slo_p99_s * 1e3,
            "load_mode": self.load_mode,
            "space": self.space,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "best": entry(self.best) if self.best else None,
            "confirmed": self.confirmed.to_dict() if self.confirmed else None,
            "top": [entry(r) for r in self.results[:top]],
            "failed": [{"trial": r.number, "params": r.params, "error": r.error} for r in self.failed],
            "completed_trials": len(self.results),
            "trials_this_run": self.trials_this_run,
            "stopped_early_because": self.stop_reason,
            "server_restarts": self.restarts,
            "precisions": self.precisions,
        }


def make_sampler(settings: SearchSettings) -> optuna.samplers.TPESampler:
    """TPE with a short random start: a search is budgeted in tens of trials, not hundreds."""
    startup = min(10, max(3, (settings.trials or 30) // 3))
    return optuna.samplers.TPESampler(
        seed=settings.seed,
        n_startup_trials=startup,
        multivariate=True,
        group=True,  # batching knobs exist only when batching is on
    )


def run_search(
    session: TuningSession,
    space: SearchSpace,
    settings: SearchSettings,
    progress: SearchProgress | None = None,
) -> SearchResult:
    """Run (or resume) the search; the session's server must be started."""
    progress = progress or SearchProgress()
    identity = {
        "model": session.name,
        "slo_p99_s": settings.slo_p99_s,
        "load_mode": settings.load_mode,
    }
    name = settings.study_name or default_study_name(
        session.name, settings.slo_p99_s, settings.load_mode
    )
    with warnings.catch_warnings():  # TPE's ``group`` option is marked experimental
        warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
        sampler = settings.sampler or make_sampler(settings)
    study, resumed = open_study(settings.storage, name, identity=identity, sampler=sampler)
    space = _prepare_precisions(study, session, space, settings, progress)
    if not resumed:
        study.set_user_attr("space", space.to_dict())
    elif study.user_attrs.get("space", space.to_dict()) != space.to_dict():
        raise InputError(
            f"study {name!r} in {settings.storage} searched another space "
            f"({study.user_attrs['space']}); this run's is {space.to_dict()}: "
            "use the same --space (and --accuracy), or another --study"
        )
    _record_context(study, session, settings)

    baseline = baseline_of(study)
    if baseline is None:
        if progress.on_baseline_start:
            progress.on_baseline_start()
        baseline = _measure_with_restart(session, Variant(), settings)
        study.set_user_attr("baseline", baseline.to_dict())
        study.set_user_attr("baseline_config_pbtxt", config_to_text(session.source.base_config))
    if progress.on_baseline:
        progress.on_baseline(baseline)

    known = {_key(t.user_attrs.get("point", {})): t for t in study.trials if is_counted(t)}
    counted = sum(1 for t in study.trials if is_counted(t))
    deadline = time.monotonic() + settings.timeout_s if settings.timeout_s else None
    durations: list[float] = []
    run_now = 0
    restarts_before = session.restarts

    repeats = 0
    size = space.size()
    stop_reason = None
    while (settings.trials is None or counted < settings.trials) and (
        deadline is None or time.monotonic() < deadline
    ):
        if size is not None and len(known) >= size:
            stop_reason = f"every one of the space's {size} configs was tried"
            break
        if repeats >= MAX_REPEATS:
            stop_reason = f"the sampler proposed only known configs {MAX_REPEATS} times in a row"
            break
        started = time.monotonic()
        trial = study.ask()
        point = space.suggest(trial)
        trial.set_user_attr("point", point)
        if _key(point) in known:  # TPE re-proposed a finished point: tell it again, don't measure
            _tell_copy(study, trial, known[_key(point)])
            repeats += 1
            continue
        repeats = 0
        try:
            if progress.on_trial_start:
                progress.on_trial_start(counted + 1, settings.trials, point)
            _run_trial(study, trial, point, session, space, settings)
        except KeyboardInterrupt:
            trial.set_user_attr("interrupted", True)
            study.tell(trial, state=TrialState.FAIL)
            study.enqueue_trial(trial.params)  # measured first when the search resumes
            raise
        frozen = study.trials[trial.number]
        known[_key(point)] = frozen
        counted += 1
        run_now += 1
        durations.append(time.monotonic() - started)
        if progress.on_trial_done:
            remaining = (settings.trials - counted) if settings.trials else None
            eta = statistics.median(durations) * remaining if remaining is not None else None
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                eta = left if eta is None else min(eta, left)
            best = finished_results(study)
            progress.on_trial_done(
                trial_result(frozen, study.user_attrs.get("precisions")),
                best[0] if best and best[0].feasible else None,
                eta,
            )

    confirmed = _confirm_best(study, session, space, settings)
    return SearchResult(
        confirmed=confirmed,
        stop_reason=stop_reason,
        study_name=name,
        storage=settings.storage,
        resumed=resumed,
        slo_p99_s=settings.slo_p99_s,
        load_mode=settings.load_mode,
        space=study.user_attrs.get("space", space.to_dict()),
        baseline=baseline,
        results=finished_results(study),
        failed=failed_results(study),
        trials_this_run=run_now,
        restarts=session.restarts - restarts_before,
        precisions=study.user_attrs.get("precisions"),
    )


def space_for_session(
    session: TuningSession, slo_p99_s: float, space_file: Path | None = None
) -> SearchSpace:
    """The default space for the session's model and server, with ``space_file``'s changes.

    Precision variants are in it for an ONNX model on a server tritontune launched (a remote
    server can't be given the variant files)."""
    defaults = default_space(
        session.source.base_config,
        session.info.capabilities,
        slo_p99_s=slo_p99_s,
        batch_dim_dynamic=session.batch_dim_dynamic,
        precision_variants=session.launcher.owns_server,
    )
    return load_space_file(space_file, defaults) if space_file else defaults


def _prepare_precisions(
    study: optuna.Study,
    session: TuningSession,
    space: SearchSpace,
    settings: SearchSettings,
    progress: SearchProgress,
) -> SearchSpace:
    """Build and accuracy-check the space's precision variants before any trial: a rejected one
    leaves the space (never measured), and every check is kept in the study for the results."""
    dimension = space.dimensions.get("precision")
    if not isinstance(dimension, Choice) or dimension.values == (FP32,):
        return space
    wanted = list(dimension.values)
    checks = session.prepare_precisions(wanted, tolerance_overrides=settings.accuracy_overrides)
    study.set_user_attr("precisions", {p: check.to_dict() for p, check in checks.items()})
    if progress.on_precisions:
        progress.on_precisions(checks)
    accepted = tuple(p for p in wanted if checks[p].accepted)
    if not accepted:
        raise InputError(
            "no precision of the space passed its accuracy check: "
            + "; ".join(f"{p}: {checks[p].reason}" for p in wanted)
        )
    return space.replace("precision", Choice(accepted))


def _record_context(study: optuna.Study, session: TuningSession, settings: SearchSettings) -> None:
    """What ``export`` and ``check`` need to reproduce a result: where the model is, what each
    request carried, which server and machine measured it. Kept from the study's first run, and
    computed only when missing (hashing a large model on every resume would be wasted)."""
    source = session.source
    context: dict[str, Callable[[], object]] = {
        "model_repository": lambda: str(source.directory.parent.resolve()),
        "model_version": lambda: source.version,
        "model_files": source.file_digests,  # hashed only for a new study: models can be large
        "workload": lambda: {
            "batch_size": session.workload.batch_size,
            "dynamic_dim": session.workload.dynamic_dim,
            "input_data": str(session.workload.input_data) if session.workload.input_data else None,
        },
        "server_version": lambda: session.info.version,
        "launch": lambda: session.info.launch,
        "served_via_python_backend": lambda: bool(session.served and session.served.via_python),
        "host": lambda: describe_host().to_dict(),
        "measure": lambda: asdict(settings.measure),
    }
    for key, value in context.items():
        if key not in study.user_attrs:
            study.set_user_attr(key, value())


def _confirm_best(study, session, space, settings) -> OperatingPoint | None:
    """Confirm the best trial's operating point once (kept in the study, so a resumed search
    that finds no better config reuses it)."""
    results = finished_results(study)
    if not results or not results[0].feasible:
        return None
    best = results[0]
    recorded = confirmed_of(study, best.number)
    if recorded is not None:
        return recorded
    assert best.operating_point is not None
    try:
        session.load_variant(space.to_variant(best.params))
        confirmed = confirm_operating_point(
            lambda spec: session.measure(spec, CONFIRM_MEASURE), best.operating_point
        )
    except ServerDiedError:
        session.restart()
        return None
    study.set_user_attr("confirmed", {"trial": best.number, "operating_point": confirmed.to_dict()})
    return confirmed


def _key(point: dict) -> tuple:
    return tuple(sorted(point.items()))


def _tell_copy(study: optuna.Study, trial: optuna.Trial, twin) -> None:
    """Tell ``trial`` the result of the finished trial ``twin`` with the same point."""
    for key, value in twin.user_attrs.items():
        if key != "point":
            trial.set_user_attr(key, value)
    trial.set_user_attr("duplicate_of", twin.number)
    if twin.state == TrialState.COMPLETE:
        for key, value in twin.constraints.items():
            trial.set_constraint(key, value)
        study.tell(trial, twin.value)
    else:
        study.tell(trial, state=TrialState.FAIL)


def _run_trial(study, trial, point, session, space, settings) -> None:
    """Measure one point and tell the study; failures are told as FAIL with the reason."""
    try:
        variant = space.to_variant(point)
        config = session.build_config(variant)
        trial.set_user_attr("knobs", describe_config(config))
        trial.set_user_attr("config_pbtxt", config_to_text(config))
        op = measure_operating_point(session, variant, settings)
    except (ConfigError, ModelLoadError, ServerError) as err:
        trial.set_user_attr("error", str(err))
        if isinstance(err, ServerDiedError) or not _alive(session):
            session.restart()
        study.tell(trial, state=TrialState.FAIL)
        return
    trial.set_user_attr("operating_point", op.to_dict())
    trial.set_user_attr("switch_s", session.last_switch_s)
    trial.set_constraint("p99_over_slo_s", op.slo_excess_s)
    study.tell(trial, op.throughput)


def _alive(session: TuningSession) -> bool:
    try:
        session.launcher.check_alive()
    except ServerDiedError:
        return False
    return True


def measure_operating_point(
    session: TuningSession, variant: Variant, settings: SearchSettings
) -> OperatingPoint:
    """Load ``variant`` and find its operating point, exactly as a search trial does."""
    session.load_variant(variant)

    def measure(spec: LoadSpec):
        return session.measure(spec, settings.measure)

    start = 1.0
    if settings.load_mode == "rate":
        # Open loop needs a first rate: half of what one request at a time achieves.
        unloaded = session.measure(LoadSpec.concurrency(1), settings.measure)
        start = max(1.0, 0.5 * unloaded.request_rate)
    return find_operating_point(
        measure,
        settings.slo_p99_s,
        load_mode=settings.load_mode,  # type: ignore[arg-type]
        start=start,
        max_load=settings.max_load if settings.load_mode == "concurrency" else start * 256,
    )


def _measure_with_restart(
    session: TuningSession, variant: Variant, settings: SearchSettings
) -> OperatingPoint:
    try:
        return measure_operating_point(session, variant, settings)
    except ServerDiedError:
        session.restart()
        return measure_operating_point(session, variant, settings)


__all__ = [
    "SEARCH_MEASURE",
    "SearchProgress",
    "SearchResult",
    "SearchSettings",
    "make_sampler",
    "measure_operating_point",
    "run_search",
    "space_for_session",
]
