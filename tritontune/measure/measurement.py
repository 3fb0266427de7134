"""Measuring one load level: warm up, then windows until stable, with a time cap.

The load runs without a break from warm-up to the last window; windows are slices of it, so no
request is lost at a window edge. After each window the rule in :func:`stats.is_stable` is checked;
the result merges the last stable windows (more samples, so a truer p99) and carries their spread.
Each window also records what else the machine did (:mod:`interference`): a disturbed window does
not count towards stability, and up to ``extra_windows`` more are taken in its place.
Triton's own statistics are read at every window edge, so the server-side split (queue vs compute,
executed batch size) covers exactly the same span as the client's numbers.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tritontune.measure.client_cost import ClientCost
from tritontune.measure.gpu_metrics import GpuFigures, gpu_to_list, summarize
from tritontune.measure.interference import Interference, WindowLoad
from tritontune.measure.load_processes import measure_with_processes
from tritontune.measure.loadgen import (
    LoadEngine,
    LoadMode,
    LoadSpec,
    Stream,
)
from tritontune.measure.stats import LatencyStats, WindowSummary, is_stable, relative_deviation
from tritontune.measure.windows import Edge, Windows, measure_windows
from tritontune.server.client import BatchCompute, ModelStatsSnapshot
from tritontune.server.endpoint import Endpoint

#: A load level whose share of failed requests is above this did not serve its load: the search
#: does not count it as meeting the SLO, and ``check`` fails a model over it. Defined once here.
MAX_ERROR_RATE = 0.01
#: An open-loop level whose server completed less than this share of the offered rate fell behind
#: its schedule: over capacity, however fast the replies it did send were.
MIN_RATE_ACHIEVED = 0.90
#: Two screening figures (a trial's: one short measurement per load level) this close, as a
#: fraction of the higher one, may be in either order: this host's noise (±15 % between runs of
#: one config, 2x on a busy minute; on MiniLM one trial served 17 at 1 request in flight and 38
#: at 2, no window flagged disturbed). What is decided from single figures this close is
#: measured again (the first trials, the playoff's contenders).
SCREENING_NOISE = 0.25
#: Past a window's length, how often the controller looks whether enough replies are in.
WINDOW_POLL_S = 0.02


@dataclass(frozen=True)
class MeasureSettings:
    """How long and how carefully to measure one load level."""

    warmup_s: float = 1.0
    window_s: float = 1.0
    min_window_requests: int = 100
    """A window also waits for this many replies (up to 4x ``window_s``), so its p99 means something."""
    stable_windows: int = 3
    tolerance: float = 0.10
    max_windows: int = 8
    extra_windows: int = 4
    """Windows allowed beyond ``max_windows`` in place of disturbed ones (0: never re-measure)."""
    detect_interference: bool = True
    max_requests: int = 2_000_000
    request_timeout_s: float = 30.0
    max_in_flight: int = 2048

    def time_cap(self) -> float:
        """The longest a level can take: warm-up plus every window at its longest."""
        return self.warmup_s + (self.max_windows + self.extra_windows) * self.window_s * 4

    def measured(self, windows: int, settled: bool, loads: Sequence[WindowLoad]) -> bool:
        """The stable-windows rule of one class of traffic, whatever generates the load (the
        asyncio engine, its load processes, perf_analyzer): after ``windows`` windows, the last
        :attr:`stable_windows` ``settled`` and none of them disturbed, or :attr:`max_windows`
        taken (one more for each disturbed window, up to :attr:`extra_windows`)."""
        disturbed = sum(load.disturbed for load in loads)
        clean = not any(load.disturbed for load in loads[-self.stable_windows :])
        return (clean and settled) or windows >= self.max_windows + min(disturbed, self.extra_windows)


@dataclass(frozen=True)
class ServerSplit:
    """Where the server spent a request's time, from Triton's statistics for the same span."""

    requests: int
    executions: int
    avg_batch_size: float
    avg_queue_s: float
    avg_compute_s: float
    cache_hits: int
    batches: tuple[BatchCompute, ...] = ()
    """Executions and compute time by batch size: the model's service time per batch, which
    the scheduler cannot change (``tritontune.predict`` calibrates from it)."""

    @classmethod
    def between(
        cls,
        first: Mapping[str, ModelStatsSnapshot | None],
        last: Mapping[str, ModelStatsSnapshot | None],
    ) -> dict[str, ServerSplit]:
        """Each model's split over the span between two window edges' statistics (by model;
        one whose statistics could not be read at either edge is left out)."""
        return {
            model: cls.from_delta(after - before)
            for model, before in first.items()
            if before is not None and (after := last.get(model)) is not None
        }

    @classmethod
    def from_delta(cls, delta: ModelStatsSnapshot) -> ServerSplit:
        requests = max(delta.success_count, 0)
        compute = delta.compute_input_ns + delta.compute_infer_ns + delta.compute_output_ns
        return cls(
            requests=requests,
            executions=delta.execution_count,
            avg_batch_size=delta.inference_count / delta.execution_count
            if delta.execution_count
            else 0.0,
            avg_queue_s=delta.queue_ns / requests / 1e9 if requests else 0.0,
            avg_compute_s=compute / requests / 1e9 if requests else 0.0,
            cache_hits=delta.cache_hit_count,
            batches=delta.batches,
        )


@dataclass(frozen=True)
class Measurement:
    """The result of one load level."""

    load: LoadSpec
    batch_size: int
    throughput: float
    """Successful inferences per second (requests x client batch size)."""
    request_rate: float
    """Successful requests per second."""
    latency: LatencyStats
    errors: dict[str, int]
    stable: bool
    windows: tuple[WindowSummary, ...]
    throughput_deviation: float
    p99_deviation: float
    duration_s: float
    server: ServerSplit | None
    send_lag_p99_s: float | None = None
    """Open loop only: how late the client sent (p99); large values mean the client saturated."""
    error_examples: dict[str, str] = field(default_factory=dict)
    """The first server message of each error kind."""
    interference: Interference | None = None
    """What else the machine did meanwhile (None when not looked at)."""
    gpu: tuple[GpuFigures, ...] | None = None
    """Per-GPU figures over the reported windows (:mod:`gpu_metrics`); None: the server has no
    GPUs (its metrics were not read)."""
    engine: LoadEngine = LoadEngine.ASYNCIO
    """What generated the load (:class:`LoadEngine`)."""
    client: ClientCost | None = None
    """What the load generator cost over the reported windows, and whether it limited them."""
    steps: Mapping[str, ServerSplit] = field(default_factory=dict)
    """A pipeline's composing models (``step_models`` of :func:`measure_load`), each one's
    statistics over the same windows as :attr:`server`: where an end-to-end request's time went."""

    @property
    def outside_s(self) -> float | None:
        """A request's mean time outside Triton (the client, gRPC, the frontend): its mean
        latency less Triton's mean queue and compute time; None without Triton's figures."""
        if self.server is None:
            return None
        return self.latency.mean - self.server.avg_queue_s - self.server.avg_compute_s

    @property
    def client_bound(self) -> bool:
        """The load generator, not the server, limited this level (:mod:`client_cost`)."""
        return self.client is not None and self.client.bound

    def remarks(self) -> str | None:
        """What the user should know about how this figure was taken: the machine disturbed, the
        client limiting it (None: nothing to say)."""
        return remarks(self.interference, self.client)

    @property
    def error_count(self) -> int:
        return sum(self.errors.values())

    def to_dict(self) -> dict:
        return {
            "load": self.load.to_dict(),
            "batch_size": self.batch_size,
            "throughput_infer_per_s": round(self.throughput, 3),
            "request_rate_per_s": round(self.request_rate, 3),
            "latency_ms": self.latency.to_dict(),
            "errors": dict(self.errors),
            "stable": self.stable,
            "windows": [
                {
                    "duration_s": round(w.duration, 4),
                    "completed": w.completed,
                    "throughput": round(w.throughput, 3),
                    "mean_ms": round(w.mean_latency * 1e3, 4),
                    "p99_ms": round(w.p99 * 1e3, 4),
                }
                for w in self.windows
            ],
            "throughput_deviation": round(self.throughput_deviation, 4),
            "p99_deviation": round(self.p99_deviation, 4),
            "duration_s": round(self.duration_s, 3),
            "error_examples": dict(self.error_examples),
            "server": asdict(self.server) if self.server else None,
            "send_lag_p99_ms": None
            if self.send_lag_p99_s is None
            else round(self.send_lag_p99_s * 1e3, 4),
            "interference": self.interference.to_dict() if self.interference else None,
            "gpu": gpu_to_list(self.gpu),
            "engine": self.engine.value,
            "client": self.client.to_dict() if self.client else None,
        } | ({"steps": {m: asdict(split) for m, split in self.steps.items()}} if self.steps else {})


