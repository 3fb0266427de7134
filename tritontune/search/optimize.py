"""``tritontune search``: the highest-throughput config whose p99 meets the SLO.

The single-class search is the one loop (:mod:`tritontune.search.loop`) with
:class:`SloObjective`: Optuna's TPE sampler proposes points of the :class:`SearchSpace`; each
becomes a config that is loaded on the running server (a reload, not a restart) and measured for
its :class:`~tritontune.study.figures.OperatingPoint`. A config that can't meet the SLO even at
the lowest load is an Optuna *constraint violation* (``trial.set_constraint``), which the sampler
learns from, rather than a result filtered out afterwards.

Around the loop: precision variants are built and accuracy-checked before any trial (a rejected
one leaves the space), the baseline (the model's own config) is measured once per study by one
worker, and after the budget the verdict comes from the playoff (:mod:`tritontune.search.playoff`):
the top candidates and the baseline re-measured interleaved, at loads that held; the trials' own
figures are screening figures. Several workers can share one study (an RDB storage such as
PostgreSQL); one of them measures the baseline and one runs the playoff (claims).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from tritontune import __version__
from tritontune.config.model_config import ModelConfig
from tritontune.config.pipeline import configs_to_text
from tritontune.config.variant import Variant
from tritontune.errors import InputError, ServerError
from tritontune.hostinfo import WorkerId, this_worker
from tritontune.measure.gpu_metrics import NO_GPUS
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck
from tritontune.search.driver import FinalistsNow, StudyPlan, drive
from tritontune.search.first_trials import FirstTrials
from tritontune.search.loop import LoopProgress
from tritontune.search.objective import Evaluation, Objective
from tritontune.search.operating_point import find_operating_point
from tritontune.search.phases import Phases
from tritontune.search.pipeline_space import PipelineSpace
from tritontune.search.playoff import (
    Contender,
    PlayoffSettings,
    RoundFigure,
    finalists,
    run_playoff,
)
from tritontune.search.predicted import CalibrationProgress, use_prediction
from tritontune.search.setup import make_sampler
from tritontune.search.space import SearchSpace
from tritontune.search.strategy import Strategy, StrategyChoice, choose_strategy
from tritontune.serving.bench import Bench
from tritontune.serving.faults import ConfigFailed, with_restarts
from tritontune.serving.served import ServedPipeline
from tritontune.study.figures import OperatingPoint, PlayoffResult, bottleneck
from tritontune.study.handle import TuningStudy
from tritontune.study.records import (
    RecordedPrecision,
    StudyIdentity,
    StudyRecord,
    TrialResult,
)
from tritontune.study.storage import DEFAULT_STORAGE, storage_label
from tritontune.study.verdict import BestPoint, best_point, gain_of, gain_over_baseline
from tritontune.units import format_duration

#: Shorter windows than ``profile``'s: a search measures many levels, and the stability rule and
#: the minimum of replies per window still hold.
#: The highest concurrency a closed-loop ramp tries when nobody says.
DEFAULT_MAX_LOAD = 512.0
SEARCH_MEASURE = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=50, max_windows=6)
#: The playoff's rounds: longer windows than the search's (more samples, a truer p99), short
#: enough that a dozen of them take about a minute.
PLAYOFF_MEASURE = MeasureSettings(warmup_s=0.5, window_s=0.5, min_window_requests=100, max_windows=6)

optuna.logging.set_verbosity(optuna.logging.WARNING)


def default_study_name(model: str, slo_p99_s: float, load_mode: LoadMode | str) -> str:
    return f"{model}-p99-{format_duration(slo_p99_s)}-{LoadMode(load_mode).value}"


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
    max_load: float | None = None
    """The highest load a ramp tries (None: concurrency :data:`DEFAULT_MAX_LOAD`, or 256x the
    first rate of an open-loop ramp)."""
    accuracy: AccuracySettings = field(default_factory=AccuracySettings)
    """How precision variants are judged and calibrated (bounds, output kinds, calibration)."""
    sampler: optuna.samplers.BaseSampler | None = None
    """Another Optuna sampler (e.g. ``GridSampler`` for an exhaustive baseline); TPE by default."""
    host_group: str | None = None
    """Workers on other hardware search as their own group: the study ``NAME@GROUP``, so that
    figures of different machines never mix (each group has its own baseline and winner)."""
    playoff: PlayoffSettings = field(default_factory=lambda: PlayoffSettings(measure=PLAYOFF_MEASURE))
    """The verdict's re-measurement (``top`` 0: no playoff, the screening figures stand)."""
    strategy: Strategy = Strategy.TPE
    """How configs are proposed: TPE, or ranked by prediction (:mod:`tritontune.search.predicted`)."""

    def study_name_for(self, model: str) -> str:
        """The study this search reads and writes: ``--study`` or the default name, in the host
        group's own study when there is one."""
        name = self.study_name or default_study_name(model, self.slo_p99_s, self.load_mode)
        return f"{name}@{self.host_group}" if self.host_group else name

    @property
    def storage_name(self) -> str:
        return storage_label(self.storage)


