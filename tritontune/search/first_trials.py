"""The first trials of a default search: what matters most is measured before any refinement.

With 8-12 trials over ten dimensions, four of them random starts, whether TPE ever measured the
knob that matters most was luck (on MiniLM one seed never tried INT8 in 12 trials). Two kinds of
knob set the scale of a config's throughput, the scheduler's knobs refine it: the **precision**
(each variant that passed its accuracy gate) and **how the host's compute is used** (on a CPU,
the split of the cores between instances and intra-op threads; on a GPU, the instance count).
So the first trials, with sensible scheduler knobs, are: (1) every accepted precision at the
balanced split, (2) every other split at the best precision, (3) the splits with the most
instances with small batches (:func:`small_batch`), then a second look at each precision whose
figure was within ``SCREENING_NOISE`` of the best's or disturbed, and (4) the best config at each
other graph optimization level. With a smaller budget, step 1 comes first: no default search
ends without having measured each accepted precision. Then :data:`REFINE_TRIALS` trials refine
the best config so far (TPE choosing the scheduler's knobs) before TPE takes the whole space.
The proposals are made from what the study holds (:class:`FirstTrialsSampler`), so a resumed
search or another worker goes on where the study is. Each step's reasons and measurements:
``docs/concepts/operating-point.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from tritontune.measure.loadgen import LoadMode
from tritontune.measure.measurement import SCREENING_NOISE
from tritontune.predict.calibration import SPLIT_KNOBS
from tritontune.search.pipeline_space import PipelineSpace, knob_name
from tritontune.search.sampler import ProposingSampler, propose_first
from tritontune.search.space import GRAPH_LEVEL, Dimension, IntRange, SearchSpace, effective_point
from tritontune.study.coordination import point_key
from tritontune.study.handle import TuningStudy
from tritontune.study.records import TrialResult

#: The scheduler knobs of every first trial, each where the space allows it (else its nearest).
SENSIBLE_KNOBS: dict[str, Any] = {
    "max_batch_size": 16,
    "dynamic_batching": True,
    "max_queue_delay": 1000,  # microseconds
    "preferred_batch_size": "none",
    "inter_op_thread_count": 1,
    "response_cache": False,
    "graph_optimization": "all",
    "tensorrt_precision": "FP16",
}

#: Step 3's batches at most (:func:`small_batch` makes them smaller where the SLO needs it).
SMALL_BATCH = 4

#: How many compute settings step 3 measures again with small batches (those with the most
#: instances: the fewest threads each).
SMALL_BATCH_SETTINGS = 2

#: Trials after the first ones that keep the best config's execution (below) and let TPE
#: choose the rest.
REFINE_TRIALS = 4

#: What a refining trial keeps of the best config: its precision and how it uses the compute.
EXECUTION_KNOBS = (
    "precision",
    "instance_kind",
    "instance_count",
    "intra_op_thread_count",
    "inter_op_thread_count",
)


def allowed(dimension: Dimension, value: Any) -> bool:
    if isinstance(dimension, IntRange):
        return isinstance(value, int) and dimension.low <= value <= dimension.high
    return value in dimension.values


def nearest(dimension: Dimension, wanted: Any) -> Any:
    """``wanted`` where the dimension has it; else its nearest value (log scale for numbers),
    else its first."""
    if allowed(dimension, wanted):
        return wanted
    if isinstance(dimension, IntRange):
        return min(max(int(wanted), dimension.low), dimension.high)
    numbers = [v for v in dimension.values if isinstance(v, (int, float)) and not isinstance(v, bool)]
    if numbers and isinstance(wanted, (int, float)) and not isinstance(wanted, bool) and wanted > 0:
        return min(numbers, key=lambda v: abs(math.log(max(v, 1e-9)) - math.log(wanted)))
    return dimension.values[0]


def values_of(dimension: Dimension) -> list[Any]:
    if isinstance(dimension, IntRange):
        return list(range(dimension.low, dimension.high + 1))
    return list(dimension.values)


def small_batch(measured: TrialResult | None) -> int:
    """Step 3's batch size for a compute setting, from ``measured`` (its step-1 or step-2 trial):
    the largest power of two up to :data:`SMALL_BATCH` whose batch, at the setting's latency for
    one request alone (the p50 at concurrency 1), runs twice within the p99 SLO. A request may
    wait for the batch its instance is running, then run in the next one; a batch takes at most
    as long as its requests one after another, so this bounds the p99 from above. 1: no batching.
    :data:`SMALL_BATCH` where nothing says otherwise (no figure at concurrency 1: an open-loop
    search or a traffic mix)."""
    point = measured.operating_point if measured is not None else None
    if point is None or point.load_mode != LoadMode.CONCURRENCY or not point.levels:
        return SMALL_BATCH
    lowest = min(point.levels, key=lambda level: level.load)
    if lowest.load != 1 or lowest.p50_s <= 0:
        return SMALL_BATCH
    batch = SMALL_BATCH
    while batch > 1 and 2 * batch * lowest.p50_s > point.slo_p99_s:
        batch //= 2
    return batch


def compute_settings(space: SearchSpace) -> list[dict[str, int]]:
    """The distinct ways the space's configs use the host's compute, the balanced one first (of
    two equally balanced, the one with fewer instances).

    With onnxruntime's intra-op threads in the space (a CPU host), its cores are read off the
    thread range's top (the default space's is the core count): ``i`` instances of ``cores // i``
    threads, ``i`` a power of two or all the cores. Otherwise the instance counts (powers of two,
    and the range's top: 1, 2, 4 per GPU by default)."""
    dims = space.dimensions
    instances = dims.get("instance_count")
    threads = dims.get("intra_op_thread_count")
    if instances is None:
        return [{}]
    counts = values_of(instances)
    top = max(counts)
    candidates = sorted({c for c in counts if c & (c - 1) == 0} | {top})
    settings: list[dict[str, int]] = []
    if threads is not None:
        cores = max(values_of(threads))
        for count in candidates:
            if count > cores:
                continue
            per_instance = nearest(threads, max(1, cores // count))
            settings.append({"instance_count": count, "intra_op_thread_count": per_instance})
        if not settings:
            settings = [{"instance_count": min(counts), "intra_op_thread_count": cores}]
        balanced = math.sqrt(cores)
    else:
        settings = [{"instance_count": count} for count in candidates]
        balanced = math.sqrt(top)
    unique = list({tuple(sorted(s.items())): s for s in settings}.values())
    # rounded: 1 and 2 instances are equally far from sqrt(2) on 2 cores, which floats would
    # break in favour of 2 (see the module docstring for why the fewer come first)
    unique.sort(
        key=lambda s: (
            round(abs(math.log(s["instance_count"]) - math.log(balanced)), 9),
            s["instance_count"],
        )
    )
    return unique


@dataclass(frozen=True)
class FirstTrials:
    """The first trials of a space (see the module docstring): complete points, so that each
    is one config."""

    space: SearchSpace
    precisions: tuple[str, ...]
    """The accepted precisions, in the space's order (empty: the space has no precision)."""
    settings: tuple[dict[str, int], ...]
    """The compute settings, the balanced one first."""
    model: str | None = None
    """The composing model of a pipeline whose first trials these are (None: the model)."""

    @classmethod
    def of(cls, space: SearchSpace, model: str | None = None) -> FirstTrials:
        dimension = space.dimensions.get("precision")
        precisions = tuple(str(p) for p in values_of(dimension)) if dimension is not None else ()
        return cls(space, precisions, tuple(compute_settings(space)), model)

    def point(
        self,
        setting: Mapping[str, int],
        precision: str | None,
        knobs: Mapping[str, Any] = SENSIBLE_KNOBS,
    ) -> dict[str, Any]:
        """A whole point: the setting, the precision, and ``knobs`` (else sensible values) for
        every other knob."""
        point: dict[str, Any] = {}
        for name, dimension in self.space.dimensions.items():
            if name in setting:
                point[name] = setting[name]
            elif name == "precision" and precision is not None:
                point[name] = precision
            elif name in knobs:
                point[name] = nearest(dimension, knobs[name])
            elif isinstance(dimension, IntRange):
                point[name] = dimension.low
            else:
                point[name] = dimension.values[0]
        if point.get("dynamic_batching") is False or point.get("max_batch_size") == 0:
            point.pop("max_queue_delay", None)
            point.pop("preferred_batch_size", None)
            if point.get("max_batch_size") == 0:
                point["dynamic_batching"] = False
        return point

    def step_one(self) -> list[dict[str, Any]]:
        """Every accepted precision at the balanced setting (one point without precisions)."""
        return [self.point(self.settings[0], p) for p in self.precisions or (None,)]

    def step_two(self, precisions: Sequence[str | None]) -> list[dict[str, Any]]:
        """Every other compute setting at each of ``precisions`` (the best first), setting by
        setting: each setting's precisions are measured one after the other."""
        return [self.point(s, p) for s in self.settings[1:] for p in precisions]

    def close_precisions(
        self, results: Sequence[TrialResult], first: Sequence[Mapping[str, Any]]
    ) -> list[str | None]:
        """The precision whose step-1 trial (``first``) served most (met its objective first),
        then those whose step-1 figure met it too within ``SCREENING_NOISE`` of it, by figure,
        then those whose step-1 figure was not clean
        (:attr:`~tritontune.study.figures.OperatingPoint.disturbed`); the first precision while
        none is measured. A figure taken while another process held a core orders nothing: on
        MiniLM (2 cores, p99 <= 100 ms) one put INT8 dynamic at 31 sentences/s against INT8
        static's 65, and the default search ended on INT8 static at 86, where INT8 dynamic
        serves 135-141 at 2 x 1 (``bench/results/budgets-12-minilm-2026-11-29``)."""
        figures = _measured(results, first)
        if not figures:
            return [self.precisions[0] if self.precisions else None]
        figures.sort(key=lambda m: (m[0], m[1]), reverse=True)
        feasible, best, point = figures[0]
        close = [point.get("precision")]
        if feasible:
            close += [
                p.get("precision")
                for ok, value, p in figures[1:]
                if ok and value >= (1 - SCREENING_NOISE) * best
            ]
        close += [
            p.get("precision")
            for _ok, _value, p in figures[1:]
            if _disturbed(results, p) and p.get("precision") not in close
        ]
        return close

    def step_three(
        self, precision: str | None, results: Sequence[TrialResult] = ()
    ) -> list[dict[str, Any]]:
        """The settings with the most instances again at ``precision``, with small batches
        (each setting's :func:`small_batch`, from its trial among ``results``; none where the
        space's smallest batches are further from it than one request is: a pipeline's model
        batches at least as much as the ensemble); a point that step 1 or 2 already has is left
        out (a space without batch sizes)."""
        most_instances = sorted(self.settings, key=lambda s: -s.get("instance_count", 0))
        earlier = [*self.step_one(), *self.step_two([precision])]
        sizes = self.space.dimensions.get("max_batch_size")
        points: list[dict[str, Any]] = []
        for setting in most_instances[:SMALL_BATCH_SETTINGS]:
            sensible = self.point(setting, precision)
            measured = next((r for r in results if _has(r.params, sensible)), None)
            batch = small_batch(measured)
            allowed = nearest(sizes, batch) if sizes is not None else batch
            if allowed > batch * batch:  # allowed / batch > batch / 1: nearer to no batching
                batch = 1
            knobs = {**SENSIBLE_KNOBS, "max_batch_size": batch, "dynamic_batching": batch > 1}
            point = self.point(setting, precision, knobs)
            if point not in earlier and point not in points:
                points.append(point)
        return points

    def step_four(self, results: Sequence[TrialResult]) -> list[dict[str, Any]]:
        """The best measured config of steps 1-3 (met its objective first) at each other graph
        optimization level, then so the best one splitting the cores otherwise that met it too
        within ``SCREENING_NOISE`` of the best's figure; none while none of them is measured, or
        where the space has one level. Only steps 1-3 are looked at: a step-4 trial that serves
        more asks for no more."""
        return self._step_four(results, self._steps_one_to_three(results))

    def _step_four(
        self, results: Sequence[TrialResult], earlier: Sequence[Mapping[str, Any]]
    ) -> list[dict[str, Any]]:
        levels = self._graph_levels()
        measured = _ranked(results, earlier)
        if not measured or len(levels) < 2:
            return []
        feasible, figure, best = measured[0]
        bases = [best]
        rival = next(
            (
                point
                for ok, value, point in measured[1:]
                if feasible
                and ok
                and value >= (1 - SCREENING_NOISE) * figure
                and _split(point) != _split(best)
            ),
            None,
        )
        if rival is not None:
            bases.append(rival)
        return [
            {**base, GRAPH_LEVEL: level}
            for base in bases
            for level in levels
            if level != base.get(GRAPH_LEVEL)
        ]

    def _steps_one_to_three(self, results: Sequence[TrialResult]) -> list[dict[str, Any]]:
        """Steps 1, 2 at the best precision, 3, then step 2's second looks at the close
        precisions, and step 3 again at one of them where it served most across them all."""
        first = self.step_one()
        leader, *close = self.close_precisions(results, first)
        second = self.step_two([leader])
        leading = self.best_precision(results, [*first, *second])
        third = self.step_three(leading, results)
        looks = self.step_two(close)
        best = self.best_precision(results, [*first, *second, *third, *looks])
        again = self.step_three(best, results) if best != leading else []
        return [*first, *second, *third, *looks, *again]

    def points(self, results: Sequence[TrialResult]) -> list[dict[str, Any]]:
        """Every first trial's point as far as ``results`` decide them (step 4 needs steps 1-3
        measured; step 2's close precisions, step 1)."""
        earlier = self._steps_one_to_three(results)
        return [*earlier, *self._step_four(results, earlier)]

    def _graph_levels(self) -> list[Any]:
        dimension = self.space.dimensions.get(GRAPH_LEVEL)
        return values_of(dimension) if dimension is not None else []

    def essential(self) -> int:
        """Steps 1 and 2 at one precision: each accepted precision, then each other split of
        the compute (what is measured before any refinement, where the budget allows)."""
        return len(self.step_one()) + len(self.settings) - 1

    def count(self) -> int:
        precision = self.precisions[0] if self.precisions else None
        steps = len(self.step_one()) + len(self.settings) - 1 + len(self.step_three(precision))
        return steps + max(0, len(self._graph_levels()) - 1)

    def describe(self) -> str:
        """``5 first trials: fp32, fp16, ... at 2 instances x 1 thread, then 1 x 2 at the best``."""

        def setting(s: Mapping[str, int]) -> str:
            if "intra_op_thread_count" in s:
                return f"{s['instance_count']} x {s['intra_op_thread_count']} threads"
            return f"{s['instance_count']} instance(s)" if s else "the model's instances"

        first = ", ".join(self.precisions) if self.precisions else "one config"
        of = f" of {self.model} (the bottleneck)" if self.model else ""
        text = f"{self.count()} first trial(s){of}: {first} at {setting(self.settings[0])}"
        others = ", ".join(setting(s) for s in self.settings[1:])
        if others:
            text += f"; then {others}" + (" at the best precision" if len(self.precisions) > 1 else "")
        precision = self.precisions[0] if self.precisions else None
        small = self.step_three(precision)
        if small:
            again = ", ".join(setting(self._setting_of(p)) for p in small)
            batches = (
                f"with batches up to {small[0].get('max_batch_size')} (fewer if one request's"
                " latency leaves less room under the SLO)"
                if small[0].get("dynamic_batching", True)
                else f"without batching (the space has no batches as small as {SMALL_BATCH})"
            )
            text += f"; then again {again}, {batches}"
        if others and len(self.precisions) > 1:
            text += (
                f"; then {others} at any precision within {SCREENING_NOISE:.0%} of the best"
                " or whose figure was disturbed (and small batches at it if it serves most)"
            )
        levels = self._graph_levels()
        if len(levels) > 1:
            text += f"; then the best of them at each other graph level ({', '.join(map(str, levels))})"
            if len(self.settings) > 1:
                text += (
                    f", and the best within {SCREENING_NOISE:.0%} of it using the compute another way"
                )
        if not self.refines():
            return text  # the trials after are the sampler's own, knobs kept or not
        return text + f"; then {REFINE_TRIALS} refining the best one's scheduler knobs"

    def refines(self) -> bool:
        """Whether the refining trials keep anything the sampler would vary: an execution
        knob with a choice in the space (else they are the sampler's trials, as said)."""
        dims = self.space.dimensions
        return any(k in dims and len(values_of(dims[k])) > 1 for k in EXECUTION_KNOBS)

    def _setting_of(self, point: Mapping[str, Any]) -> dict[str, int]:
        return {k: point[k] for k in ("instance_count", "intra_op_thread_count") if k in point}

    def next_point(
        self, results: Sequence[TrialResult], taken: Sequence[Mapping[str, Any]]
    ) -> dict[str, Any] | None:
        """The first point not yet measured, failed or being measured; None once all are. A
        taken point is one of them when it has its knobs (a workload's points add the
        scheduler's, which the sampler chose)."""
        return _first_untaken(self.points(results), taken)

    def refinement(self, results: Sequence[TrialResult]) -> dict[str, Any] | None:
        """The execution knobs of the best config measured (met its objective first), for a
        refining trial; None while nothing is measured."""
        measured = [r for r in results if r.operating_point is not None or r.capacity is not None]
        if not measured:
            return None
        best = max(measured, key=lambda r: (r.feasible, r.value))
        kept = {k: best.params[k] for k in EXECUTION_KNOBS if k in best.params}
        return {k: v for k, v in kept.items() if k in self.space.dimensions} or None

    def best_precision(
        self, results: Sequence[TrialResult], earlier: Sequence[Mapping[str, Any]]
    ) -> str | None:
        """The precision of the ``earlier`` trial that served most (met its objective first:
        the SLO, or a workload's); the first precision while none of them is measured."""
        best = _best_measured(results, earlier)
        if best is None:
            return self.precisions[0] if self.precisions else None
        return best.get("precision")


def _measured(
    results: Sequence[TrialResult], points: Sequence[Mapping[str, Any]]
) -> list[tuple[bool, float, Mapping[str, Any]]]:
    """(met its objective, figure, point) of each of ``points`` with a measured trial."""
    return [
        (r.feasible, r.value, point)
        for r in results
        if r.operating_point is not None or r.capacity is not None
        for point in points
        if _has(r.params, point)
    ]


def _ranked(
    results: Sequence[TrialResult], points: Sequence[Mapping[str, Any]]
) -> list[tuple[bool, float, Mapping[str, Any]]]:
    """:func:`_measured`, best first: those that met their objective (the SLO, or a workload's)
    first, then the most served; the earlier trial first on a tie."""
    return sorted(_measured(results, points), key=lambda m: (m[0], m[1]), reverse=True)


def _best_measured(
    results: Sequence[TrialResult], points: Sequence[Mapping[str, Any]]
) -> Mapping[str, Any] | None:
    """The first of :func:`_ranked`; None while none of ``points`` is measured."""
    ranked = _ranked(results, points)
    return ranked[0][2] if ranked else None


def _disturbed(results: Sequence[TrialResult], point: Mapping[str, Any]) -> bool:
    """Whether ``point``'s measured trial among ``results`` has a figure that is not clean."""
    return any(
        r.operating_point is not None and r.operating_point.disturbed
        for r in results
        if _has(r.params, point)
    )


def _split(point: Mapping[str, Any]) -> tuple[Any, ...]:
    """How ``point`` splits the host's compute (:data:`SPLIT_KNOBS`)."""
    return tuple(point.get(knob) for knob in SPLIT_KNOBS)


def _has(taken: Mapping[str, Any], point: Mapping[str, Any]) -> bool:
    """Whether ``taken`` is ``point``'s config: every knob of it the same (``taken`` may hold
    more: a workload's scheduler knobs)."""
    return all(k in taken and taken[k] == v for k, v in point.items())


class FirstTrialsSampler(ProposingSampler):
    """Proposes :class:`FirstTrials` until each was measured, then the best config's execution
    knobs for :data:`REFINE_TRIALS` trials (``base`` chooses their other knobs), then hands
    over to ``base``. First trials of a pipeline's composing model (:attr:`FirstTrials.model`)
    are read and proposed under its name (``MODEL/KNOB``: the study's points name its knobs
    so); the other models' knobs are ``base``'s."""

    def __init__(self, base: optuna.samplers.BaseSampler, first: FirstTrials) -> None:
        super().__init__(base)
        self.first = first
        self.prefix = knob_name(first.model, "") if first.model else ""
        self._done = False
        """Every first and refining trial was taken: a taken point stays taken, so the study
        need not be read for them again."""

    def propose(self, study: optuna.Study, trial: FrozenTrial) -> Mapping[str, Any] | None:
        if self._done:
            return None
        snapshot = TuningStudy.of(study).snapshot()
        results = [replace(r, params=self._own(r.params)) for r in snapshot.counted().values()]
        taken = [self._own(p) for p in snapshot.taken_points()]
        planned = self.first.points(results)
        point = _first_untaken(planned, taken)
        if point is not None:
            return self._theirs(point)
        # configs, not trials: a re-proposal told a known config's result is no refining trial;
        # but a refinement whose knobs allow fewer configs hands over after 4x the proposals
        first = max(self.first.count(), len(planned))
        configs = len({point_key(effective_point(p)) for p in taken})
        if configs < first + REFINE_TRIALS and len(taken) < first + 4 * REFINE_TRIALS:
            refinement = self.first.refinement(results)
            return self._theirs(refinement) if refinement is not None else None
        self._done = True
        return None

    def _own(self, point: Mapping[str, Any]) -> dict[str, Any]:
        """The knobs of ``point`` that are the first trials' model's, by their own names."""
        cut = len(self.prefix)
        return {k[cut:]: v for k, v in point.items() if k.startswith(self.prefix)}

    def _theirs(self, point: Mapping[str, Any]) -> dict[str, Any]:
        return {self.prefix + k: v for k, v in point.items()}


def _first_untaken(
    points: Sequence[dict[str, Any]], taken: Sequence[Mapping[str, Any]]
) -> dict[str, Any] | None:
    return next((p for p in points if not any(_has(t, p) for t in taken)), None)


def use_first_trials(study: TuningStudy, space: SearchSpace) -> FirstTrials | None:
    """Make the study's sampler propose ``space``'s first trials before its own (the snapping of
    ordered choices kept); returns them. A pipeline's are those of the model its focus searches
    alone first, the bottleneck (:meth:`PipelineSpace.focused_on`), the other models keeping
    their own configs meanwhile; none without a focus (None). On the MiniLM text pipeline
    (8 trials, p99 <= 100 ms), TPE alone measured FP16 six times and never INT8 dynamic in one
    seed, and its winner served less than the pipeline's own config (38.6 against 42.1
    sentences/s), where another seed's INT8 winner served 65."""
    if isinstance(space, PipelineSpace):
        if space.focus is None:
            return None
        first = FirstTrials.of(space.part(space.focus), space.focus)
    else:
        first = FirstTrials.of(space)
    propose_first(study.optuna_study, lambda base: FirstTrialsSampler(base, first), space)
    return first
