"""Measuring a mixed workload: every class of traffic at once, each measured on its own.

Each class is an open-loop stream of its own requests (:mod:`tritontune.measure.traffic`) at its
part of the total rate, to one shared model or each to its own endpoint. After a warm-up, a span
of at least ``stable_windows`` windows is measured, starting once every class has had its first
reply; each class's figures cover exactly that span (latency from the *scheduled* send time;
rejections and queue timeouts counted apart). The span is extended until every class has
``min_window_requests`` answers in it, up to its clean time, or to the level's cap where a class
passes by a hair (:data:`CLOSE_CALL`, :data:`KEEP_UP_FRACTION`), unless a class has *surely*
missed already (:data:`SURELY_MISSED_CHANCE`; :attr:`TrafficMeasurement.ended_early`). A disturbed
window starts the span again after it, and a level the client limited is flagged client-bound by
the single class's rule. See ``docs/concepts/workloads.md``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tritontune.measure.client_cost import ClientCost
from tritontune.measure.interference import Interference
from tritontune.measure.load_processes import measure_with_processes
from tritontune.measure.loadgen import (
    QUEUE_FULL_ERROR,
    QUEUE_TIMEOUT_ERROR,
    SCHEDULER_ERRORS,
    RequestLog,
    Stream,
)
from tritontune.measure.measurement import (
    MAX_ERROR_RATE,
    MeasureSettings,
    ServerSplit,
    no_gc_pauses,
    remarks,
)
from tritontune.measure.stats import LatencyStats, spread, surely_over
from tritontune.measure.traffic import Traffic, TrafficClass
from tritontune.measure.windows import Edge, Windows, measure_windows
from tritontune.server.endpoint import Endpoint

#: A class keeps up when at least this part of its arrivals in the span were answered (served, or
#: shed where it may be): below it, a backlog is growing in the server's queue.
KEEP_UP_FRACTION = 0.9
#: A level ends early when a class has surely missed: its replies past the p99 bound (or its
#: failures) would be this unlikely were only 1 % of them past it (:func:`stats.surely_over`).
SURELY_MISSED_CHANCE = 0.01
#: ... and at least this many of them: one stray slow reply never ends a level.
SURELY_MISSED_MIN = 3
#: The share of a class's replies its p99 bound allows past it.
P99_SHARE = 0.01
#: A level whose span reached its clean time (``max_windows`` windows at their longest) before its
#: replies were enough ends there, unless a class passes by a hair: a p99 past this share of its
#: bound, or arrivals answered within :data:`CLOSE_KEEP_UP` over :data:`KEEP_UP_FRACTION`. Those
#: take the rest of the time cap, for more replies where the verdict hangs on them.
CLOSE_CALL = 0.8
CLOSE_KEEP_UP = 0.05


@dataclass(frozen=True)
class ClassRequests:
    """What one class sends: prepared requests for ``model`` (the shared model, or the class's
    own endpoint)."""

    model: str
    requests: list[Any]


@dataclass(frozen=True)
class ClassFigures:
    """One class's figures over the measured span."""

    name: str
    batch_size: int
    offered_rate: float
    """Arrivals scheduled per second in the span."""
    request_rate: float
    """Successful requests per second."""
    answered_rate: float
    """Requests answered per second, successes and failures alike."""
    latency: LatencyStats
    """Successful requests, from the scheduled send time."""
    errors: dict[str, int]
    p99_windows: tuple[float, ...]
    """The p99 of each window: the spread of the class's tail."""
    send_lag_p99_s: float | None = None
    error_examples: dict[str, str] = field(default_factory=dict)
    sent_served: float | None = None
    """Of the arrivals scheduled in the span, the share served successfully, whenever their reply
    came (None: not counted; :attr:`served_share` then estimates it)."""

    @property
    def throughput(self) -> float:
        """Successful inferences per second."""
        return self.request_rate * self.batch_size

    @property
    def served_share(self) -> float:
        """The share of the class's arrivals that were served (0..1).

        Counted over the requests *sent* in the span (:attr:`sent_served`). The ratio of the
        rates, :attr:`request_rate` / :attr:`offered_rate`, is not that: it counts the replies
        that landed in the span, some to requests sent before it, and a slow class (a batch of 8
        on a busy server) so showed "served 104 %". Where only the rates are known (figures made
        elsewhere) it is that ratio, capped at 1 for the same reason."""
        if self.sent_served is not None:
            return self.sent_served
        if self.offered_rate <= 0:
            return 1.0
        return min(1.0, self.request_rate / self.offered_rate)

    @property
    def rejected(self) -> int:
        """Refused at once by admission control (the level's queue was full)."""
        return self.errors.get(QUEUE_FULL_ERROR, 0)

    @property
    def timed_out(self) -> int:
        """Dropped after waiting the queue timeout (or past the client's deadline)."""
        return self.errors.get(QUEUE_TIMEOUT_ERROR, 0) + self.errors.get("DEADLINE_EXCEEDED", 0)

    def failures(self, may_shed: bool) -> int:
        """Failed requests that count against the class (the scheduler's rejections and queue
        timeouts don't when the class may be shed: those requests are retried later)."""
        return sum(n for kind, n in self.errors.items() if not (may_shed and kind in SCHEDULER_ERRORS))

    def answered(self) -> int:
        return self.latency.count + sum(self.errors.values())

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "batch_size": self.batch_size,
            "offered_rate_per_s": round(self.offered_rate, 3),
            "request_rate_per_s": round(self.request_rate, 3),
            "throughput_infer_per_s": round(self.throughput, 3),
            "served_share": round(self.served_share, 4),
            "latency_ms": self.latency.to_dict(),
            "p99_windows_ms": [round(p * 1e3, 4) for p in self.p99_windows],
            "rejected": self.rejected,
            "timed_out": self.timed_out,
            "errors": dict(self.errors),
            "error_examples": dict(self.error_examples),
            "send_lag_p99_ms": None
            if self.send_lag_p99_s is None
            else round(self.send_lag_p99_s * 1e3, 4),
        }


