"""``--strategy predict``: rank the whole space by a model of Triton's scheduler, measure the best.

TPE treats the server as a black box: every config it learns from costs a ramp of real
measurements. This strategy measures what the scheduler cannot change instead (each execution
setting's service time per batch size: :mod:`tritontune.search.calibrate`), predicts every config
of the space with the batcher simulator (:mod:`tritontune.predict.batcher`), and proposes configs
to the one search loop in the order of the prediction; the measurement, never the prediction, is
the trial's figure. Each measurement corrects the settings sharing its instances and threads, and
the ranking (:mod:`tritontune.predict.ranking`) is redone before every proposal. Proposals
alternate between the best corrected prediction (exploit) and the best config of the setting that
would teach most (explore: :meth:`~tritontune.predict.ranking.Corrections.novelty`); a setting
missed by more than its band is not proposed again until another was measured
(:func:`missed_setting`). Once the ranking is used up, TPE goes on. See
``docs/concepts/prediction.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from tritontune.config.variant import Variant
from tritontune.hostinfo import WorkerId, describe_host
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.calibration import (
    Calibration,
    SettingCalibration,
    knob_settings,
    precision_settings,
    setting_key,
)
from tritontune.predict.ranking import (
    DEFAULT_BAND,
    Corrections,
    Predicted,
    RankedSpace,
    Ranking,
)
from tritontune.search.calibrate import calibrate_setting
from tritontune.search.grid import (
    all_points,
    dimension_values,
    execution_values,
    reference_setting,
)
from tritontune.search.objective import Evaluation, StartsNear
from tritontune.search.sampler import ProposingSampler, propose_first
from tritontune.search.space import SearchSpace, effective_point
from tritontune.search.strategy import Strategy
from tritontune.serving.bench import Bench
from tritontune.serving.faults import ConfigFailed, with_restarts
from tritontune.study.coordination import PointKey, point_key
from tritontune.study.handle import TuningStudy
from tritontune.study.records import TrialResult

#: Every this-many proposals, one explores (the best config of the most novel settings).
EXPLORE_EVERY = 2
#: How long a worker waits for settings another worker is calibrating.
CALIBRATION_WAIT_S = 600.0


def corrections_of(results: Sequence[TrialResult]) -> Corrections:
    """The corrections the study's measured trials make (those measured with a prediction)."""
    return Corrections.of(
        (r.predicted, r.operating_point.throughput) for r in results if r.operating_point is not None
    )


def missed_setting(results: Sequence[TrialResult]) -> str | None:
    """The setting of the last measured proposal when its measurement missed the prediction by
    more than the band it was proposed with (None otherwise): it waits until another setting has
    been measured."""
    proposals = [r for r in results if r.predicted and r.predicted.get("setting") and r.operating_point]
    if not proposals:
        return None
    last = max(proposals, key=lambda r: r.number)
    assert last.predicted is not None and last.operating_point is not None
    expected = float(last.predicted.get("throughput") or 0.0)
    band = float(last.predicted.get("band", DEFAULT_BAND))
    measured = last.operating_point.throughput
    if expected > 0 and abs(measured / expected - 1) <= band:
        return None
    return str(last.predicted["setting"])


def choose_next(
    ranking: Ranking,
    corrections: Corrections,
    taken: set[PointKey],
    proposals: int,
    missed: str | None = None,
    novel: Ranking | None = None,
    unmeasured: Ranking | None = None,
) -> tuple[Predicted, float, float] | None:
    """The next config to measure and its corrected prediction and band (None: every config the
    ranking kept was measured). ``missed``: a setting not to propose now (while others are
    open). ``novel``: the ranking of the settings that would teach most
    (:meth:`Corrections.novelty`), from which every :data:`EXPLORE_EVERY`-th proposal comes.
    ``unmeasured``: the ranking of the settings never measured, whose best an exploiting
    proposal may take instead (:func:`_new_setting_first`)."""

    def open_of(candidates: Ranking | None) -> list[Predicted]:
        found = (  # taken: effective points (a config measured at another batch size is known)
            [p for p in candidates.predicted if point_key(effective_point(p.point)) not in taken]
            if candidates
            else []
        )
        if missed is not None and any(p.setting != missed for p in found):
            found = [p for p in found if p.setting != missed]
        return sorted(found, key=lambda p: -p.throughput * corrections.factor(p.setting))

    ordered = open_of(ranking)
    exploring = proposals % EXPLORE_EVERY == EXPLORE_EVERY - 1
    explored = open_of(novel) if exploring else []
    if explored:
        pick = explored[0]
    elif ordered:
        pick = _new_setting_first(ordered[0], open_of(unmeasured), corrections)
    else:
        return None
    band = corrections.band(pick.setting, pick.default_band)
    return pick, corrections.factor(pick.setting), band