@dataclass
class SearchProgress:
    """Optional hooks for a live display; every one gets plain data."""

    on_baseline_start: Callable[[], None] | None = None
    on_baseline: Callable[[OperatingPoint], None] | None = None
    on_trial_start: Callable[[int, int | None, dict[str, Any]], None] | None = None
    """(the trial's count among the study's, the budget, its point)."""
    on_trial_done: Callable[[TrialResult, TrialResult | None, float | None], None] | None = None
    """(this trial, the best so far, ETA in seconds or None)."""
    on_precisions: Callable[[dict[str, PrecisionCheck]], None] | None = None
    """The precision variants built and checked before the search (accepted or not)."""
    on_playoff_start: Callable[[list[Contender], int], None] | None = None
    """(the contenders, rounds per stage)."""
    on_playoff_round: Callable[[int, int, Contender, RoundFigure | None], None] | None = None
    """(stage, round, contender, its figure or None when it failed)."""
    calibration: CalibrationProgress | None = None
    """``--strategy predict``: calibration and ranking."""
    on_first_trials: Callable[[FirstTrials], None] | None = None
    """The default strategy's first trials (each accepted precision, each compute setting)."""
    on_strategy: Callable[[StrategyChoice], None] | None = None
    """The strategy the trials use, and why (``--strategy auto`` chooses after the baseline)."""


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
    phases: Phases = field(default_factory=Phases)
    """Seconds per phase of this run (precision checks, baseline, calibration, trials, playoff)."""

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
        return best_point(self.study)

    @property
    def playoff(self) -> PlayoffResult | None:
        return self.study.playoff

    @property
    def precisions(self) -> dict[str, RecordedPrecision]:
        """The precision variants checked before the search: accepted or not, with accuracy."""
        return self.study.precisions

    def improvement(self, result: TrialResult) -> float | None:
        """Screening throughput relative to the baseline's screening figure (0.25 = 25 % better)."""
        return gain_over_baseline(self.study.baseline, result.throughput)

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
                "predicted": r.predicted,
            }

        winner = self.winner
        best = None
        if winner is not None:
            gain = gain_of(self.study, winner)
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
            "storage": storage_label(self.storage),
            "slo_p99_ms": self.slo_p99_s * 1e3,
            "load_mode": self.load_mode.value,
            "strategy": self.study.strategy,
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
            "phase_seconds": dict(self.phases.seconds),
            "precisions": {p: c.to_dict() for p, c in self.study.precisions.items()} or None,
        }


@dataclass(frozen=True)
class SloObjective:
    """The single-class objective: a config's operating point under the SLO (the highest
    throughput whose p99 meets it, ramp then bisect)."""

    space: SearchSpace
    settings: SearchSettings

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        return self.space.suggest(trial)

    def variant(self, point: Mapping[str, Any]) -> Variant:
        return self.space.to_variant(dict(point))

    def evaluate(self, bench: Bench, variant: Variant) -> Evaluation:
        return self.evaluate_near(bench, variant, None)

    def evaluate_near(self, bench: Bench, variant: Variant, load: float | None) -> Evaluation:
        point, switch_s = measure_operating_point(bench, variant, self.settings, near=load)
        return Evaluation(point, switch_s)


PREDICT_REFUSED = (
    "--strategy predict: a pipeline's configs are not predicted yet (the simulator models one "
    "model's batcher); use --strategy tpe"
)


def refuse_before_launch(bench: Bench, settings: SearchSettings) -> None:
    """What :func:`run_search` would refuse for ``bench`` (not started yet), said before its
    server is launched: a pipeline searched with ``--strategy predict``."""
    if settings.strategy == Strategy.PREDICT and isinstance(bench.serves, ServedPipeline):
        raise InputError(PREDICT_REFUSED)


