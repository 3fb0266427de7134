"""A config's operating point: the highest load whose p99 meets the SLO, and its throughput.

Found with few measurements (background.md, "The method"): start at the lowest load, ramp up
geometrically (8x while p99 is under an eighth of the SLO, 4x while under half, else 2x), stop as
soon as p99 crosses the SLO or throughput stops growing (past saturation more load only adds
queueing), then bisect (twice at most) between the last load that met the SLO and the first that
didn't.

A load level *meets the SLO* when its p99 is at or under it, fewer than 1 % of its requests failed,
and (open loop) the server completed at least 90 % of the offered rate; a server that falls behind
an open-loop schedule is over capacity even if the replies it did send were fast.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from tritontune.measure.gpu_metrics import GpuFigures, gpu_from_list, gpu_to_list
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import MAX_ERROR_RATE, Measurement

MIN_RATE_ACHIEVED = 0.90
SATURATION_GAIN = 0.03


@dataclass(frozen=True)
class LevelResult:
    """One measured load level, as kept in a study."""

    load: float
    throughput: float
    p50_s: float
    p95_s: float
    p99_s: float
    errors: int
    stable: bool
    meets_slo: bool
    mean_s: float | None = None
    """Mean latency (Little's law needs the mean); None in studies made before it was kept."""
    requests: int = 0
    """Replies counted at this level (successful and failed), for error rates."""
    disturbance: str | None = None
    """What the interference check said of this level's measurement (None: nothing to say)."""
    gpu: tuple[GpuFigures, ...] | None = None
    """Per-GPU figures of the level (None: the server reports no GPUs)."""

    def to_dict(self) -> dict:
        return {
            "load": self.load,
            "throughput": round(self.throughput, 3),
            "mean_ms": None if self.mean_s is None else round(self.mean_s * 1e3, 4),
            "requests": self.requests,
            "p50_ms": round(self.p50_s * 1e3, 4),
            "p95_ms": round(self.p95_s * 1e3, 4),
            "p99_ms": round(self.p99_s * 1e3, 4),
            "errors": self.errors,
            "stable": self.stable,
            "meets_slo": self.meets_slo,
            "disturbance": self.disturbance,
            "gpu": gpu_to_list(self.gpu),
        }


@dataclass(frozen=True)
class OperatingPoint:
    """Where a config runs best under the SLO (``feasible`` False: not even at the lowest load)."""

    slo_p99_s: float
    load_mode: LoadMode
    feasible: bool
    load: float
    throughput: float
    p50_s: float
    p99_s: float
    p99_deviation: float
    throughput_deviation: float
    avg_batch_size: float | None
    levels: list[LevelResult] = field(default_factory=list)
    mean_s: float | None = None
    """Mean latency at the operating point (for Little's law); None in older studies."""

    @property
    def slo_excess_s(self) -> float:
        """How far p99 is over the SLO at the lowest load (> 0 infeasible): Optuna's constraint."""
        excess = self.p99_s - self.slo_p99_s
        return excess if not self.feasible else min(0.0, excess)

    def to_dict(self) -> dict:
        return {
            "slo_p99_ms": self.slo_p99_s * 1e3,
            "load_mode": LoadMode(self.load_mode).value,
            "feasible": self.feasible,
            "load": self.load,
            "throughput": round(self.throughput, 3),
            "mean_ms": None if self.mean_s is None else round(self.mean_s * 1e3, 4),
            "p50_ms": round(self.p50_s * 1e3, 4),
            "p99_ms": round(self.p99_s * 1e3, 4),
            "p99_deviation": round(self.p99_deviation, 4),
            "throughput_deviation": round(self.throughput_deviation, 4),
            "avg_batch_size": None if self.avg_batch_size is None else round(self.avg_batch_size, 3),
            "levels": [level.to_dict() for level in self.levels],
        }

    @classmethod
    def from_dict(cls, data: dict) -> OperatingPoint:
        levels = [
            LevelResult(
                load=lv["load"],
                throughput=lv["throughput"],
                p50_s=lv["p50_ms"] / 1e3,
                p95_s=lv["p95_ms"] / 1e3,
                p99_s=lv["p99_ms"] / 1e3,
                errors=lv["errors"],
                stable=lv["stable"],
                meets_slo=lv["meets_slo"],
                mean_s=lv["mean_ms"] / 1e3 if lv.get("mean_ms") is not None else None,
                requests=lv.get("requests", 0),
                disturbance=lv.get("disturbance"),
                gpu=gpu_from_list(lv.get("gpu")),
            )
            for lv in data.get("levels", [])
        ]
        return cls(
            slo_p99_s=data["slo_p99_ms"] / 1e3,
            load_mode=LoadMode(data["load_mode"]),
            feasible=data["feasible"],
            load=data["load"],
            throughput=data["throughput"],
            p50_s=data["p50_ms"] / 1e3,
            p99_s=data["p99_ms"] / 1e3,
            p99_deviation=data.get("p99_deviation", 0.0),
            throughput_deviation=data.get("throughput_deviation", 0.0),
            avg_batch_size=data.get("avg_batch_size"),
            levels=levels,
            mean_s=data["mean_ms"] / 1e3 if data.get("mean_ms") is not None else None,
        )


def meets_slo(m: Measurement, slo_p99_s: float) -> bool:
    total = m.latency.count + m.error_count
    if total == 0 or m.latency.count == 0:
        return False
    if m.error_count / total > MAX_ERROR_RATE:
        return False
    if m.load.mode == LoadMode.RATE and m.request_rate < MIN_RATE_ACHIEVED * m.load.value:
        return False
    return m.latency.p99 <= slo_p99_s


def find_operating_point(
    measure: Callable[[LoadSpec], Measurement],
    slo_p99_s: float,
    *,
    load_mode: LoadMode = LoadMode.CONCURRENCY,
    start: float = 1,
    max_load: float = 512,
    precision: float = 0.25,
    max_bisections: int = 2,
) -> OperatingPoint:
    """Ramp, then bisect, calling ``measure`` once per load level.

    ``start`` is the lowest load (concurrency 1, or a request rate); ``precision`` ends the
    bisection once the gap between passing and failing loads is that fraction of the passing one,
    ``max_bisections`` bounds its steps (each one is a measurement; the throughput curve is flat
    near the cliff, so finer steps buy little).
    """
    integer = load_mode == "concurrency"
    measured: dict[float, Measurement] = {}

    def at(load: float) -> Measurement:
        load = float(max(1, round(load))) if integer else float(load)
        if load not in measured:
            spec = LoadSpec.concurrency(int(load)) if integer else LoadSpec.rate(load)
            measured[load] = measure(spec)
        return measured[load]

    first = at(start)
    if not meets_slo(first, slo_p99_s):
        return _point(slo_p99_s, load_mode, first, feasible=False, measured=measured)

    good, best = float(start), first
    bad: float | None = None
    while good < max_load:
        headroom = slo_p99_s / max(best.latency.p99, 1e-9)
        step = 8.0 if headroom > 8 else 4.0 if headroom > 2 else 2.0
        load = min(max_load, good * step)
        if integer:
            load = float(max(good + 1, round(load)))
        m = at(load)
        if not meets_slo(m, slo_p99_s):
            bad = load
            break
        gain = m.throughput / max(best.throughput, 1e-9) - 1
        good = load
        if m.throughput >= best.throughput:
            best = m
        if gain < SATURATION_GAIN:
            break  # saturated: more load only queues

    steps = 0
    while (
        bad is not None
        and steps < max_bisections
        and bad - good > max(1.0 if integer else 0.0, good * precision)
    ):
        steps += 1
        load = math.sqrt(good * bad)
        if integer:
            load = float(min(bad - 1, max(good + 1, round(load))))
        m = at(load)
        if meets_slo(m, slo_p99_s):
            good = load
            if m.throughput >= best.throughput:
                best = m
        else:
            bad = load
    return _point(slo_p99_s, load_mode, best, feasible=True, measured=measured)


def _point(
    slo: float,
    load_mode: LoadMode,
    best: Measurement,
    *,
    feasible: bool,
    measured: dict[float, Measurement],
) -> OperatingPoint:
    levels = [
        LevelResult(
            load=load,
            throughput=m.throughput,
            p50_s=m.latency.p50,
            p95_s=m.latency.p95,
            p99_s=m.latency.p99,
            errors=m.error_count,
            stable=m.stable,
            meets_slo=meets_slo(m, slo),
            mean_s=m.latency.mean if m.latency.count else None,
            requests=m.latency.count + m.error_count,
            disturbance=m.interference.describe() if m.interference else None,
            gpu=m.gpu,
        )
        for load, m in sorted(measured.items())
    ]
    return OperatingPoint(
        slo_p99_s=slo,
        load_mode=load_mode,
        feasible=feasible,
        load=best.load.value if feasible else 0.0,
        throughput=best.throughput if feasible else 0.0,
        p50_s=best.latency.p50,
        p99_s=best.latency.p99,
        p99_deviation=best.p99_deviation,
        throughput_deviation=best.throughput_deviation,
        avg_batch_size=best.server.avg_batch_size if best.server else None,
        levels=levels,
        mean_s=best.latency.mean if best.latency.count else None,
    )
