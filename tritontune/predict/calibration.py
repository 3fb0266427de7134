"""What the scheduler cannot change: the model's service time per batch size, per execution setting.

*Scheduler* knobs (batch sizes, the queue delay) decide which requests run together and when;
the simulator (:mod:`tritontune.predict.batcher`) models them. *Execution* knobs
(:data:`EXECUTION_KNOBS`: instances, threads, precision, graph level) change how long one batch
takes, which only a measurement can say: for one execution setting the model is served with a
batcher that forms batches of many sizes under rising closed-loop loads, and Triton's
``batch_stats`` give the compute time of each execution by its batch size, apart from queueing.
A :class:`SettingCalibration` keeps those times, the time outside the server and the spread
(:func:`fit_cv`); :meth:`Calibration.curve` fits a
:class:`~tritontune.predict.batcher.ServiceCurve` to any setting: measured ones directly, others
composed from their precision's curve and each other knob's measured ratio, in the fastest
precision (:func:`precision_settings`, :func:`knob_settings`). Knobs that share the cores are not
independent (composed so, MiniLM's 2 instances x 2 threads was predicted at 337 infer/s and
served 113-135): their composition is corrected by a model of the shared cores
(:func:`contention`) that the joint setting's calibration can refute. A prediction says how it
was made (:class:`Derivation`); a composed or modelled one gets a wider band. The study keeps the
calibration, so a resumed search and other workers reuse it. In full:
``docs/concepts/prediction.md``.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tritontune.enums import TextEnum
from tritontune.predict.batcher import (
    CLIENT_JITTER,
    CLIENT_ROUNDS,
    BatcherConfig,
    ClosedLoop,
    ServiceCurve,
    simulate,
)

#: The knobs that change how long one execution takes (the rest only schedule requests).
#: onnxruntime's ``inter_op_thread_count`` is not one: it parallelizes across graph nodes only in
#: onnxruntime's parallel execution mode, and Triton's onnxruntime backend runs the sequential
#: one unless a config says otherwise (calibrated on MiniLM, 2 inter-op threads took what 1 did,
#: within noise); a prediction takes its first value, the search's other strategies still vary it.
EXECUTION_KNOBS = (
    "instance_count",
    "instance_kind",
    "intra_op_thread_count",
    "precision",
    "tensorrt_precision",
    "graph_optimization",
)
#: The knob calibrated first: the others are calibrated in its fastest value (:func:`knob_settings`).
PRECISION_KNOB = "precision"
#: The knobs whose settings compete for the server's cores (see the module docstring).
CORE_KNOBS = ("instance_count", "intra_op_thread_count")
#: How a setting splits the host's compute: where its instances run, how many, with how many
#: threads each (settings alike in these compete for the cores alike).
SPLIT_KNOBS = ("instance_kind", *CORE_KNOBS)
#: A batch size's mean is used only when it came from at least this many executions.
MIN_EXECUTIONS = 3
#: z of the 99th percentile of a normal distribution (the spread is fitted as a lognormal).
_Z99 = 2.3263
#: The oversubscription exponent is fitted only where the model stretches a time by more than this.
_FIT_ABOVE = 1.05
#: The fitted exponent is kept within these bounds (a noisy joint calibration can't make it absurd).
ALPHA_BOUNDS = (0.0, 4.0)


def execution_setting(point: Mapping[str, Any]) -> dict[str, Any]:
    """The execution knobs of a point of the space (what its service time depends on)."""
    return {name: point[name] for name in EXECUTION_KNOBS if name in point}


def setting_key(setting: Mapping[str, Any]) -> str:
    """One spelling of a setting, for dictionaries and the study: canonical JSON."""
    return json.dumps(dict(setting), sort_keys=True, separators=(",", ":"))


def lognormal_cv(p50: float, p99: float) -> float:
    """The coefficient of variation of a lognormal with this median and 99th percentile: the
    spread of a service time from one unbatched level's latencies (the tail is what a p99 SLO
    sees, so it is fitted to the tail rather than to a variance)."""
    if not (p50 > 0 and p99 > p50):
        return 0.0
    sigma = math.log(p99 / p50) / _Z99
    return math.sqrt(math.expm1(sigma * sigma))


#: The spreads (coefficients of variation of one execution) a calibration's levels are fitted
#: over: 0 to 1 by 0.05 (beyond 1 a single busy second would give every execution a heavy tail).
CV_GRID = tuple(step / 20 for step in range(21))
#: Levels whose p99 was more than this many SLOs are left out of the fit: a queue that grows
#: past the SLO is no config's operating point.
FIT_SLOS = 2.0


@dataclass(frozen=True)
class LoadLevel:
    """One calibration level's latency, as the client saw it."""

    load: int
    """Closed-loop concurrency."""
    p50_s: float
    p99_s: float