def measure_load(
    endpoint: Endpoint | str,
    model: str,
    requests: list[Any],
    load: LoadSpec,
    *,
    batch_size: int = 1,
    settings: MeasureSettings | None = None,
    seed: int | None = None,
    metrics_url: str | None = None,
    processes: int = 1,
    max_processes: int | None = None,
    step_models: tuple[str, ...] = (),
) -> Measurement:
    """Measure ``model`` at one load level (blocking; runs its own event loop).

    ``requests`` are prepared for ``endpoint``'s protocol; a plain ``host:port`` is gRPC. With
    ``metrics_url`` (a server with GPUs), Triton's GPU gauges are scraped at every window edge and
    summarized over the reported windows. The load comes from ``processes`` processes
    (:mod:`load_processes`); with ``max_processes`` (``--load-processes auto``, see
    :func:`load_processes.auto_processes_limit`), a level found client-bound is measured again
    with twice as many, up to ``max_processes``, and the last measurement is kept (its
    ``client.processes`` says how many measured it). ``step_models`` (``model`` is an ensemble):
    its composing models, whose statistics are read at the same window edges
    (:attr:`Measurement.steps`)."""
    chosen = settings or MeasureSettings()

    def once(count: int) -> Measurement:
        with no_gc_pauses():
            return asyncio.run(
                _measure(
                    endpoint,
                    model,
                    requests,
                    load,
                    batch_size,
                    chosen,
                    seed,
                    metrics_url,
                    count,
                    step_models=step_models,
                )
            )

    return measure_with_processes(once, processes, max_processes)