def run_search(
    session: Bench,
    space: SearchSpace,
    settings: SearchSettings,
    progress: SearchProgress | None = None,
) -> SearchResult:
    """Run (or resume, or join) the search; the bench's server must be started."""
    progress = progress or SearchProgress()
    identity = StudyIdentity(session.source.name, settings.slo_p99_s, settings.load_mode)
    study = TuningStudy.create_or_resume(
        settings.storage,
        settings.study_name_for(session.source.name),
        identity=identity,
        sampler=make_sampler(settings.trials, settings.seed, settings.sampler),
    )
    worker = this_worker()
    chosen: list[StrategyChoice] = []  # once the baseline is known

    def with_baseline(checked: SearchSpace, phases: Phases) -> SearchSpace:
        with phases.timed("baseline"):
            baseline = _baseline(study, session, settings, progress, worker)
        chosen.append(_strategy(study, settings.strategy, baseline, checked, progress))
        if isinstance(checked, PipelineSpace):
            return _focus_on_bottleneck(checked, baseline, settings.trials)
        return checked

    def objective(searched: SearchSpace, phases: Phases) -> Objective:
        slo = SloObjective(searched, settings)
        if chosen[0].strategy != Strategy.PREDICT:
            return slo
        if isinstance(searched, PipelineSpace):
            raise InputError(PREDICT_REFUSED)
        with phases.timed("calibration"):
            return use_prediction(
                study,
                session,
                searched,
                slo,
                slo_p99_s=settings.slo_p99_s,
                load_mode=settings.load_mode,
                max_load=settings.max_load,
                worker=worker,
                progress=progress.calibration,
            )

    driven = drive(
        study,
        session,
        space,
        StudyPlan(
            objective=objective,
            finals=Playoff(session, settings, progress),
            limits=settings,
            prepare=with_baseline,
            first_trials=lambda: chosen[0].strategy == Strategy.TPE,
            on_precisions=progress.on_precisions,
            on_first_trials=progress.on_first_trials,
            loop=LoopProgress(progress.on_trial_start, progress.on_trial_done),
            worker=worker,
        ),
    )
    return SearchResult(
        study=study.read(),
        storage=settings.storage_name,
        resumed=study.resumed,
        stop_reason=driven.outcome.stop_reason,
        trials_this_run=driven.outcome.trials_this_run,
        restarts=driven.restarts,
        phases=driven.phases,
    )


def _strategy(
    study: TuningStudy,
    asked: Strategy,
    baseline: OperatingPoint | None,
    space: SearchSpace,
    progress: SearchProgress,
) -> StrategyChoice:
    """The strategy this run searches with: ``asked``, or for ``auto`` the one the study chose
    when it first decided (a resumed search, or another worker, keeps it), else the baseline's
    (:func:`~tritontune.search.strategy.choose_strategy`). A worker that found the baseline
    claimed by another, not measured yet, searches with TPE and leaves the choice to it."""
    saved = study.saved_strategy() if asked == Strategy.AUTO else None
    if saved is not None:
        choice = StrategyChoice(Strategy(saved), "chosen when the study began")
    else:
        choice = choose_strategy(asked, baseline, pipeline=isinstance(space, PipelineSpace))
        if asked == Strategy.AUTO and baseline is not None:
            study.save_strategy(choice.strategy.value)
    if progress.on_strategy:
        progress.on_strategy(choice)
    return choice


def _baseline(
    study: TuningStudy,
    session: Bench,
    settings: SearchSettings,
    progress: SearchProgress,
    worker: WorkerId,
) -> OperatingPoint | None:
    """The model's own config, measured once per study by one worker (a resumed search, or
    another worker, reuses it; a worker that finds it claimed goes on without it)."""
    baseline = study.baseline()
    if baseline is None:
        if not study.claim("baseline", worker):
            return None
        if progress.on_baseline_start:
            progress.on_baseline_start()
        try:
            (measured, _), _ = with_restarts(
                session, lambda: measure_operating_point(session, Variant(), settings)
            )
        except ConfigFailed as failed:
            raise ServerError(f"the model's own config could not be measured: {failed}") from None
        study.save_baseline(measured, configs_to_text(session.configs(Variant())))
        baseline = measured
    if progress.on_baseline:
        progress.on_baseline(baseline)
    return baseline