@dataclass(frozen=True)
class BatchPoint:
    """The mean compute time of one batch size, from ``executions`` executions."""

    batch_size: int
    mean_s: float
    executions: int


@dataclass(frozen=True)
class SettingCalibration:
    """One execution setting, measured."""

    setting: dict[str, Any]
    points: tuple[BatchPoint, ...]
    """Ascending batch size; only sizes with :data:`MIN_EXECUTIONS` or more."""
    cv: float
    """Coefficient of variation of one execution's time (every size alike): :func:`fit_cv`."""
    overhead_s: float
    """Time a request spends outside Triton's queue and compute: client, gRPC, network."""
    path_s: float = 0.0
    """Time each request holds the request path (client, gRPC, Triton's frontend on shared
    CPUs): ``1 /`` the fastest calibration level's request rate when the instances were often
    idle in it (the path, not the model, limited it); 0 when the model did."""
    levels: int = 0
    """Load levels measured for it."""
    seconds: float = 0.0
    """Wall time the calibration of this setting took (loading included)."""
    latencies: tuple[LoadLevel, ...] = ()
    """Each level's latency (kept so the spread's fit can be checked; empty in studies written
    before it was kept)."""

    @property
    def key(self) -> str:
        return setting_key(self.setting)

    def means(self) -> dict[int, float]:
        """Mean compute time by batch size."""
        return {p.batch_size: p.mean_s for p in self.points}

    def curve(self) -> ServiceCurve:
        return ServiceCurve(
            {p.batch_size: (p.mean_s, p.mean_s * self.cv) for p in self.points},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "setting": dict(self.setting),
            "points": [[p.batch_size, p.mean_s, p.executions] for p in self.points],
            "cv": self.cv,
            "overhead_s": self.overhead_s,
            "path_s": self.path_s,
            "levels": self.levels,
            "seconds": self.seconds,
            "latencies": [[lv.load, lv.p50_s, lv.p99_s] for lv in self.latencies],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SettingCalibration:
        return cls(
            setting=dict(data["setting"]),
            points=tuple(BatchPoint(int(b), float(m), int(n)) for b, m, n in data["points"]),
            cv=float(data["cv"]),
            overhead_s=float(data["overhead_s"]),
            path_s=float(data.get("path_s", 0.0)),
            levels=int(data.get("levels", 0)),
            seconds=float(data.get("seconds", 0.0)),
            latencies=tuple(
                LoadLevel(int(load), float(p50), float(p99))
                for load, p50, p99 in data.get("latencies", ())
            ),
        )


def fit_points(samples: Iterable[tuple[int, int, float]]) -> tuple[BatchPoint, ...]:
    """Batch points from ``(batch_size, executions, compute_s in all)`` samples of several load
    levels: pooled into power-of-two bands of batch size (1, 2, 3-4, 5-8, ...: the handful of sizes
    a curve needs, each from enough executions), a band's point at its executions' mean size and
    mean time; bands with fewer than :data:`MIN_EXECUTIONS` are left out. A larger batch never
    takes less time: where a band's mean is below the one before (noise), the two are pooled
    (pool-adjacent-violators), so the curve the simulator interpolates is monotone."""
    bands: dict[int, list[float]] = {}
    for size, executions, total_s in samples:
        if executions <= 0 or total_s <= 0:
            continue
        band = bands.setdefault(max(size - 1, 0).bit_length(), [0, 0.0, 0.0])
        band[0] += executions
        band[1] += executions * size
        band[2] += total_s
    pooled: list[list[float]] = [
        [count, sizes, total]
        for _, (count, sizes, total) in sorted(bands.items())
        if count >= MIN_EXECUTIONS
    ]
    monotone: list[list[float]] = []
    for band in pooled:
        monotone.append(band)
        while (
            len(monotone) > 1 and monotone[-1][2] / monotone[-1][0] < monotone[-2][2] / monotone[-2][0]
        ):
            last = monotone.pop()
            monotone[-1] = [a + b for a, b in zip(monotone[-1], last, strict=True)]
    points: dict[int, BatchPoint] = {}
    for count, sizes, total in monotone:
        size = max(1, round(sizes / count))
        points[size] = BatchPoint(size, total / count, int(count))
    return tuple(points[size] for size in sorted(points))


def fit_cv(
    points: Iterable[BatchPoint],
    latencies: Iterable[LoadLevel],
    *,
    instances: int,
    max_batch_size: int,
    overhead_s: float,
    path_s: float = 0.0,
    slo_p99_s: float | None = None,
) -> float:
    """The spread of one execution that makes the batcher model's p99 closest to the measured
    one at the calibration's levels with every instance busy (a concurrency of at least
    ``instances``; with an SLO, within :data:`FIT_SLOS` SLOs): of :data:`CV_GRID`, the one with
    the least sum of ``|log(measured / modelled)|``, the smaller one on a tie. The levels are
    modelled with the calibration's own batcher (whatever is queued, no delay, batches up to
    ``max_batch_size``) and clients (:data:`~tritontune.predict.batcher.CLIENT_JITTER`). It is
    never below the concurrency-1 level's spread (a lognormal fitted to its p50 and p99, at most
    1), and without a level to fit it is that spread.

    Every instance busy, because a config's operating point keeps them busy, and there (on a CPU
    host) the executions and the load generator compete for the cores. On MiniLM with 2
    instances x 1 thread on 2 cores (INT8 dynamic, 17 ms a request), concurrency 1 measured a
    p99 of 19 ms, as a spread of 0.05 models it, and concurrency 2 one of 41 ms, which takes
    0.3-0.4; with the concurrency-1 spread alone, the predicted p99 at the operating point was a
    median 32 % under the measured one, in 45 of 50 configs
    (``bench/results/budgets-minilm-2026-11-29``). Never below it, because the levels' batches
    mix sizes, and the mix spreads their latencies as much as the executions do: VGG16's 2 x 1
    INT8 static was fitted at 0, against 0.14 at concurrency 1, and the p99 of its configs at
    batches <= 4 came out 44-51 % above the predicted one (``bench/results/spread-fit-2026-11-29``)."""
    levels = tuple(latencies)
    single = [level for level in levels if level.load == 1 and level.p99_s > 0]
    least = min(lognormal_cv(single[-1].p50_s, single[-1].p99_s), 1.0) if single else 0.0
    usable = [
        level
        for level in levels
        if level.load >= instances
        and level.p99_s > 0
        and (slo_p99_s is None or level.p99_s <= FIT_SLOS * slo_p99_s)
    ]
    means = {p.batch_size: p.mean_s for p in points}
    if not usable or not means:
        return least
    config = BatcherConfig(
        max_batch_size=max_batch_size, dynamic_batching=max_batch_size > 0, instances=instances
    )

    def misfit(cv: float) -> float:
        curve = ServiceCurve({size: (mean, mean * cv) for size, mean in means.items()})
        total = 0.0
        for level in usable:
            modelled = simulate(
                curve,
                config,
                ClosedLoop(level.load),
                n_requests=max(2000, CLIENT_ROUNDS * level.load),
                overhead_s=overhead_s,
                path_s=path_s,
                jitter=CLIENT_JITTER,
            )
            total += abs(math.log(level.p99_s / modelled.p99_s))
        return total

    return max(least, min(CV_GRID, key=lambda cv: (misfit(cv), cv)))


class Derivation(TextEnum):
    """How a setting's service curve was obtained (the less measured, the wider its band)."""

    MEASURED = "measured"
    """The setting itself was calibrated."""
    COMPOSED = "composed"
    """One-knob ratios multiplied: knobs that do not share a resource."""
    CONTENTION = "contention"
    """Composed, then stretched by the model of instances and threads sharing the cores."""


@dataclass(frozen=True)
class Prediction:
    """Where a setting's service curve came from."""

    curve: ServiceCurve
    overhead_s: float
    path_s: float
    derivation: Derivation
    sources: tuple[str, ...]
    """The calibrated settings it used (their keys)."""

    @property
    def measured(self) -> bool:
        """The setting itself was calibrated."""
        return self.derivation == Derivation.MEASURED


@dataclass
class Calibration:
    """Every calibrated setting of a study, and which one the others are composed from."""

    reference: dict[str, Any]
    settings: dict[str, SettingCalibration] = field(default_factory=dict)
    cores: int = 0
    """CPU cores the server computes on (0: unknown, instances and threads then compose as if
    independent)."""

    def add(self, calibrated: SettingCalibration) -> None:
        self.settings[calibrated.key] = calibrated

    def has(self, setting: Mapping[str, Any]) -> bool:
        return setting_key(setting) in self.settings

    def predict(self, setting: Mapping[str, Any]) -> Prediction:
        """The service curve of ``setting``: its own calibration when it has one; otherwise the
        reference's curve times, for each knob that differs from the reference, the ratio of the
        setting with only that knob changed to the reference (batch size by batch size, at the
        sizes both measured), stretched by :func:`contention` where instances and threads share
        the cores. A measured config's correction (:class:`tritontune.predict.ranking.Corrections`)
        catches the rest."""
        own = self.settings.get(setting_key(setting))
        if own is not None:
            return Prediction(own.curve(), own.overhead_s, own.path_s, Derivation.MEASURED, (own.key,))
        composed = self._composed(setting)
        derivation = Derivation.COMPOSED
        means = composed.means
        sources = list(composed.sources)
        if self._shares_cores(setting) and not composed.anchored:
            alpha, fitted_on = self.alpha()
            if fitted_on is not None:
                sources.append(fitted_on)
            stretch = self._stretch(setting, alpha)
            means = {b: m * stretch(b) for b, m in means.items()}
            derivation = Derivation.CONTENTION
        curve = ServiceCurve({b: (m, m * composed.cv) for b, m in sorted(means.items())})
        return Prediction(curve, composed.overhead_s, composed.path_s, derivation, tuple(sources))

    def _composed(self, setting: Mapping[str, Any], *, anchor: bool = True) -> _Composed:
        """A *base*'s curve times each differing knob's one-knob ratio (independent knobs). The
        bases are the precisions' *homes* (a precision at the reference's other knobs; the
        reference is its own precision's), the setting's own first (:meth:`_bases`). The start
        is its own home, or, where the setting shares the cores, the first base whose joint
        split with ``setting``'s instances and threads was calibrated, and only the other knobs
        are composed on it. A knob's ratio is taken around the first base where that knob alone was
        calibrated: the other knobs are calibrated in the fastest precision only
        (:func:`knob_settings`), and the other precisions take its ratios."""
        bases = self._bases(setting)
        start, anchored = bases[0], False
        if anchor and self._shares_cores(setting):
            split = {k: setting[k] for k in CORE_KNOBS if k in setting}
            for base in bases:
                joint = self.settings.get(setting_key({**base.setting, **split}))
                if joint is not None:
                    start, anchored = joint, True
                    break
        means = start.means()
        sources = [start.key]
        path, cv = start.path_s, start.cv
        for name, value in setting.items():
            if start.setting.get(name) == value:
                continue
            base, one = self._one_knob(bases, name, value)
            sources.append(one.key)
            ratio = _ratios(base.means(), one.means())
            means = {b: m * ratio(b) for b, m in means.items()}
            cv = max(cv, one.cv)
            path = max(path, one.path_s)  # the slowest path of those it is composed from
        return _Composed(means, start.overhead_s, path, cv, tuple(sources), anchored)

    def _bases(self, setting: Mapping[str, Any]) -> list[SettingCalibration]:
        """What ``setting`` is composed around: its precision's home (see :meth:`_composed`; the
        reference when the precision is the reference's, or its home is not calibrated), then
        the other homes, those with the most settings calibrated around them first."""
        reference = self.settings.get(setting_key(self.reference))
        if reference is None:
            raise KeyError("the reference setting is not calibrated")
        homes = [reference, *(c for c in self.settings.values() if self._is_home(c))]
        own = next(
            (h for h in homes if h.setting.get(PRECISION_KNOB) == setting.get(PRECISION_KNOB)), None
        )
        around = Counter(c.setting.get(PRECISION_KNOB) for c in self.settings.values())
        rest = sorted(
            (h for h in homes if h is not own), key=lambda h: -around[h.setting.get(PRECISION_KNOB)]
        )
        return [own, *rest] if own is not None else rest

    def _is_home(self, calibrated: SettingCalibration) -> bool:
        """Whether ``calibrated`` is a precision's home: the reference but for its precision."""
        name = PRECISION_KNOB
        changed = {k for k, v in calibrated.setting.items() if self.reference.get(k) != v}
        return changed == {name} and set(calibrated.setting) == set(self.reference)

    def fastest_precision(self) -> Any:
        """The calibrated precision whose home is fastest at batch size 1 (the reference's
        precision when none is faster)."""
        reference = self.settings.get(setting_key(self.reference))
        fastest = self.reference.get(PRECISION_KNOB)
        if reference is None:
            return fastest
        speed = 1.0
        for home in filter(self._is_home, self.settings.values()):
            ratio = _ratios(reference.means(), home.means())(1)
            if ratio < speed:
                fastest, speed = home.setting[PRECISION_KNOB], ratio
        return fastest

    def _one_knob(
        self, bases: list[SettingCalibration], name: str, value: Any
    ) -> tuple[SettingCalibration, SettingCalibration]:
        """The first base with ``name`` changed to ``value`` alone calibrated, and that setting."""
        for base in bases:
            one = self.settings.get(setting_key({**base.setting, name: value}))
            if one is not None and one is not base:
                return base, one
        raise KeyError(f"no calibration changes {name} to {value!r} alone")

    def _shares_cores(self, setting: Mapping[str, Any]) -> bool:
        """Whether ``setting`` changes both instances and threads from the reference on a CPU
        host of known cores (only then does composing them assume what isn't so)."""
        if self.cores <= 0 or setting.get("instance_kind", "cpu") != "cpu":
            return False
        return all(name in setting and setting[name] != self.reference.get(name) for name in CORE_KNOBS)

    def _stretch(self, setting: Mapping[str, Any], alpha: float) -> Any:
        """What sharing the cores adds to the composed time of ``setting``, by batch size."""
        instances = int(setting["instance_count"])
        threads = int(setting["intra_op_thread_count"])
        bases = self._bases(setting)
        try:
            base, one = self._one_knob(bases, "intra_op_thread_count", threads)
            speedup = _ratios(one.means(), base.means())
        except KeyError:  # the reference's threads, or never calibrated alone: no speed-up known
            speedup = _ratios(bases[0].means(), bases[0].means())  # 1 at every size
        ref_instances = int(self.reference.get("instance_count", 1) or 1)
        ref_threads = int(self.reference.get("intra_op_thread_count", 1) or 1)

        def stretch(size: int) -> float:
            busy = min(float(threads), max(1.0, ref_threads * speedup(size)))
            return contention(instances, busy, ref_instances, float(ref_threads), self.cores, alpha)

        return stretch

    def joint_setting(
        self, values: Mapping[str, Iterable[Any]], max_threads: int
    ) -> dict[str, Any] | None:
        """The setting that calibrates the contention model: the most instances with the most
        intra-op threads the space allows (instances x threads at most ``max_threads``), other
        knobs the reference's; None where no value of the space makes them share the cores."""
        if self.cores <= 0 or not all(name in values for name in CORE_KNOBS):
            return None
        instances = sorted(int(v) for v in values["instance_count"])
        threads = sorted(int(v) for v in values["intra_op_thread_count"])
        best: tuple[int, int] | None = None
        for n in instances:
            for t in threads:
                if n * t > max_threads or n * t <= self.cores:
                    continue
                if n == self.reference.get("instance_count") or t == self.reference.get(
                    "intra_op_thread_count"
                ):
                    continue  # a one-knob calibration already
                if best is None or (n * t, n) > (best[0] * best[1], best[0]):
                    best = (n, t)
        if best is None:
            return None
        return {**self.reference, "instance_count": best[0], "intra_op_thread_count": best[1]}

    def alpha(self) -> tuple[float, str | None]:
        """The oversubscription exponent, and the joint setting it was fitted on (1, None before
        one is calibrated): at each batch size where the model stretches the composed time by
        more than 5 %, ``log(measured / composed) / log(stretch at alpha 1)``; their median."""
        fits: list[tuple[float, str]] = []
        for calibrated in self.settings.values():
            setting = calibrated.setting
            if not self._shares_cores(setting):
                continue
            try:
                composed = self._composed(setting, anchor=False)
            except KeyError:
                continue
            stretch = self._stretch(setting, 1.0)
            for size, measured in calibrated.means().items():
                model = composed.means.get(size)
                linear = stretch(size)
                if model and linear > _FIT_ABOVE:
                    fits.append((math.log(measured / model) / math.log(linear), calibrated.key))
        if not fits:
            return 1.0, None
        values = sorted(a for a, _ in fits)
        alpha = values[len(values) // 2]
        low, high = ALPHA_BOUNDS
        return min(max(alpha, low), high), fits[0][1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": dict(self.reference),
            "cores": self.cores,
            "settings": [s.to_dict() for s in self.settings.values()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        calibration = cls(dict(data["reference"]), cores=int(data.get("cores", 0)))
        for entry in data.get("settings", []):
            calibration.add(SettingCalibration.from_dict(entry))
        return calibration


@dataclass(frozen=True)
class _Composed:
    means: dict[int, float]
    overhead_s: float
    path_s: float
    cv: float
    sources: tuple[str, ...]
    anchored: bool = False
    """Composed on the calibrated joint setting of its instances and threads."""


def contention(
    instances: int,
    busy: float,
    ref_instances: int,
    ref_busy: float,
    cores: int,
    alpha: float = 1.0,
) -> float:
    """How much longer an execution takes with ``instances`` busy instances each keeping
    ``busy`` cores busy than the one-knob ratios it was composed from say: they measured
    ``instances`` at the reference's ``ref_busy`` and ``busy`` at the reference's
    ``ref_instances``, each with its own share of the ``cores``, so the stretch is the whole
    demand's oversubscription over the product of theirs, to the power ``alpha``."""

    def over(asked: float) -> float:
        return max(1.0, asked / cores)

    together = over(instances * busy) * over(ref_instances * ref_busy)
    apart = over(instances * ref_busy) * over(ref_instances * busy)
    return (together / apart) ** alpha


def _ratios(base: Mapping[int, float], other: Mapping[int, float]) -> Any:
    """``other / base`` at any batch size: at the sizes both have, interpolated (log of the size)
    between them, held flat beyond them; one common size gives one ratio for all."""
    common = sorted(set(base) & set(other))
    if not common:
        overall = (sum(other.values()) / len(other)) / (sum(base.values()) / len(base))
        return lambda size: overall
    ratios = [(math.log(b), other[b] / base[b]) for b in common]

    def ratio(size: int) -> float:
        x = math.log(size)
        if x <= ratios[0][0]:
            return ratios[0][1]
        for (x0, r0), (x1, r1) in zip(ratios, ratios[1:], strict=False):
            if x <= x1:
                return r0 + (r1 - r0) * (x - x0) / (x1 - x0)
        return ratios[-1][1]

    return ratio


def settings_to_calibrate(
    reference: Mapping[str, Any],
    values: Mapping[str, Iterable[Any]],
    joint: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The reference setting, then one setting per other value of each knob with only that knob
    changed: ``1 + sum(len(values) - 1)`` calibrations instead of their product (24 settings of
    the default CPU space take 6); then ``joint`` (:meth:`Calibration.joint_setting`), which
    fits the model of instances and threads sharing the cores."""
    plan = [dict(reference)]
    for name, options in values.items():
        for value in options:
            if value != reference.get(name):
                plan.append({**reference, name: value})
    if joint is not None and dict(joint) not in plan:
        plan.append(dict(joint))
    return plan


def precision_settings(
    reference: Mapping[str, Any], values: Mapping[str, Iterable[Any]]
) -> list[dict[str, Any]]:
    """The first plan: the reference, then each other precision at the reference's other knobs
    (that precision's *home*)."""
    return settings_to_calibrate(reference, {k: v for k, v in values.items() if k == PRECISION_KNOB})


def knob_settings(
    calibration: Calibration,
    values: Mapping[str, Iterable[Any]],
    joint: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The second plan, once the first (:func:`precision_settings`) is calibrated: every other
    knob one at a time from the fastest precision's home (at batch size 1; the reference where
    no precision is faster), and at ``joint``'s split of the cores in that precision.

    Precision interacts with the other knobs: a static INT8 model's quantize/dequantize pairs
    become integer kernels only at onnxruntime's higher graph levels (VGG16's INT8 static at
    level ``basic``, composed from FP32's ratio: predicted 19.6 images/s, served 2.5), and two
    INT8 instances cost each other more than two FP32 ones on VGG16 (composed, 2 x 1 INT8 static
    was predicted at 22.5 images/s and served 19), less on MiniLM. So the knobs are calibrated
    in the precision the ranking puts first, and the other precisions take its ratios."""
    name = PRECISION_KNOB
    others = {knob: options for knob, options in values.items() if knob != name}
    home = dict(calibration.reference)
    if name in values:
        home[name] = calibration.fastest_precision()
    split = {**joint, **{k: v for k, v in home.items() if k not in CORE_KNOBS}} if joint else None
    return settings_to_calibrate(home, others, split)[1:]  # the home is in the first plan