def _new_setting_first(
    best: Predicted, unmeasured: list[Predicted], corrections: Corrections
) -> Predicted:
    """``best``, or, when its setting was measured, the best config of the settings never
    measured (``unmeasured``, best first) if it may be as good: its corrected prediction within
    its band of the best's. Another config of a measured setting differs in the scheduler's
    knobs, which the model tells apart by less than a measurement does; a new setting may be
    the better one.

    On MiniLM (p99 <= 100 ms) the best predictions were one setting's configs differing in a
    preferred batch size or a queue delay (72.5 sentences/s), the same split and precision at the
    two other graph levels of onnxruntime, composed from FP32 calibrations, 1-6 % lower and
    out of the 40 best: two of three exploiting trials measured the first setting again
    (within 3 % of each other), and the level the best known config runs at was never
    measured."""
    if best.setting not in corrections.by_setting or not unmeasured:
        return best
    figure = best.throughput * corrections.factor(best.setting)
    candidate = unmeasured[0]
    band = corrections.band(candidate.setting, candidate.default_band)
    if candidate.throughput * corrections.factor(candidate.setting) >= (1 - band) * figure:
        return candidate
    return best


class PredictedSampler(ProposingSampler):
    """Proposes the ranking's configs in order (see the module docstring); ``base`` (TPE) once
    the ranking is used up, and for trials queued with fixed params (recovered ones)."""

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        ranked: Callable[[], RankedSpace],
    ) -> None:
        super().__init__(base)
        self._ranked = ranked
        self.predictions: dict[int, dict[str, Any]] = {}
        """Trial number -> what was predicted of its config (corrected), for the study."""

    def propose(self, study: optuna.Study, trial: FrozenTrial) -> Mapping[str, Any] | None:
        handle = TuningStudy.of(study)
        taken = handle.snapshot().taken(effective_point)
        results = handle.read().results
        corrections = corrections_of(results)
        ranked = self._ranked()
        proposals = len(self.predictions)
        novel = None
        if proposals % EXPLORE_EVERY == EXPLORE_EVERY - 1:
            # the best configs of the settings that would teach most: a split of the cores never
            # measured, then a precision never measured (not another graph level of a measured
            # one), found in the whole space, not only among the best predictions
            most = max((corrections.novelty(key) for key in ranked.settings), default=0)
            if most > 0:
                novel = ranked.rank(
                    corrections.factor, where=lambda key: corrections.novelty(key) == most
                )
        unmeasured = None
        if novel is None and corrections.by_setting:
            # the best configs of the settings never measured, from the whole space: another
            # graph level of the best setting may not be among the best 40 configs at all
            unmeasured = ranked.rank(
                corrections.factor, where=lambda key: key not in corrections.by_setting
            )
        choice = choose_next(
            ranked.rank(corrections.factor),
            corrections,
            taken,
            proposals,
            missed_setting(results),
            novel,
            unmeasured,
        )
        if choice is None:
            return None
        predicted, correction, band = choice
        self.predictions[trial.number] = predicted.to_dict(correction, band)
        return predicted.point


@dataclass
class CalibrationProgress:
    """Optional hooks for a live display."""

    on_setting_start: Callable[[int, int, dict[str, Any]], None] | None = None
    """(index, settings to calibrate, the setting)."""
    on_setting_done: Callable[[SettingCalibration | None, str | None], None] | None = None
    """(the calibration, or None and why it failed)."""
    on_ranked: Callable[[Ranking], None] | None = None


def calibrate_space(
    study: TuningStudy,
    bench: Bench,
    space: SearchSpace,
    *,
    worker: WorkerId,
    slo_p99_s: float | None = None,
    progress: CalibrationProgress | None = None,
    wait_s: float = CALIBRATION_WAIT_S,
) -> Calibration:
    """Calibrate the settings the space's ranking needs: each precision
    (:func:`precision_settings`), then the other knobs in the fastest one
    (:func:`knob_settings`), each kept in the study as it is done: a resumed search calibrates
    only what is missing, and a setting another worker claimed is waited for (up to
    ``wait_s``), not measured twice."""
    progress = progress or CalibrationProgress()
    calibration = study.calibration()
    if calibration is None:
        study.save_calibration_reference(reference_setting(space), cores_of(space))
        calibration = study.calibration()
        assert calibration is not None
    values = execution_values(space)
    joint = calibration.joint_setting(values, max_threads_of(space))
    first = precision_settings(calibration.reference, values)
    total = len(first) + len(knob_settings(calibration, values, joint))  # known before the figures
    calibrate = partial(
        _calibrate_plan,
        study,
        bench,
        space,
        worker=worker,
        slo_p99_s=slo_p99_s,
        progress=progress,
        wait_s=wait_s,
    )
    calibration = calibrate(calibration, first, 0, total)
    return calibrate(calibration, knob_settings(calibration, values, joint), len(first), total)


