"""A config's operating point: the highest load whose p99 meets the SLO, and its throughput.

Found with few measurements (background.md, "The method"): start at the lowest load (or where
a prediction puts the answer), ramp up
geometrically (8x while p99 is under an eighth of the SLO, 4x while under half, else 2x), stop as
soon as p99 crosses the SLO or throughput stops growing (past saturation more load only adds
queueing), then bisect (twice at most) between the last load that met the SLO and the first that
didn't. A first level that misses the SLO is stepped down from (halved) to a floor, then the gap
bisected the same way: moot at concurrency 1, the floor itself; open loop, whose first rate is
half of what one request at a time achieves, the floor is 1/64 of it
(:func:`tritontune.search.ramp.ramp_and_bisect`). A config that misses even there is infeasible,
by how far the lowest level measured was over the SLO.

A load level *meets the SLO* when its p99 is at or under it, fewer than 1 % of its requests failed,
and (open loop) the server completed at least 90 % of the offered rate; a server that falls behind
an open-loop schedule is over capacity even if the replies it did send were fast.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, meets_slo
from tritontune.search.ramp import RampRules, ramp_and_bisect
from tritontune.study.figures import LevelResult, OperatingPoint, StepFigure

#: The ramp stops once a level's throughput grew less than this over the best before it.
SATURATION_GAIN = 0.03


def find_operating_point(
    measure: Callable[[LoadSpec], Measurement],
    slo_p99_s: float,
    *,
    load_mode: LoadMode = LoadMode.CONCURRENCY,
    start: float = 1,
    max_load: float = 512,
    min_load: float | None = None,
    precision: float = 0.25,
    max_bisections: int = 2,
) -> OperatingPoint:
    """Ramp, then bisect (:func:`tritontune.search.ramp.ramp_and_bisect`), calling ``measure``
    once per load level.

    ``start`` is the first load (concurrency 1, or a request rate); when it misses the SLO the
    walk steps down to ``min_load`` at most (None: concurrency 1, or 1/64 of the rate).
    ``precision`` ends the bisection once the gap between passing and failing loads is that
    fraction of the passing one, ``max_bisections`` bounds its steps (each one is a measurement;
    the throughput curve is flat near the cliff, so finer steps buy little).
    """
    integer = load_mode == LoadMode.CONCURRENCY

    def step(best: Measurement) -> float:
        headroom = slo_p99_s / max(best.latency.p99, 1e-9)
        return 8.0 if headroom > 8 else 4.0 if headroom > 2 else 2.0

    rules: RampRules[Measurement] = RampRules(
        passes=lambda m: meets_slo(m, slo_p99_s),
        step=step,
        better=lambda m, best: m.throughput >= best.throughput,
        saturated=lambda m, best: m.throughput / max(best.throughput, 1e-9) - 1 < SATURATION_GAIN,
        integer=integer,
        precision=precision,
        max_bisections=max_bisections,
        limited=lambda m: m.client_bound,
    )

    def spec(load: float) -> LoadSpec:
        return LoadSpec.concurrency(int(load)) if integer else LoadSpec.rate(load)

    ramp = ramp_and_bisect(
        lambda load: measure(spec(load)), rules, start=start, max_load=max_load, min_load=min_load
    )
    feasible = ramp.best is not None
    # infeasible: the lowest level measured says how far the config is from the SLO
    point = _point(
        slo_p99_s, load_mode, ramp.best or ramp.lowest, feasible=feasible, measured=ramp.levels()
    )
    return replace(point, client_bound=ramp.limited_at is not None)


def _point(
    slo: float,
    load_mode: LoadMode,
    best: Measurement,
    *,
    feasible: bool,
    measured: list[tuple[float, Measurement]],
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
            disturbance=m.remarks(),
            disturbed=bool(m.interference and m.interference.result_disturbed),
            gpu=m.gpu,
            client_bound=m.client_bound,
            engine=m.engine.value,
            load_processes=m.client.processes if m.client is not None else 1,
        )
        for load, m in measured
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
        steps=tuple(StepFigure.of(model, split) for model, split in best.steps.items()),
        compute_ratio=_compute_ratio(best),
    )


#: The least time outside Triton a request is taken to spend (a mean latency that Triton's
#: figures leave no time for is a clock's noise, not a free request path).
_LEAST_OUTSIDE_S = 1e-5


def _compute_ratio(best: Measurement) -> float | None:
    """:attr:`OperatingPoint.compute_ratio` of ``best`` (None without Triton's figures)."""
    outside = best.outside_s
    if outside is None or best.server is None or not best.server.requests or not best.latency.count:
        return None
    return best.server.avg_compute_s / max(outside, _LEAST_OUTSIDE_S)