@dataclass(frozen=True)
class ClassVerdict:
    """Whether a class met its objective, and if not, why (one line)."""

    name: str
    met: bool
    reason: str


def judge(traffic_class: TrafficClass, figures: ClassFigures) -> ClassVerdict:
    """Did ``figures`` meet ``traffic_class``'s objective? (See :mod:`traffic`.)"""
    name = traffic_class.name
    answered = figures.answered()
    if answered == 0:
        return ClassVerdict(name, False, "no request was answered in the span")
    failed = figures.failures(traffic_class.may_shed)
    if failed / answered > MAX_ERROR_RATE:
        kinds = ", ".join(f"{k} x{n}" for k, n in sorted(figures.errors.items()))
        return ClassVerdict(name, False, f"{failed} of {answered} requests failed ({kinds})")
    if figures.latency.count == 0:
        return ClassVerdict(name, False, "every request was shed")
    bound = traffic_class.latency_bound_s
    p99 = figures.latency.p99
    if bound is not None and p99 > bound:
        return ClassVerdict(name, False, f"p99 {p99 * 1e3:.1f} ms > {bound * 1e3:g} ms")
    if figures.offered_rate > 0:  # a class left unanswered is not served, whatever its p99
        kept_up = figures.answered_rate / figures.offered_rate
        if kept_up < KEEP_UP_FRACTION:
            return ClassVerdict(
                name, False, f"answered {kept_up:.0%} of its arrivals: a backlog is growing"
            )
    if traffic_class.min_served is not None:
        short = traffic_class.min_served.shortfall(figures.served_share, figures.throughput)
        if short:
            return ClassVerdict(name, False, short)
    shown = f"p99 {p99 * 1e3:.1f} ms"
    if figures.rejected or figures.timed_out:
        shown += f", {figures.rejected} rejected, {figures.timed_out} timed out (may be shed)"
    return ClassVerdict(name, True, shown)