@dataclass
class Playoff:
    """The single-class search's final rounds, as the driver runs them
    (:mod:`tritontune.search.driver`): the top candidates and the baseline (:mod:`.playoff`),
    run once by one worker and kept in the study (a resumed search whose top candidates are
    unchanged reuses it)."""

    bench: Bench
    settings: SearchSettings
    progress: SearchProgress
    job: str = "playoff"
    phase: str = "playoff"

    def finalists(self, study: TuningStudy) -> FinalistsNow[StudyRecord] | None:
        record = study.read()
        top = self._top(record)
        if not top:
            return None
        decided = (
            [e.trial for e in record.playoff.entries if e.trial is not None] if record.playoff else None
        )
        return FinalistsNow([r.number for r in top], decided, record)

    def _top(self, record: StudyRecord) -> list[TrialResult]:
        ranked = [r for r in record.feasible if r.operating_point is not None]
        return finalists(ranked, self.settings.playoff.top)

    def run(self, study: TuningStudy, objective: Objective, now: FinalistsNow[StudyRecord]) -> None:
        record = now.record
        contenders = []
        for trial in self._top(record):
            assert trial.operating_point is not None
            variant = objective.space.to_variant(trial.params)
            contenders.append(
                Contender(
                    trial=trial.number,
                    variant=variant,
                    load=trial.operating_point.load,
                    screening_throughput=trial.operating_point.throughput,
                    simplicity=simplicity(self.bench.configs(variant).values()),
                )
            )
        if record.baseline is not None and record.baseline.levels:
            base = record.baseline
            load = base.load if base.feasible else min(level.load for level in base.levels)
            contenders.append(
                Contender(None, Variant(), load, base.throughput if base.feasible else 0.0)
            )
        if self.progress.on_playoff_start:
            self.progress.on_playoff_start(contenders, self.settings.playoff.rounds)
        result = run_playoff(
            self.bench,
            contenders,
            self.settings.slo_p99_s,
            self.settings.load_mode,
            self.settings.playoff,
            on_round=self.progress.on_playoff_round,
        )
        study.save_playoff(result)


def simplicity(configs: Iterable[ModelConfig]) -> tuple[float, ...]:
    """How much a config costs to run, for the playoff's tie rule: instances, then the largest
    batch, then the queue delay (smaller is simpler); a pipeline's, summed over its models
    (the largest batch: the largest of any)."""
    instances, largest, delay = 0, 0, 0
    for config in configs:
        instances += sum(max(group.count, 1) for group in config.instance_group) or 1
        largest = max(largest, config.max_batch_size)
        if config.HasField("dynamic_batching"):
            delay += config.dynamic_batching.max_queue_delay_microseconds
    return (float(instances), float(largest), float(delay))


def _focus_on_bottleneck(
    space: PipelineSpace, baseline: OperatingPoint | None, trials: int | None
) -> PipelineSpace:
    """The pipeline's space, proposing only the bottleneck step's knobs for the first half of
    the budget, and at least until its first trials measured each accepted precision and each
    split of the cores (one trial left to the rest; see :mod:`tritontune.search.pipeline_space`);
    without the baseline's step figures (another worker measures it), every step's knobs from
    the start. On the MiniLM text pipeline with 6 trials, a focus of 3 let TPE choose the
    tokenizer's knobs beside the encoder's 2 x 1 split in INT8: two tokenizer instances on 2
    cores took the encoder's time, and the split served 48-51 sentences/s where, beside one
    tokenizer instance without batching, it served 73."""
    caller = space.models[0] if space.calls else None  # a BLS model waits for its calls
    step = bottleneck(baseline.steps, caller) if baseline is not None else None
    if step is None:
        return space
    budget = trials or 20
    essential = FirstTrials.of(space.part(step.model)).essential()
    return space.focused_on(step.model, max(3, budget // 2, min(essential, budget - 1)))


def measure_operating_point(
    session: Bench, variant: Variant, settings: SearchSettings, near: float | None = None
) -> tuple[OperatingPoint, float | None]:
    """Load ``variant`` and find its operating point, exactly as a search trial does; returns it
    and the seconds the switch to the config took.

    ``near``: the load a prediction puts the operating point at. The walk starts there instead
    of at the bottom (a start that misses steps down, :mod:`tritontune.search.ramp`), sparing
    the levels a ramp from concurrency 1 spends reaching it."""
    receipt = session.load(variant)

    def measure(spec: LoadSpec) -> Measurement:
        return session.measure(spec, settings.measure)

    concurrency = settings.load_mode == LoadMode.CONCURRENCY
    start = 1.0
    if near is not None and near > 0:
        start = max(1.0, float(round(near)) if concurrency else near)
    elif not concurrency:
        # Open loop needs a first rate: half of what one request at a time achieves.
        unloaded = session.measure(LoadSpec.concurrency(1), settings.measure)
        start = max(1.0, 0.5 * unloaded.request_rate)
    max_load = settings.max_load or (DEFAULT_MAX_LOAD if concurrency else start * 256)
    point = find_operating_point(
        measure,
        settings.slo_p99_s,
        load_mode=settings.load_mode,
        start=min(start, max_load),
        max_load=max_load,
    )
    return point, receipt.switch_s