def _calibrate_plan(
    study: TuningStudy,
    bench: Bench,
    space: SearchSpace,
    calibration: Calibration,
    plan: Sequence[dict[str, Any]],
    done: int,
    total: int,
    *,
    worker: WorkerId,
    slo_p99_s: float | None,
    progress: CalibrationProgress,
    wait_s: float,
) -> Calibration:
    """Calibrate the settings of ``plan`` not in ``calibration`` yet (``done`` of ``total``
    settings were in earlier plans, for the progress), then wait for those other workers
    claimed."""
    largest = max_batch_size_of(space, bench)
    waiting = []
    for index, setting in enumerate(plan):
        if calibration.has(setting):
            continue
        if not study.claim("calibrate-" + setting_key(setting), worker):
            waiting.append(setting)
            continue
        if progress.on_setting_start:
            progress.on_setting_start(done + index + 1, total, setting)
        try:
            calibrated, _ = with_restarts(
                bench,
                partial(
                    calibrate_setting,
                    bench,
                    space,
                    setting,
                    max_batch_size=largest,
                    slo_p99_s=slo_p99_s,
                ),
            )
        except ConfigFailed as failed:
            if progress.on_setting_done:
                progress.on_setting_done(None, failed.reason)
            continue
        study.save_calibration(calibrated)
        calibration.add(calibrated)
        if progress.on_setting_done:
            progress.on_setting_done(calibrated, None)
    deadline = time.monotonic() + wait_s
    while waiting and time.monotonic() < deadline:
        time.sleep(1.0)
        calibration = study.calibration() or calibration
        waiting = [s for s in waiting if not calibration.has(s)]
    return calibration


def cores_of(space: SearchSpace) -> int:
    """The CPU cores the instances of ``space`` share (0 on a GPU: no CPU contention to model).
    The server is taken to compute on this machine's cores, as the default space takes it."""
    kind = space.dimensions.get("instance_kind")
    if kind is not None and "gpu" in dimension_values("instance_kind", kind):
        return 0
    return describe_host().cpu_count


def max_threads_of(space: SearchSpace) -> int:
    """The most intra-op threads in all a config of ``space`` may ask (its limit, else the
    most instances times the most threads)."""
    if space.max_threads is not None:
        return space.max_threads
    most = 1
    for name in ("instance_count", "intra_op_thread_count"):
        dim = space.dimensions.get(name)
        if dim is not None:
            most *= int(max(dimension_values(name, dim)))
    return most


def max_batch_size_of(space: SearchSpace, bench: Bench) -> int:
    """The largest batch the space can configure (the base config's when it is fixed)."""
    dim = space.dimensions.get("max_batch_size")
    if dim is None:
        return int(bench.source.base_config.max_batch_size)
    return int(max(dimension_values("max_batch_size", dim)))


@dataclass
class PredictedObjective:
    """An objective with each proposal's prediction kept in its trial (for the report's
    predicted-vs-measured comparison); the figure is still ``inner``'s measurement, its walk over
    loads started at the predicted load (corrected as the throughput is: at the SLO's latency, a
    closed loop's concurrency scales with the throughput) rather than at the bottom."""

    inner: StartsNear
    sampler: PredictedSampler
    study: TuningStudy
    _near: float | None = None
    """The load the proposal being measured is predicted to serve at (None: not a proposal)."""

    @property
    def space(self) -> SearchSpace:
        return self.inner.space

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        point = self.inner.suggest(trial)
        predicted = self.sampler.predictions.get(trial.number)
        self._near = None
        if predicted is not None:
            self.study.save_prediction(trial, predicted)
            self._near = float(predicted["load"]) * float(predicted["correction"])
        return point

    def variant(self, point: Mapping[str, Any]) -> Variant:
        return self.inner.variant(point)

    def evaluate(self, bench: Bench, variant: Variant) -> Evaluation:
        return self.inner.evaluate_near(bench, variant, self._near)


def use_prediction(
    study: TuningStudy,
    bench: Bench,
    space: SearchSpace,
    objective: StartsNear,
    *,
    slo_p99_s: float,
    load_mode: LoadMode,
    max_load: float | None,
    worker: WorkerId,
    progress: CalibrationProgress | None = None,
) -> PredictedObjective:
    """Calibrate, rank, and make the study's sampler propose by the ranking; returns the
    objective the loop runs (``objective``, keeping each proposal's prediction)."""
    progress = progress or CalibrationProgress()
    calibration = calibrate_space(
        study, bench, space, worker=worker, slo_p99_s=slo_p99_s, progress=progress
    )
    ranked: list[RankedSpace] = []

    def ranked_space() -> RankedSpace:
        if not ranked:
            ranked.append(
                RankedSpace(
                    all_points(space),
                    calibration,
                    lambda point: bench.build(space.to_variant(point)),
                    slo_p99_s=slo_p99_s,
                    load_mode=load_mode,
                    request_batch=bench.request_shape.batch_size,
                    max_load=max_load,
                )
            )
            if progress.on_ranked:
                progress.on_ranked(ranked[0].rank())
        return ranked[0]

    sampler = propose_first(study.optuna_study, lambda base: PredictedSampler(base, ranked_space), space)
    study.save_strategy(Strategy.PREDICT.value)
    return PredictedObjective(objective, sampler, study)