@dataclass(frozen=True)
class TrafficMeasurement:
    """Every class of a workload at one total rate, measured over the same span."""

    total_rate: float
    """The total request rate offered (req/s), split over the classes by their shares."""
    classes: tuple[ClassFigures, ...]
    span_s: float
    duration_s: float
    server: dict[str, ServerSplit] = field(default_factory=dict)
    """Triton's split for the span, per model (one for a shared endpoint)."""
    interference: Interference | None = None
    client: ClientCost | None = None
    """What the load generator cost over the span, and whether it limited it."""
    ended_early: str | None = None
    """Why the span ended before every class had its replies: a class had surely missed its
    objective (None: it ran its course)."""

    @property
    def client_bound(self) -> bool:
        """The load generator, not the server, limited this level (:mod:`client_cost`)."""
        return self.client is not None and self.client.bound

    def remarks(self) -> str | None:
        """What the user should know about how this level was taken: the machine disturbed, the
        client limiting it (None: nothing to say), as :meth:`Measurement.remarks` says it."""
        return remarks(self.interference, self.client)

    def figures(self, name: str) -> ClassFigures:
        for figures in self.classes:
            if figures.name == name:
                return figures
        raise KeyError(name)

    def verdicts(self, traffic: Traffic) -> list[ClassVerdict]:
        return [judge(c, self.figures(c.name)) for c in traffic.classes]

    def meets(self, traffic: Traffic) -> bool:
        """Every class met its objective."""
        return all(v.met for v in self.verdicts(traffic))

    @property
    def goodput(self) -> float:
        """Successful requests per second, all classes together."""
        return sum(f.request_rate for f in self.classes)

    @property
    def throughput(self) -> float:
        """Successful inferences per second, all classes together."""
        return sum(f.throughput for f in self.classes)

    def to_dict(self, traffic: Traffic | None = None) -> dict:
        out: dict[str, Any] = {
            "total_rate_per_s": round(self.total_rate, 3),
            "goodput_per_s": round(self.goodput, 3),
            "throughput_infer_per_s": round(self.throughput, 3),
            "span_s": round(self.span_s, 3),
            "duration_s": round(self.duration_s, 3),
            "classes": [f.to_dict() for f in self.classes],
            "server": {model: asdict(split) for model, split in self.server.items()},
            "interference": self.interference.to_dict() if self.interference else None,
            "client": self.client.to_dict() if self.client else None,
            "disturbance": self.remarks(),
        }
        if self.ended_early is not None:
            out["ended_early"] = self.ended_early
        if self.client_bound:  # as a single-class level says it (only when true)
            out = {"client_bound": True} | out
        if traffic is not None:
            rates = traffic.rates(self.total_rate)
            for entry in out["classes"]:
                trace = traffic.get(entry["name"]).trace
                if trace is not None:  # how many times faster than recorded it played
                    entry["trace_speedup"] = round(trace.speedup(rates[entry["name"]]), 3)
            out["meets_objectives"] = self.meets(traffic)
            out["verdicts"] = {
                v.name: {"met": v.met, "reason": v.reason} for v in self.verdicts(traffic)
            }
        return out


def measure_traffic(
    endpoint: Endpoint | str,
    traffic: Traffic,
    requests: Mapping[str, ClassRequests],
    total_rate: float,
    *,
    settings: MeasureSettings | None = None,
    seed: int | None = None,
    processes: int = 1,
    max_processes: int | None = None,
) -> TrafficMeasurement:
    """Measure every class of ``traffic`` at ``total_rate`` req/s in all (blocking).

    ``requests`` holds each class's prepared requests (for ``endpoint``'s protocol). The load
    comes from ``processes`` processes (:mod:`load_processes`: each class's arrivals dealt
    over them); with ``max_processes`` (``--load-processes auto``), a level found client-bound
    is measured again with twice as many, up to ``max_processes``, as a single class's level
    is (:func:`load_processes.measure_with_processes`)."""
    chosen = settings or MeasureSettings()
    missing = [c.name for c in traffic.classes if c.name not in requests]
    if missing:
        raise ValueError(f"no requests prepared for the class {missing[0]!r}")

    def once(count: int) -> TrafficMeasurement:
        with no_gc_pauses():
            return asyncio.run(_measure(endpoint, traffic, requests, total_rate, chosen, seed, count))

    return measure_with_processes(once, processes, max_processes)