@contextlib.contextmanager
def no_gc_pauses() -> Iterator[None]:
    """Keep Python's cyclic GC out of the measured latencies.

    A full collection walks every object of the process; inside a big process (a search holds
    Optuna, SQLAlchemy, ...) it pauses the event loop for tens of milliseconds and every request
    in flight looks that much slower. So the heap is frozen and collection paused for the
    measurement (bounded by its time cap). No collection is forced before or after: each one
    walks the whole heap (tens of milliseconds inside a search, more inside a test run, for
    every load level), and the garbage left over is collected by the next automatic one.
    """
    enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if enabled:
            gc.enable()


class StableWindows:
    """The window policy of one class of traffic (:mod:`windows`): a window lasts ``window_s``
    and until it has ``min_window_requests`` replies (up to 4x ``window_s``); the level is
    measured when :meth:`MeasureSettings.measured` says so, when every request of a window
    failed (the server is gone or broken), or at the time cap or ``max_requests``."""

    def __init__(self, settings: MeasureSettings, batch_size: int, started: float) -> None:
        self.settings = settings
        self.batch_size = batch_size
        self.deadline = started + settings.time_cap()
        self.summaries: list[WindowSummary] = []

    async def first_edge(self, streams: Sequence[Stream]) -> None:
        return None

    async def window_end(self, windows: Windows, streams: Sequence[Stream]) -> None:
        (stream,) = streams
        first, settings = windows.edges[-1], self.settings
        while True:
            # Sleep to the window's end in one timer (a loop woken every few ms takes CPU from
            # the server mid-inference), then poll while waiting for enough replies.
            end = min(first.at + settings.window_s, self.deadline)
            await asyncio.sleep(max(WINDOW_POLL_S, end - time.perf_counter()))
            now = time.perf_counter()
            elapsed = now - first.at
            replies = len(stream.log) - first.counts[stream.name]
            enough = replies >= settings.min_window_requests or elapsed >= 4 * settings.window_s
            if (elapsed >= settings.window_s and enough) or now >= self.deadline:
                return
            if len(stream.log) >= settings.max_requests:
                return

    def measured(self, windows: Windows, streams: Sequence[Stream]) -> bool:
        (stream,) = streams
        log, settings = stream.log, self.settings
        first, last = windows.edges[-2:]
        self.summaries.append(_window(stream, first, last, self.batch_size))
        if self.summaries[-1].completed == 0 and len(log) > first.counts[stream.name]:
            return True  # every request of a whole window failed: the server is gone or broken
        settled = is_stable(self.summaries, count=settings.stable_windows, tolerance=settings.tolerance)
        return (
            settings.measured(len(self.summaries), settled, windows.loads)
            or time.perf_counter() >= self.deadline
            or len(log) >= settings.max_requests
        )


