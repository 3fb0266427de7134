"""Calibration through the real server: each execution setting's service time per batch size.

For one execution setting (:mod:`tritontune.predict.calibration`) the model is loaded with a
batcher that takes whatever is queued (no delay, the space's largest batch size) and measured at
closed-loop concurrencies 1, then ``k, 4k, 16k, ...`` for ``k`` instances: every instance stays
busy and the batches span the sizes the space can use. Under an SLO the levels stop rising once
the largest batches took the SLO to compute, and a level is aimed at the batch that does. Triton's
``batch_stats`` give executions and compute time by batch size, pooled over the levels; the
concurrency-1 level gives the time outside the server, and the busy levels the spread
(:func:`~tritontune.predict.calibration.fit_cv`). The study keeps each setting as it is done, so an
interrupted calibration resumes where it stopped and other workers reuse it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from tritontune.errors import ServerError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.predict.calibration import (
    MIN_EXECUTIONS,
    LoadLevel,
    SettingCalibration,
    fit_cv,
    fit_points,
)
from tritontune.search.space import SearchSpace
from tritontune.serving.bench import Bench

#: Short levels: only Triton's per-batch compute time is read from most of them, which needs
#: executions, not a stable p99.
CALIBRATION_MEASURE = MeasureSettings(
    warmup_s=0.2, window_s=0.4, min_window_requests=30, stable_windows=2, max_windows=2, extra_windows=1
)
#: The highest concurrency a calibration level uses.
MAX_CALIBRATION_CONCURRENCY = 512
#: Concurrency grows by this factor from one calibration level to the next.
LEVEL_STEP = 4
#: Concurrency 1 is measured up to this many times, until its batches of one ran
#: :data:`~tritontune.predict.calibration.MIN_EXECUTIONS` times (VGG16 in INT8 on 2 cores took
#: 1.2 s a request: a level's 0.4-1.6 s windows held one or two).
MAX_SINGLE_LEVELS = 3
#: The fastest level was limited by the request path (client, gRPC, Triton's frontend), not the
#: instances, when they were busy less than this share of its time.
PATH_BOUND_BUSY = 0.85


def calibration_point(setting: Mapping[str, Any], max_batch_size: int) -> dict[str, Any]:
    """The point of the space a setting is calibrated with: its execution knobs, and a batcher
    that runs whatever is queued (no delay, no preferred size) up to ``max_batch_size``."""
    point = dict(setting)
    if max_batch_size > 0:
        point.update(
            max_batch_size=max_batch_size,
            dynamic_batching=True,
            max_queue_delay=0,
            preferred_batch_size="none",
        )
    return point


def calibration_loads(instances: int, max_batch_size: int) -> list[int]:
    """Concurrency 1, then ``k, 4k, 16k, ...`` and finally ``2 x max_batch_size x k`` (every
    instance with a full batch and another waiting)."""
    loads = [1]
    top = min(2 * max(max_batch_size, 1) * instances, MAX_CALIBRATION_CONCURRENCY)
    load = instances
    while load < top:
        if load not in loads:
            loads.append(load)
        load *= LEVEL_STEP
    if top not in loads:
        loads.append(top)
    return loads


def calibrate_setting(
    bench: Bench,
    space: SearchSpace,
    setting: Mapping[str, Any],
    *,
    max_batch_size: int,
    slo_p99_s: float | None = None,
    settings: MeasureSettings = CALIBRATION_MEASURE,
    on_level: Callable[[int, Measurement], None] | None = None,
) -> SettingCalibration:
    """Measure ``setting`` (see the module docstring). The levels stop rising once a level's
    largest batch took ``slo_p99_s`` or more to compute: a config whose batches take that long
    can't meet the SLO, and the higher levels (the largest batches, the slowest windows: on
    MiniLM they were most of a calibration's time) would measure only such batches. A level whose
    requests wait twice the SLO or more, by Little's law (its concurrency over the rate it
    served), took it too (a request waits for the batch running, then runs in the next): on a
    model that runs a few batches a second, the windows may hold too few executions to tell, and
    their latencies are the first of a queue still forming (VGG16, two instances at concurrency
    16: a median of 1.3 s in the windows, 4.7 s by Little's law). A level is the last
    too when its windows held fewer than :data:`~tritontune.predict.calibration.MIN_EXECUTIONS`
    replies: its batches outlast a window
    (0.4-1.6 s), and the next level, four times the requests in flight, would leave a backlog
    past the request timeout that the server goes on computing under the next setting's levels
    (VGG16, two instances: an instance of that setting went on computing for 7 minutes, in 9 GB,
    while four other settings were calibrated). The levels also stop before one whose largest
    batches are already known to take it (:func:`_only_slow_batches`). A server fault
    propagates: the caller runs this under :func:`tritontune.serving.faults.with_restarts`."""
    started = time.monotonic()
    bench.load(space.to_variant(calibration_point(setting, max_batch_size)))
    instances = int(setting.get("instance_count", 1) or 1)
    samples: list[tuple[int, int, float]] = []
    overhead_s, levels = 0.0, 0
    latencies: list[LoadLevel] = []
    fastest, busy_at_fastest = 0.0, 1.0
    ladder = calibration_loads(instances, max_batch_size)
    load: int | None = ladder[0]
    aimed = False
    singles = 0
    while load is not None:
        measured = bench.measure(LoadSpec.concurrency(load), settings)
        levels += 1
        if on_level is not None:
            on_level(load, measured)
        server = measured.server
        # A level without the server's statistics taught nothing; the ladder goes on (measuring
        # the same load again could repeat forever).
        batches = server.batches if server is not None else ()
        level = [(b.batch_size, b.executions, b.compute_ns / 1e9) for b in batches]
        samples += level
        if measured.latency.count:
            latencies.append(LoadLevel(load, measured.latency.p50, measured.latency.p99))
        if load == 1:
            overhead_s = max(0.0, measured.outside_s or 0.0)
            singles += sum(runs for size, runs, _total in level if size == 1)
            if singles < MIN_EXECUTIONS and levels < MAX_SINGLE_LEVELS:
                continue  # a slow model's short windows held one or two executions
        if server is not None and measured.request_rate > fastest and server.requests:
            fastest = measured.request_rate
            compute_s = sum(b.compute_ns for b in server.batches) / 1e9
            busy_at_fastest = compute_s * measured.request_rate / server.requests / instances
        if (
            slo_p99_s is not None
            and load > 1
            and (
                _took_the_slo(level, slo_p99_s)
                or load >= 2 * slo_p99_s * measured.request_rate
                or measured.latency.count < MIN_EXECUTIONS
            )
        ):
            break
        step = _next_load(ladder, load, samples, instances, None if aimed else slo_p99_s)
        if (
            step is not None
            and slo_p99_s is not None
            and _only_slow_batches(step, instances, samples, slo_p99_s)
        ):
            break
        aimed = aimed or (step is not None and step not in ladder)
        load = step
    points = fit_points(samples)
    if not points:
        raise ServerError(
            "the server reported no per-batch-size statistics (batch_stats), which calibration needs"
        )
    # The request path limited the fastest level when the instances were often idle in it.
    path_bound = fastest > 0 and busy_at_fastest < PATH_BOUND_BUSY
    path_s = 1 / fastest if path_bound else 0.0
    cv = fit_cv(
        points,
        latencies,
        instances=instances,
        max_batch_size=max_batch_size,
        overhead_s=overhead_s,
        path_s=path_s,
        slo_p99_s=slo_p99_s,
    )
    return SettingCalibration(
        setting=dict(setting),
        points=points,
        cv=cv,
        overhead_s=overhead_s,
        path_s=path_s,
        levels=levels,
        seconds=time.monotonic() - started,
        latencies=tuple(latencies),
    )


def _next_load(
    ladder: list[int],
    load: int,
    samples: list[tuple[int, int, float]],
    instances: int,
    slo_p99_s: float | None,
) -> int | None:
    """The ladder's next concurrency after ``load`` (None after its last), or, under an SLO, a
    lower one that forms the batches that take the SLO to compute, when the line through the two
    largest batch sizes measured so far puts them below the ladder's next step. On MiniLM in INT8
    (batches of 1-3 in 27-79 ms, SLO 100 ms), the step from 4 to 16 formed batches of 14 that
    took 367-467 ms each: 19-22 s of a setting's calibration, for a size no config under the SLO
    runs. The caller aims once (``slo_p99_s`` None after): a level aimed just past the last one
    formed batches no larger, and aiming again crept up one request a level."""
    higher = [step for step in ladder if step > load]
    if not higher:
        return None
    aimed = _load_at_slo(samples, instances, slo_p99_s) if slo_p99_s is not None else None
    return aimed if aimed is not None and load < aimed < higher[0] else higher[0]


def _load_at_slo(samples: list[tuple[int, int, float]], instances: int, slo_p99_s: float) -> int | None:
    """The concurrency that gives each instance a batch taking ``slo_p99_s`` to compute and as
    many requests waiting (a closed loop on one instance splits its requests between the batch
    running and the next one, so that the larger of the two is at least half), from the line
    through the two largest batch points of ``samples``; None while they can't tell (one batch
    size, or a line that does not rise)."""
    points = fit_points(samples)
    if len(points) < 2:
        return None
    small, large = points[-2], points[-1]
    slope = (large.mean_s - small.mean_s) / (large.batch_size - small.batch_size)
    if slope <= 0:
        return None
    batch = math.ceil(large.batch_size + (slo_p99_s - large.mean_s) / slope)
    return 2 * instances * max(batch, 1)


def _took_the_slo(level: list[tuple[int, int, float]], slo_p99_s: float) -> bool:
    """Whether a level's largest batches took ``slo_p99_s`` or more to compute: batches of any sizes
    that each took that long ran :data:`~tritontune.predict.calibration.MIN_EXECUTIONS` times
    together, one size or several. Large batches of a slow model run a few times a level: on MiniLM
    in INT8 (100 ms SLO) batches of 10-15 took 367-467 ms at concurrency 16, none of them 3 times,
    and the levels went on to 64 and 256 (18-22 s of a setting's calibration, for batches no config
    under the SLO runs). One execution alone is not enough: a busy moment can stretch it."""
    slow = sum(runs for _size, runs, total in level if runs > 0 and total / runs >= slo_p99_s)
    return slow >= MIN_EXECUTIONS


def _only_slow_batches(
    load: int, instances: int, samples: list[tuple[int, int, float]], slo_p99_s: float
) -> bool:
    """Whether the largest batches a level at ``load`` forms are already known to take
    ``slo_p99_s`` or more: they are at least ``load / (2 x instances)`` (a closed loop on an
    instance splits its requests between the batch running and the next one), and a batch no
    larger took the SLO on average over the levels so far (a larger batch never takes less).
    On a slow model a high level costs its in-flight requests' drain: VGG16 on 2 cores (batches of
    1 in 0.35 s, 1 s SLO) formed batches of 3 in 1.06 s at concurrency 4, twice, and then spent
    58 s at concurrencies 16, 64 and 256 on batches no config under the SLO runs. Two executions
    at least: one alone may be a busy moment."""
    pooled: dict[int, list[float]] = {}
    for size, executions, total_s in samples:
        if executions > 0:
            runs = pooled.setdefault(size, [0, 0.0])
            runs[0] += executions
            runs[1] += total_s
    slow = {size: runs for size, (runs, total) in pooled.items() if total / runs >= slo_p99_s}
    if sum(slow.values()) < 2:
        return False
    return load / (2 * instances) >= min(slow)