class ObjectiveSpan:
    """The window policy of a workload (:mod:`windows`): the span starts once every class had
    its first reply; windows of ``window_s``; a disturbed window starts the span again after it
    (up to ``extra_windows`` times); the level is measured when every class has its replies in
    a span of at least ``stable_windows`` windows, when a class has surely missed, at the span's
    clean time unless a class passes by a hair, or at the time cap (see the module's docstring)."""

    def __init__(self, traffic: Traffic, settings: MeasureSettings, started: float) -> None:
        self.traffic = traffic
        self.settings = settings
        self.started = started
        self.deadline = started + settings.time_cap()
        self.extra = 0
        """Disturbed windows the span started again after."""
        self.ended_early: str | None = None

    async def first_edge(self, streams: Sequence[Stream]) -> None:
        # A class's replies lag its arrivals by its latency: a span started before each class
        # had its first reply counts a pipeline still filling as a backlog (MiniLM's batches of
        # 8, 1-2 s each, read "answered 89 % of its arrivals" at rates they kept up with).
        filled_by = self.started + self.settings.time_cap() / 4
        while any(len(s.log) == 0 for s in streams) and time.perf_counter() < filled_by:
            await asyncio.sleep(min(self.settings.window_s, 0.05))

    async def window_end(self, windows: Windows, streams: Sequence[Stream]) -> None:
        await asyncio.sleep(self.settings.window_s)

    def measured(self, windows: Windows, streams: Sequence[Stream]) -> bool:
        settings, edges = self.settings, windows.edges
        if windows.loads and windows.loads[-1].disturbed and self.extra < settings.extra_windows:
            # Another tenant took CPU in this window: the span starts again after it, as a
            # single class's level takes more windows in place of disturbed ones.
            self.extra += 1
            windows.span = len(edges) - 1
            return False
        start = edges[windows.span]
        if len(edges) - 1 - windows.span < settings.stable_windows:
            return False
        self.ended_early = _surely_missed(streams, self.traffic, start, edges[-1])
        if self.ended_early is not None:
            return True
        answered = min(edges[-1].counts[n] - start.counts[n] for n in start.counts)
        if answered >= settings.min_window_requests:
            return True
        # A clean span's time when its replies are slow to come: the cap less the time it keeps
        # for disturbed windows, which only a disturbed window re-measured adds back.
        span_time = settings.max_windows * settings.window_s * 4
        due = edges[0].at + span_time + self.extra * settings.window_s * 4
        now = time.perf_counter()
        return now >= self.deadline or (
            now >= due and not _close_call(streams, self.traffic, start, edges[-1])
        )


async def _measure(
    endpoint: Endpoint | str,
    traffic: Traffic,
    requests: Mapping[str, ClassRequests],
    total_rate: float,
    settings: MeasureSettings,
    seed: int | None,
    processes: int = 1,
) -> TrafficMeasurement:
    rates = traffic.rates(total_rate)
    streams = [Stream(c.name, requests[c.name].requests, c.load(rates[c.name])) for c in traffic.classes]
    models = sorted({r.model for r in requests.values()})
    started = time.perf_counter()
    policy = ObjectiveSpan(traffic, settings, started)
    seen = await measure_windows(
        endpoint, streams, settings, policy, models=models, seed=seed, processes=processes
    )
    span_edges = seen.edges[seen.span :]
    first, last = span_edges[0], span_edges[-1]
    span = max(last.at - first.at, 1e-9)
    figures = tuple(
        _class_figures(stream, traffic.get(stream.name), span_edges, span) for stream in streams
    )
    return TrafficMeasurement(
        total_rate=total_rate,
        classes=figures,
        span_s=span,
        duration_s=time.perf_counter() - started,
        server=ServerSplit.between(first.stats, last.stats),
        interference=Interference.of(seen.loads, seen.loads[seen.span :]) if seen.loads else None,
        client=ClientCost.of(seen.client[seen.span :], processes=seen.processes)
        if seen.client
        else None,
        ended_early=policy.ended_early,
    )


def _successes(log: RequestLog, lo: int, hi: int) -> list[float]:
    """The latencies of the successful requests among records ``lo:hi`` of ``log``."""
    return [lat for lat, err in zip(log.latency[lo:hi], log.error[lo:hi], strict=True) if err is None]


def _offered(log: RequestLog, start: float, end: float) -> int:
    """Arrivals scheduled in ``[start, end)``: the load a span offered."""
    scheduled = np.asarray(log.scheduled)
    return int(((scheduled >= start) & (scheduled < end)).sum()) if scheduled.size else 0


