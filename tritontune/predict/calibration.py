"""What the scheduler cannot change: the model's service time per batch size, per execution setting.

A config has two kinds of knobs. *Scheduler* knobs (``max_batch_size``, dynamic batching, the
queue delay, preferred sizes) decide which requests run together and when; the simulator
(:mod:`tritontune.predict.batcher`) models them exactly. *Execution* knobs (:data:`EXECUTION_KNOBS`:
instance count, threads, precision, graph level) change how long one batch takes to compute,
which only a measurement can say. Calibration measures that: for one execution setting the model
is served with a batcher that forms batches of many sizes (delay 0, the largest batch size of
the space) under closed-loop loads of rising concurrency, and Triton's own statistics
(``batch_stats``) give the compute time of every execution by its batch size, apart from the time
requests queued. With every instance busy, the times include what the instances cost each other
(on a CPU host they share the cores).

A :class:`SettingCalibration` keeps, per measured batch size, the mean compute time and how many
executions it came from; the spread (one coefficient of variation for every size) and the time a
request spends outside the server (client, gRPC, network: ``overhead_s``) come from the
unbatched, one-request-per-instance level. :meth:`Calibration.curve` fits a
:class:`~tritontune.predict.batcher.ServiceCurve` to a setting: measured settings directly;
others, not measured, as the *reference* setting's curve times each knob's measured ratio to it
(one knob changed at a time: see :func:`settings_to_calibrate`). The study keeps the calibration
(:meth:`Calibration.to_dict`), so a resumed search and other workers reuse it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tritontune.predict.batcher import ServiceCurve

#: The knobs that change how long one execution takes (the rest only schedule requests).
EXECUTION_KNOBS = (
    "instance_count",
    "instance_kind",
    "intra_op_thread_count",
    "inter_op_thread_count",
    "precision",
    "tensorrt_precision",
    "graph_optimization",
)
#: A batch size's mean is used only when it came from at least this many executions.
MIN_EXECUTIONS = 3
#: z of the 99th percentile of a normal distribution (the spread is fitted as a lognormal).
_Z99 = 2.3263


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
    """Coefficient of variation of one execution's time (every size alike)."""
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

    @property
    def key(self) -> str:
        return setting_key(self.setting)

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


@dataclass(frozen=True)
class Prediction:
    """Where a setting's service curve came from."""

    curve: ServiceCurve
    overhead_s: float
    path_s: float
    measured: bool
    """The setting itself was calibrated (else: composed from one-knob ratios)."""
    sources: tuple[str, ...]
    """The calibrated settings it used (their keys)."""


@dataclass
class Calibration:
    """Every calibrated setting of a study, and which one the others are composed from."""

    reference: dict[str, Any]
    settings: dict[str, SettingCalibration] = field(default_factory=dict)

    def add(self, calibrated: SettingCalibration) -> None:
        self.settings[calibrated.key] = calibrated

    def has(self, setting: Mapping[str, Any]) -> bool:
        return setting_key(setting) in self.settings

    def predict(self, setting: Mapping[str, Any]) -> Prediction:
        """The service curve of ``setting``: its own calibration when it has one; otherwise the
        reference's curve times, for each knob that differs from the reference, the ratio of the
        setting with only that knob changed to the reference (batch size by batch size, at the
        sizes both measured). Knobs are assumed to act independently; a measured config's
        correction (:mod:`tritontune.predict.strategy`) catches where they don't."""
        own = self.settings.get(setting_key(setting))
        if own is not None:
            return Prediction(own.curve(), own.overhead_s, own.path_s, True, (own.key,))
        reference = self.settings.get(setting_key(self.reference))
        if reference is None:
            raise KeyError("the reference setting is not calibrated")
        base = {p.batch_size: p.mean_s for p in reference.points}
        means = dict(base)
        sources = [reference.key]
        overhead = reference.overhead_s
        path = reference.path_s
        cv = reference.cv
        for name, value in setting.items():
            if self.reference.get(name) == value:
                continue
            one = self.settings.get(setting_key({**self.reference, name: value}))
            if one is None:
                raise KeyError(f"no calibration changes {name} to {value!r} alone")
            sources.append(one.key)
            theirs = {p.batch_size: p.mean_s for p in one.points}
            ratio = _ratios(base, theirs)
            means = {b: m * ratio(b) for b, m in means.items()}
            cv = max(cv, one.cv)
            path = max(path, one.path_s)  # the slowest path of those it is composed from
        curve = ServiceCurve({b: (m, m * cv) for b, m in sorted(means.items())})
        return Prediction(curve, overhead, path, False, tuple(sources))

    def to_dict(self) -> dict[str, Any]:
        return {
            "reference": dict(self.reference),
            "settings": [s.to_dict() for s in self.settings.values()],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Calibration:
        calibration = cls(dict(data["reference"]))
        for entry in data.get("settings", []):
            calibration.add(SettingCalibration.from_dict(entry))
        return calibration


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
    reference: Mapping[str, Any], values: Mapping[str, Iterable[Any]]
) -> list[dict[str, Any]]:
    """The reference setting, then one setting per other value of each knob with only that knob
    changed: ``1 + sum(len(values) - 1)`` calibrations instead of their product (24 settings of
    the default CPU space take 6)."""
    plan = [dict(reference)]
    for name, options in values.items():
        for value in options:
            if value != reference.get(name):
                plan.append({**reference, name: value})
    return plan