async def _measure(
    endpoint: Endpoint | str,
    model: str,
    requests: list[Any],
    load: LoadSpec,
    batch_size: int,
    settings: MeasureSettings,
    seed: int | None,
    metrics_url: str | None = None,
    processes: int = 1,
    step_models: tuple[str, ...] = (),
) -> Measurement:
    started = time.perf_counter()
    stream = Stream(model, requests, load)
    policy = StableWindows(settings, batch_size, started)
    models = (model, *step_models)
    seen = await measure_windows(
        endpoint,
        [stream],
        settings,
        policy,
        models=models,
        seed=seed,
        processes=processes,
        metrics_url=metrics_url,
    )
    windows = policy.summaries
    stable = is_stable(windows, count=settings.stable_windows, tolerance=settings.tolerance)
    chosen = settings.stable_windows if stable else len(windows)
    first, last = seen.edges[-chosen - 1], seen.edges[-1]
    result = _summarize(
        stream, first, last, windows[-chosen:], load, batch_size, stable, started, model, step_models
    )
    if seen.loads:
        interference = Interference.of(seen.loads, seen.loads[-chosen:])
        result = dataclasses.replace(result, interference=interference)
    if seen.client:
        cost = ClientCost.of(seen.client[-chosen:], processes=seen.processes)
        result = dataclasses.replace(result, client=cost)
    if metrics_url is not None:
        # The scrapes from the reported windows' first edge on (each follows its edge closely).
        chosen_scrapes = [readings for at, readings in seen.gpu_scrapes if at >= first.at]
        result = dataclasses.replace(result, gpu=summarize(chosen_scrapes) or None)
    return result


def _span(stream: Stream, first: Edge, last: Edge) -> tuple[list[float], list[str | None]]:
    """Latencies of the successful requests between two edges, and every request's error."""
    lo, hi = first.counts[stream.name], last.counts[stream.name]
    errors, latencies = stream.log.error[lo:hi], stream.log.latency[lo:hi]
    return [lat for lat, err in zip(latencies, errors, strict=True) if err is None], errors


def _window(stream: Stream, first: Edge, last: Edge, batch_size: int) -> WindowSummary:
    duration = max(last.at - first.at, 1e-9)
    ok, _ = _span(stream, first, last)
    stats = LatencyStats.from_samples(ok)
    return WindowSummary(
        duration=duration,
        completed=len(ok),
        throughput=len(ok) * batch_size / duration,
        mean_latency=stats.mean,
        p99=stats.p99,
    )


def _summarize(
    stream: Stream,
    first: Edge,
    last: Edge,
    windows: list[WindowSummary],
    load: LoadSpec,
    batch_size: int,
    stable: bool,
    started: float,
    model: str,
    step_models: tuple[str, ...],
) -> Measurement:
    """The level's figures over the reported windows, from ``first`` to ``last``: ``model``'s
    split from Triton's statistics, and each of ``step_models``' (a pipeline's composing models;
    a BLS model is one of its own)."""
    duration = max(last.at - first.at, 1e-9)
    log = stream.log
    ok, span_errors = _span(stream, first, last)
    errors = Counter(err for err in span_errors if err is not None)
    splits = ServerSplit.between(first.stats, last.stats)
    server = splits.get(model)
    steps = {step: splits[step] for step in step_models if step in splits}
    lag = None
    if load.mode == LoadMode.RATE and log.send_lag:
        lag = float(np.percentile(log.send_lag, 99, method="higher"))
    return Measurement(
        load=load,
        batch_size=batch_size,
        throughput=len(ok) * batch_size / duration,
        request_rate=len(ok) / duration,
        latency=LatencyStats.from_samples(ok),
        errors=dict(errors),
        stable=stable,
        windows=tuple(windows),
        throughput_deviation=relative_deviation([w.throughput for w in windows]),
        p99_deviation=relative_deviation([w.p99 for w in windows]),
        duration_s=time.perf_counter() - started,
        server=server,
        send_lag_p99_s=lag,
        error_examples={kind: log.error_examples.get(kind, "") for kind in errors},
        steps=steps,
    )


def remarks(interference: Interference | None, client: ClientCost | None) -> str | None:
    """One line of what a level's checks said (the machine disturbed, the client limiting it),
    or None: a single class's level and a workload's say it alike."""
    said = [
        interference.describe() if interference else None,
        client.describe() if client else None,
    ]
    return "; ".join(text for text in said if text) or None


def meets_slo(m: Measurement, slo_p99_s: float) -> bool:
    """A load level *meets the SLO* when its p99 is at or under it, no more than
    :data:`MAX_ERROR_RATE` of its requests failed, and (open loop) the server completed at least
    :data:`MIN_RATE_ACHIEVED` of the offered rate."""
    total = m.latency.count + m.error_count
    if total == 0 or m.latency.count == 0:
        return False
    if m.error_count / total > MAX_ERROR_RATE:
        return False
    if m.load.mode == LoadMode.RATE and m.request_rate < MIN_RATE_ACHIEVED * m.load.value:
        return False
    return m.latency.p99 <= slo_p99_s