def _close_call(streams: Sequence[Stream], traffic: Traffic, first: Edge, last: Edge) -> bool:
    """Does a class pass by a hair between two edges: its p99 within its bound but past
    :data:`CLOSE_CALL` of it, or its arrivals answered just over :data:`KEEP_UP_FRACTION`? Such
    a level takes the rest of its time cap for more replies; a clear pass or miss needs none."""
    for stream in streams:
        cls = traffic.get(stream.name)
        lo, hi = first.counts[stream.name], last.counts[stream.name]
        bound = cls.latency_bound_s
        if bound is not None:
            latency = LatencyStats.from_samples(_successes(stream.log, lo, hi))
            if latency.count and CLOSE_CALL * bound < latency.p99 <= bound:
                return True
        offered = _offered(stream.log, first.at, last.at)
        if offered and KEEP_UP_FRACTION <= (hi - lo) / offered < KEEP_UP_FRACTION + CLOSE_KEEP_UP:
            return True
    return False


def _surely_missed(streams: Sequence[Stream], traffic: Traffic, first: Edge, last: Edge) -> str | None:
    """Why a class has surely missed its objective between two edges (one line), or None."""
    for stream in streams:
        cls = traffic.get(stream.name)
        lo, hi = first.counts[stream.name], last.counts[stream.name]
        errors = stream.log.error[lo:hi]
        failed = sum(1 for e in errors if e is not None and not (cls.may_shed and e in SCHEDULER_ERRORS))
        if failed >= SURELY_MISSED_MIN and surely_over(
            failed, hi - lo, MAX_ERROR_RATE, SURELY_MISSED_CHANCE
        ):
            return f"{cls.name}: {failed} of {hi - lo} requests failed"
        bound = cls.latency_bound_s
        if bound is None:
            continue
        ok = _successes(stream.log, lo, hi)
        past = sum(1 for lat in ok if lat > bound)
        if past >= SURELY_MISSED_MIN and surely_over(past, len(ok), P99_SHARE, SURELY_MISSED_CHANCE):
            return f"{cls.name}: {past} of {len(ok)} replies past {bound * 1e3:g} ms"
    return None


def _class_figures(
    stream: Stream, traffic_class: TrafficClass, edges: list[Edge], span: float
) -> ClassFigures:
    log: RequestLog = stream.log
    first, last = edges[0], edges[-1]
    lo, hi = first.counts[stream.name], last.counts[stream.name]
    errors = Counter(e for e in log.error[lo:hi] if e is not None)
    ok = _successes(log, lo, hi)
    p99_windows = [
        LatencyStats.from_samples(_successes(log, a.counts[stream.name], b.counts[stream.name])).p99
        for a, b in zip(edges, edges[1:], strict=False)
    ]
    offered = _offered(log, first.at, last.at)
    # the requests sent in the span and served, wherever in the log their reply is (latency runs
    # from the scheduled send time): the served share of what the span offered, never over 1
    sent_at = np.asarray(log.done_at) - np.asarray(log.latency)
    succeeded = np.asarray([err is None for err in log.error], dtype=bool)
    sent_ok = int(((sent_at >= first.at) & (sent_at < last.at) & succeeded).sum()) if len(log) else 0
    lag = float(np.percentile(log.send_lag, 99, method="higher")) if log.send_lag else None
    return ClassFigures(
        name=stream.name,
        batch_size=traffic_class.request.batch_size,
        offered_rate=offered / span,
        request_rate=len(ok) / span,
        answered_rate=(hi - lo) / span,
        latency=LatencyStats.from_samples(ok),
        errors=dict(errors),
        p99_windows=tuple(p99_windows),
        send_lag_p99_s=lag,
        error_examples={k: log.error_examples.get(k, "") for k in errors},
        # min(): a reply's send time is recomputed in floats, so an edge can count one too many
        sent_served=min(1.0, sent_ok / offered) if offered else None,
    )


def p99_spread(figures: ClassFigures) -> float:
    """The spread of the class's per-window p99 (max / min - 1, as :func:`stats.spread`)."""
    values = [p for p in figures.p99_windows if p == p]
    return spread(values) if values else float("nan")
