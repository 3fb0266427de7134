"""A discrete-event model of Triton's dynamic batcher: latency and throughput of a config at a
load, predicted from the model's service time per batch size.

Why: a real measurement costs seconds per load level and a server restart per config; the model
costs milliseconds, so a search can rank a whole grid of configs and measure only the few the
model puts on top (and check the model against them). The rules follow Triton's core
(``dynamic_batch_scheduler.cc``, ``scheduler_utils.cc``, ``model_config_utils.cc``,
``rate_limiter.cc``); each rule and each simplification is listed in
``docs/concepts/prediction.md`` ("The batcher's rules in full").
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, Literal

from tritontune.enums import TextEnum

#: The least time a closed-loop client waits before sending again after a rejection.
MIN_RETRY_S = 1e-4
#: A closed-loop operating point simulates at least this many requests per client.
CLIENT_ROUNDS = 8
#: The ``jitter`` a prediction of real clients uses: their waits spread +-50 % around the
#: calibrated overhead (without it, clients in lockstep share batches an idle instance would
#: have taken: the real MiniLM with 2 instances was predicted at half its measured throughput).
CLIENT_JITTER = 0.5

_ARRIVE, _DONE, _TIMER, _ENTER = 0, 1, 2, 3


class TimeoutAction(TextEnum):
    """What Triton does with a request that outlived its queue timeout."""

    REJECT = "reject"
    DELAY = "delay"


# ----------------------------------------------------------------------------------------------
# Service times


@dataclass(frozen=True)
class ServiceCurve:
    """Compute time of one batch by its size (in inferences), from measured points.

    ``points`` maps a batch size to the measured ``(mean_s, std_s)`` of one execution. Between
    measured sizes the mean and the coefficient of variation (std/mean) are interpolated
    linearly; past the largest, the mean follows the line through the last two points (never
    below the largest measured mean: a bigger batch does not run faster), or grows in proportion
    to the batch with a single point (no batching gain assumed); below the smallest it is the
    smallest's (small batches rarely run faster on an accelerator).

    ``contention`` slows a batch down by the number ``k`` of instances busy as it starts (itself
    included): a sequence gives the factor for ``k = 1, 2, ...`` (the last one for larger ``k``),
    a function takes ``k``. The default is 1.0 (instances do not interfere).
    """

    points: Mapping[int, tuple[float, float]]
    contention: Sequence[float] | Callable[[int], float] | None = None
    _sizes: tuple[int, ...] = field(init=False, repr=False, compare=False)
    _means: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _cvs: tuple[float, ...] = field(init=False, repr=False, compare=False)
    _cache: dict[int, tuple[float, float]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.points:
            raise ValueError("ServiceCurve: no measured points; give at least {batch: (mean_s, std_s)}")
        sizes = sorted(self.points)
        for size in sizes:
            mean, std = self.points[size]
            if not isinstance(size, int) or isinstance(size, bool) or size < 1:
                raise ValueError(f"ServiceCurve: batch size {size!r} is not a positive integer")
            if not mean > 0 or not math.isfinite(mean):
                raise ValueError(
                    f"ServiceCurve: mean service time at batch {size} is {mean!r}; expected > 0 s"
                )
            if not std >= 0 or not math.isfinite(std):
                raise ValueError(f"ServiceCurve: std at batch {size} is {std!r}; expected >= 0 s")
        factors = self.contention
        if isinstance(factors, Sequence) and (not factors or any(not f > 0 for f in factors)):
            raise ValueError("ServiceCurve: contention factors must be a non-empty list of numbers > 0")
        object.__setattr__(self, "_sizes", tuple(sizes))
        object.__setattr__(self, "_means", tuple(self.points[s][0] for s in sizes))
        object.__setattr__(self, "_cvs", tuple(self.points[s][1] / self.points[s][0] for s in sizes))
        object.__setattr__(self, "_cache", {})

    @property
    def points_used(self) -> tuple[int, ...]:
        """The measured batch sizes, ascending: what the curve's every value comes from."""
        return self._sizes

    def mean(self, batch: int) -> float:
        """Mean service time of a batch of ``batch`` inferences."""
        return self._stats(batch)[0]

    def cv(self, batch: int) -> float:
        """Coefficient of variation (std/mean) of the service time at ``batch``."""
        return self._stats(batch)[1]

    def factor(self, busy: int) -> float:
        """The slow-down with ``busy`` instances executing (this batch's included)."""
        c = self.contention
        if c is None:
            return 1.0
        if callable(c):
            return float(c(busy))
        return float(c[min(busy, len(c)) - 1])

    def sample(self, batch: int, rng: random.Random) -> float:
        """One service time: the mean scaled by a gamma variable of mean 1 and the curve's
        coefficient of variation (exponential at cv 1, constant at cv 0). A gamma because it is
        positive, right-skewed like real service times, and exact for the queueing checks."""
        mean, cv = self._stats(batch)
        if cv == 0.0:
            return mean
        if cv == 1.0:
            return mean * rng.expovariate(1.0)
        shape = 1.0 / (cv * cv)
        return mean * rng.gammavariate(shape, 1.0 / shape)

    def _stats(self, batch: int) -> tuple[float, float]:
        hit = self._cache.get(batch)
        if hit is not None:
            return hit
        if batch < 1:
            raise ValueError(f"ServiceCurve: batch size {batch} is not a positive integer")
        sizes, means, cvs = self._sizes, self._means, self._cvs
        if batch <= sizes[0]:
            stats = (means[0], cvs[0])
        elif batch >= sizes[-1]:
            if len(sizes) == 1:
                mean = means[0] * batch / sizes[0]
            else:
                slope = (means[-1] - means[-2]) / (sizes[-1] - sizes[-2])
                mean = max(means[-1], means[-1] + slope * (batch - sizes[-1]))
            stats = (mean, cvs[-1])
        else:
            stats = (means[-1], cvs[-1])
            for i, (lo, hi) in enumerate(pairwise(sizes)):
                if lo <= batch <= hi:
                    w = (batch - lo) / (hi - lo)
                    stats = (
                        means[i] + w * (means[i + 1] - means[i]),
                        cvs[i] + w * (cvs[i + 1] - cvs[i]),
                    )
                    break
        self._cache[batch] = stats
        return stats


# ----------------------------------------------------------------------------------------------
# The config


@dataclass(frozen=True)
class BatcherConfig:
    """The scheduling part of a Triton model config, as the model needs it.

    ``max_batch_size`` 0 means the model does not batch (each request executes alone);
    ``max_queue_size`` 0 means unbounded; ``default_timeout_s`` ``None`` means no timeout;
    ``priority_levels`` 0 switches priorities off (one level).
    """

    max_batch_size: int = 0
    dynamic_batching: bool = False
    max_queue_delay_s: float = 0.0
    preferred_batch_sizes: tuple[int, ...] = ()
    instances: int = 1
    priority_levels: int = 0
    default_priority_level: int = 0
    max_queue_size: int = 0
    default_timeout_s: float | None = None
    timeout_action: TimeoutAction = TimeoutAction.REJECT
    allow_timeout_override: bool = False

    def __post_init__(self) -> None:
        if self.max_batch_size < 0:
            raise ValueError(f"BatcherConfig: max_batch_size {self.max_batch_size} is negative")
        if self.instances < 1:
            raise ValueError(f"BatcherConfig: instances {self.instances}; expected at least 1")
        if self.max_queue_delay_s < 0:
            raise ValueError(f"BatcherConfig: max_queue_delay_s {self.max_queue_delay_s} is negative")
        for size in self.preferred_batch_sizes:
            if not 1 <= size <= max(1, self.max_batch_size):
                raise ValueError(
                    f"BatcherConfig: preferred batch size {size} is outside 1..max_batch_size "
                    f"({self.max_batch_size})"
                )
        if self.priority_levels < 0:
            raise ValueError(f"BatcherConfig: priority_levels {self.priority_levels} is negative")
        if self.priority_levels and not 1 <= self.default_priority_level <= self.priority_levels:
            raise ValueError(
                f"BatcherConfig: default_priority_level {self.default_priority_level} is outside "
                f"1..{self.priority_levels} (priority_levels)"
            )
        if self.max_queue_size < 0:
            raise ValueError(f"BatcherConfig: max_queue_size {self.max_queue_size} is negative")
        if self.default_timeout_s is not None and self.default_timeout_s < 0:
            raise ValueError(f"BatcherConfig: default_timeout_s {self.default_timeout_s} is negative")
        object.__setattr__(self, "timeout_action", TimeoutAction(self.timeout_action))

    @property
    def batching(self) -> bool:
        """Whether requests go through the dynamic batcher (else: each executes alone)."""
        return self.dynamic_batching and self.max_batch_size > 0


# ----------------------------------------------------------------------------------------------
# Arrivals


@dataclass(frozen=True)
class OpenLoop:
    """Requests at ``rate`` per second whatever the replies: Poisson at ``cv`` 1, gamma
    inter-arrival times of that coefficient of variation otherwise, evenly spaced at 0."""

    rate: float
    cv: float = 1.0
    request_batch: int = 1
    priority: int = 0
    timeout_s: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"OpenLoop: rate {self.rate} is not > 0 requests/s")
        if self.cv < 0:
            raise ValueError(f"OpenLoop: cv {self.cv} is negative")
        _check_class(self.request_batch, self.priority)


@dataclass(frozen=True)
class ClosedLoop:
    """``concurrency`` clients, each sending its next request when its reply arrives (plus the
    simulation's overhead): perf_analyzer's concurrency mode. All start at time 0."""

    concurrency: int
    request_batch: int = 1
    priority: int = 0
    timeout_s: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError(f"ClosedLoop: concurrency {self.concurrency}; expected at least 1")
        _check_class(self.request_batch, self.priority)


@dataclass(frozen=True)
class Replay:
    """Requests at the given times (seconds, ascending): a recorded trace, or an exact test."""

    times: tuple[float, ...]
    request_batch: int = 1
    priority: int = 0
    timeout_s: float | None = None
    name: str = ""

    def __post_init__(self) -> None:
        if any(b < a for a, b in pairwise(self.times)) or any(t < 0 for t in self.times):
            raise ValueError("Replay: times must be >= 0 and ascending")
        _check_class(self.request_batch, self.priority)


Arrivals = OpenLoop | ClosedLoop | Replay


def _check_class(request_batch: int, priority: int) -> None:
    if request_batch < 1:
        raise ValueError(f"request_batch {request_batch}; expected at least 1")
    if priority < 0:
        raise ValueError(f"priority {priority} is negative (0 means the default level)")


# ----------------------------------------------------------------------------------------------
# Results


@dataclass(frozen=True)
class ClassResult:
    """One traffic class's share of a simulation (latencies include the overhead)."""

    name: str
    requests: int
    completed: int
    rejected: int
    throughput_rps: float
    throughput_ips: float
    p50_s: float
    p99_s: float
    mean_s: float

    @property
    def rejected_share(self) -> float:
        return self.rejected / self.requests if self.requests else 0.0


@dataclass(frozen=True)
class SimResult:
    """What a measurement would report, over the measured window (after the warmup).

    Throughput counts replies within the window; latencies are those of the requests sent
    within it (``inf`` if none completed); ``batch_sizes`` counts batches by size in inferences.
    """

    throughput_rps: float
    throughput_ips: float
    p50_s: float
    p99_s: float
    mean_s: float
    mean_batch: float
    rejected_share: float
    utilization: tuple[float, ...]
    batch_sizes: dict[int, int]
    classes: tuple[ClassResult, ...]
    requests: int
    window_s: float


def _quantile(ordered: Sequence[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default)."""
    n = len(ordered)
    if n == 0:
        return math.inf
    pos = q * (n - 1)
    lo = int(pos)
    if lo >= n - 1:
        return ordered[-1]
    return ordered[lo] + (pos - lo) * (ordered[lo + 1] - ordered[lo])


# ----------------------------------------------------------------------------------------------
# The simulation


def simulate(
    curve: ServiceCurve,
    config: BatcherConfig,
    arrivals: Arrivals | Sequence[Arrivals],
    *,
    n_requests: int | None = None,
    duration_s: float | None = None,
    warmup: float = 0.1,
    overhead_s: float = 0.0,
    path_s: float = 0.0,
    jitter: float = 0.0,
    seed: int = 0,
) -> SimResult:
    """Run the model until ``n_requests`` requests were sent (or ``duration_s`` simulated), then
    let the requests in flight finish. The first ``warmup`` share of the requests (or of the
    time) is left out of the figures, as a measurement discards its ramp-up. The same seed gives
    the same result.

    ``overhead_s`` is added to every request's latency (and, closed loop, to each client's wait
    before its next request); ``path_s`` is the time each request holds the *request path*, one
    FIFO stage every request passes before it reaches the queue (the client, gRPC and Triton's
    frontend sharing the host's CPUs): at most ``1 / path_s`` requests per second get through,
    however large the batches, and requests wait for it as the load nears that.

    ``jitter`` spreads each closed-loop client's wait before its next request (and its first
    send) uniformly over ``overhead_s x [1 - jitter, 1 + jitter]``: real clients drift apart, but
    clients that all wait exactly ``overhead_s`` stay in lockstep, so two of them always arrive
    together and share one batch while a second instance idles (0: exact, for closed forms)."""
    classes: list[Arrivals] = (
        [arrivals] if isinstance(arrivals, OpenLoop | ClosedLoop | Replay) else list(arrivals)
    )
    if not classes:
        raise ValueError("simulate: no arrivals")
    if (n_requests is None) == (duration_s is None):
        raise ValueError("simulate: give exactly one of n_requests and duration_s")
    if n_requests is not None and n_requests < 1:
        raise ValueError(f"simulate: n_requests {n_requests}; expected at least 1")
    if duration_s is not None and not duration_s > 0:
        raise ValueError(f"simulate: duration_s {duration_s}; expected > 0")
    if not 0 <= warmup < 1:
        raise ValueError(f"simulate: warmup {warmup} is a share of the run, in [0, 1)")
    if overhead_s < 0:
        raise ValueError(f"simulate: overhead_s {overhead_s} is negative")
    if path_s < 0:
        raise ValueError(f"simulate: path_s {path_s} is negative")
    if not 0 <= jitter <= 1:
        raise ValueError(f"simulate: jitter {jitter} is outside [0, 1]")
    jitter_rng = random.Random(f"{seed}/jitter")

    def think() -> float:
        """A closed-loop client's wait before it sends again."""
        if not jitter:
            return overhead_s
        return overhead_s * (1 + jitter * (2 * jitter_rng.random() - 1))

    path_free = 0.0  # when the request path is next free

    batching = config.batching
    mbs = max(1, config.max_batch_size)
    n_levels = config.priority_levels if batching and config.priority_levels else 1
    for cls in classes:
        if cls.request_batch > 1 and config.max_batch_size == 0:
            raise ValueError(
                "simulate: request_batch > 1 needs a model that batches (max_batch_size > 0)"
            )
        if cls.request_batch > mbs:
            raise ValueError(
                f"simulate: request_batch {cls.request_batch} exceeds max_batch_size {mbs}; "
                "Triton refuses such a request"
            )
        if batching and config.priority_levels and cls.priority > config.priority_levels:
            raise ValueError(
                f"simulate: priority {cls.priority} is outside 0..{config.priority_levels} "
                "(priority_levels)"
            )

    # One stream for service times and one per class for arrivals: at another load the same
    # seed gives the same arrival pattern (scaled) and the same service draws, so neighbouring
    # loads differ by the load, not by the luck of the draw.
    rng = random.Random(seed)
    arrival_rngs = [random.Random(f"{seed}/{k}") for k in range(len(classes))]
    sample = curve.sample
    factor = curve.factor
    contention = curve.contention is not None

    # Per class: batch, level index (0 = served first), own timeout.
    c_batch = [c.request_batch for c in classes]
    c_level = [
        ((c.priority or config.default_priority_level) - 1) if n_levels > 1 else 0 for c in classes
    ]
    default_timeout = config.default_timeout_s or 0.0
    c_timeout: list[float] = []
    for c in classes:
        t = default_timeout if batching else 0.0
        if batching and config.allow_timeout_override and c.timeout_s and c.timeout_s < t:
            t = c.timeout_s
        c_timeout.append(t)
    delay_action = config.timeout_action == TimeoutAction.DELAY
    max_queue = config.max_queue_size if batching else 0

    # Preferred sizes: Triton puts max_batch_size in when none is given.
    prefs = (
        frozenset(config.preferred_batch_sizes) if config.preferred_batch_sizes else frozenset((mbs,))
    )
    max_pref = max(prefs)
    delay = config.max_queue_delay_s

    heap: list[tuple[float, int, int, Any]] = []
    push = heapq.heappush
    pop = heapq.heappop
    seq = 0

    # Issue bookkeeping.
    issued = 0
    total = n_requests if n_requests is not None else 0
    warm_n = int(warmup * n_requests) if n_requests is not None else 0
    end_t = duration_s if duration_s is not None else math.inf
    warm_t = warmup * duration_s if duration_s is not None else 0.0
    t_first = math.nan  # issue time of the first measured request
    t_last = 0.0  # issue time of the last request

    n_cls = len(classes)
    lat: list[list[float]] = [[] for _ in range(n_cls)]
    sent = [0] * n_cls
    rejected = [0] * n_cls
    done_times: list[tuple[float, int]] = []  # (reply time, class) of every reply

    # Instances and batches.
    idle: deque[int] = deque(range(config.instances))
    busy = 0
    b_start: list[float] = []
    b_end: list[float] = []
    b_inst: list[int] = []
    b_size: list[int] = []

    # Queues: per level, [normal FIFO, delayed FIFO]; one FIFO when not batching.
    levels: list[tuple[deque[tuple], deque[tuple]]] = [(deque(), deque()) for _ in range(n_levels)]
    queued = 0
    timer_at = math.inf

    # Start the arrival processes.
    for k, c in enumerate(classes):
        if isinstance(c, ClosedLoop):
            for client in range(c.concurrency):
                first = overhead_s * jitter * jitter_rng.random()  # staggered by the jitter
                push(heap, (first, seq, _ARRIVE, (k, client)))
                seq += 1
        elif isinstance(c, OpenLoop):
            push(heap, (_gap(c, arrival_rngs[k]), seq, _ARRIVE, (k, 1)))
            seq += 1
        elif c.times:
            push(heap, (c.times[0], seq, _ARRIVE, (k, 0)))
            seq += 1

    def next_arrival(k: int, client: int, now: float) -> None:
        """Schedule class ``k``'s next request after one at ``now`` (open loop, replay)."""
        nonlocal seq
        c = classes[k]
        if isinstance(c, OpenLoop):
            t = (client + 1) / c.rate if c.cv == 0 else now + _gap(c, arrival_rngs[k])
            push(heap, (t, seq, _ARRIVE, (k, client + 1)))
            seq += 1
        elif isinstance(c, Replay) and client + 1 < len(c.times):
            push(heap, (c.times[client + 1], seq, _ARRIVE, (k, client + 1)))
            seq += 1

    def client_next(k: int, client: int, at: float) -> None:
        nonlocal seq
        if isinstance(classes[k], ClosedLoop):
            push(heap, (at, seq, _ARRIVE, (k, client)))
            seq += 1

    def reject(req: tuple, now: float) -> None:
        if req[5]:
            rejected[req[2]] += 1
        client_next(req[2], req[3], now + max(overhead_s, MIN_RETRY_S))

    def start(now: float, batch: list[tuple], size: int) -> None:
        nonlocal busy, seq
        inst = idle.popleft()
        busy += 1
        service = sample(size, rng)
        if contention:
            service *= factor(busy)
        end = now + service
        b_start.append(now)
        b_end.append(end)
        b_inst.append(inst)
        b_size.append(size)
        push(heap, (end, seq, _DONE, (inst, batch)))
        seq += 1

    def dispatch(now: float) -> None:
        """Give idle instances the batches the rules allow now; else wait for the delay."""
        nonlocal queued, timer_at, seq
        while idle and queued:
            if not batching:
                req = levels[0][0].popleft()
                queued -= 1
                start(now, [req], req[1])
                continue
            # Scan in service order, applying the queue policy as the cursor reaches a request.
            size = cnt = best = 0
            send_now = False
            oldest = closest = math.inf
            for normal, delayed in levels:
                for q in (normal, delayed):
                    i = 0
                    while i < len(q):
                        req = q[i]
                        deadline = req[4]
                        if q is normal and deadline <= now:
                            del q[i]
                            if delay_action:
                                delayed.append(req)
                            else:
                                queued -= 1
                                reject(req, now)
                            continue
                        b = req[1]
                        if cnt:
                            if not best and size + b > max_pref:
                                best = cnt
                            if size + b > mbs:
                                send_now = True
                                break
                        size += b
                        cnt += 1
                        if req[0] < oldest:
                            oldest = req[0]
                        if q is normal and deadline < closest:
                            closest = deadline
                        if size in prefs:
                            best = cnt
                        i += 1
                    if send_now:
                        break
                if send_now:
                    break
            if not cnt:
                return
            expired = delay > 0 and now >= oldest + delay
            if best and not expired:
                take = best
            elif send_now or size >= max_pref or expired or delay == 0:
                take = cnt
            else:
                wake = min(oldest + delay, closest)
                if wake < timer_at:
                    timer_at = wake
                    push(heap, (wake, seq, _TIMER, None))
                    seq += 1
                return
            batch: list[tuple] = []
            got = 0
            for normal, delayed in levels:
                for q in (normal, delayed):
                    while q and len(batch) < take:
                        req = q.popleft()
                        batch.append(req)
                        got += req[1]
            queued -= take
            start(now, batch, got)

    def enter(k: int, client: int, now: float, sent_at: float, measured: bool) -> bool:
        """A request reaches the queue (or is rejected by a full one); True when queued."""
        nonlocal queued
        timeout = c_timeout[k]
        deadline = now + timeout if timeout else math.inf
        req = (now, c_batch[k], k, client, deadline, measured, sent_at)
        normal, delayed = levels[c_level[k]]
        if max_queue and len(normal) + len(delayed) >= max_queue:
            reject(req, now)
            return False
        normal.append(req)
        queued += 1
        return True

    dirty = False
    while heap:
        now, _, kind, data = pop(heap)
        if kind == _ARRIVE:
            k, client = data
            if now >= end_t or (n_requests is not None and issued >= total):
                pass  # issuing is over
            else:
                measured = issued >= warm_n and now >= warm_t
                if measured and t_first != t_first:
                    t_first = now
                issued += 1
                t_last = now
                if measured:
                    sent[k] += 1
                if path_s:
                    path_free = max(now, path_free) + path_s
                    push(heap, (path_free, seq, _ENTER, (k, client, now, measured)))
                    seq += 1
                else:
                    dirty |= enter(k, client, now, now, measured)
                if not isinstance(classes[k], ClosedLoop):
                    next_arrival(k, client, now)
        elif kind == _ENTER:
            k, client, sent_at, measured = data
            dirty |= enter(k, client, now, sent_at, measured)
        elif kind == _DONE:
            inst, batch = data
            for req in batch:
                k = req[2]
                done_times.append((now, k))
                if req[5]:
                    lat[k].append(now - req[6] + overhead_s)
                client_next(k, req[3], now + think())
            idle.append(inst)
            busy -= 1
            dirty = True
        else:
            if now >= timer_at:
                timer_at = math.inf
            dirty = True
        if dirty and (not heap or heap[0][0] > now):
            dirty = False
            if idle and queued:
                dispatch(now)

    return _results(
        classes,
        config.instances,
        t_first,
        t_last if duration_s is None else duration_s,
        lat,
        sent,
        rejected,
        done_times,
        b_start,
        b_end,
        b_inst,
        b_size,
    )


def _gap(c: OpenLoop, rng: random.Random) -> float:
    if c.cv == 0:
        return 1.0 / c.rate
    if c.cv == 1.0:
        return rng.expovariate(c.rate)
    shape = 1.0 / (c.cv * c.cv)
    return rng.gammavariate(shape, 1.0 / (shape * c.rate))


def _results(
    classes: Sequence[Arrivals],
    instances: int,
    t0: float,
    t1: float,
    lat: list[list[float]],
    sent: list[int],
    rejected: list[int],
    done_times: list[tuple[float, int]],
    b_start: list[float],
    b_end: list[float],
    b_inst: list[int],
    b_size: list[int],
) -> SimResult:
    if t0 != t0:  # nothing measured
        t0 = t1
    window = t1 - t0
    c_batch = [c.request_batch for c in classes]
    replies = [0] * len(classes)
    for t, k in done_times:  # (t0, t1]: a reply at t0 belongs to the cycle before
        if t0 < t <= t1:
            replies[k] += 1
    per_class = []
    all_lat: list[float] = []
    for k, c in enumerate(classes):
        ordered = sorted(lat[k])
        all_lat.extend(ordered)
        rps = replies[k] / window if window > 0 else 0.0
        per_class.append(
            ClassResult(
                name=c.name or f"class{k}",
                requests=sent[k],
                completed=len(ordered),
                rejected=rejected[k],
                throughput_rps=rps,
                throughput_ips=rps * c_batch[k],
                p50_s=_quantile(ordered, 0.5),
                p99_s=_quantile(ordered, 0.99),
                mean_s=sum(ordered) / len(ordered) if ordered else math.inf,
            )
        )
    all_lat.sort()
    busy_time = [0.0] * instances
    sizes: dict[int, int] = {}
    n_batches = inferences = 0
    for s, e, i, b in zip(b_start, b_end, b_inst, b_size, strict=True):
        overlap = min(e, t1) - max(s, t0)
        if overlap > 0:
            busy_time[i] += overlap
        if t0 <= s < t1:
            n_batches += 1
            inferences += b
            sizes[b] = sizes.get(b, 0) + 1
    requests = sum(sent)
    return SimResult(
        throughput_rps=sum(r.throughput_rps for r in per_class),
        throughput_ips=sum(r.throughput_ips for r in per_class),
        p50_s=_quantile(all_lat, 0.5),
        p99_s=_quantile(all_lat, 0.99),
        mean_s=sum(all_lat) / len(all_lat) if all_lat else math.inf,
        mean_batch=inferences / n_batches if n_batches else 0.0,
        rejected_share=sum(rejected) / requests if requests else 0.0,
        utilization=tuple(b / window if window > 0 else 0.0 for b in busy_time),
        batch_sizes=dict(sorted(sizes.items())),
        classes=tuple(per_class),
        requests=requests,
        window_s=window,
    )


# ----------------------------------------------------------------------------------------------
# The operating point


def capacity(curve: ServiceCurve, config: BatcherConfig, request_batch: int = 1) -> float:
    """Requests per second with every instance executing full batches back to back: an upper
    bound on any load's throughput (contention aside), where a rate search stops."""
    per_batch = max(1, config.max_batch_size // request_batch) if config.batching else 1
    return config.instances * per_batch / curve.mean(per_batch * request_batch)


def operating_point(
    curve: ServiceCurve,
    config: BatcherConfig,
    *,
    slo_p99_s: float,
    mode: Literal["concurrency", "rate"] = "concurrency",
    max_load: float | None = None,
    request_batch: int = 1,
    cv: float = 1.0,
    n_requests: int = 2000,
    warmup: float = 0.1,
    overhead_s: float = 0.0,
    path_s: float = 0.0,
    jitter: float = 0.0,
    max_rejected_share: float = 0.0,
    precision: float = 0.02,
    seed: int = 0,
) -> tuple[float, SimResult]:
    """The load a search would settle on for this config: the highest load whose p99 meets the
    SLO (and whose rejected share stays within ``max_rejected_share``), with its result.

    ``concurrency``: closed-loop clients, doubled from 1 until the SLO fails (or ``max_load``,
    default 256), then bisected to the integer; of the loads that met the SLO, the one with the
    best throughput is returned (more clients past the knee only add queueing). ``rate``: an
    open-loop rate (Poisson at ``cv`` 1) from 1/64 of :func:`capacity`, doubled until the SLO
    fails (at most ``max_load``, default the capacity), then bisected to ``precision``.

    Every load runs with the same seed (common random numbers), so neighbouring loads differ by
    the load, not by the draw. When even the lowest load fails, the load is 0 and the result is
    that lowest load's, to show why.
    """
    if not slo_p99_s > 0:
        raise ValueError(f"operating_point: slo_p99_s {slo_p99_s}; expected > 0")
    passed: dict[float, SimResult] = {}
    failed: dict[float, SimResult] = {}

    def run(load: float) -> bool:
        arrivals: Arrivals
        if mode == "concurrency":
            arrivals = ClosedLoop(int(load), request_batch=request_batch)
        else:
            arrivals = OpenLoop(load, cv=cv, request_batch=request_batch)
        # Closed loop: every client sends several requests, so the figures are not the start-up.
        count = max(n_requests, CLIENT_ROUNDS * int(load)) if mode == "concurrency" else n_requests
        result = simulate(
            curve,
            config,
            arrivals,
            n_requests=count,
            warmup=warmup,
            overhead_s=overhead_s,
            path_s=path_s,
            jitter=jitter,
            seed=seed,
        )
        ok = result.p99_s <= slo_p99_s and result.rejected_share <= max_rejected_share
        (passed if ok else failed)[load] = result
        return ok

    if mode == "concurrency":
        top = int(max_load) if max_load is not None else 256
        if top < 1:
            raise ValueError(f"operating_point: max_load {max_load}; expected at least 1 client")
        lo, hi, c = 0, 0, 1
        while True:
            if not run(c):
                hi = c
                break
            lo = c
            if c >= top:
                break
            c = min(2 * c, top)
        while hi and hi - lo > 1:
            mid = (lo + hi) // 2
            if run(mid):
                lo = mid
            else:
                hi = mid
        if not passed:
            return 0, failed[1]
        best = max(passed, key=lambda load: (passed[load].throughput_rps, -load))
        return best, passed[best]
    if mode != "rate":
        raise ValueError(f"operating_point: mode {mode!r} is not 'concurrency' or 'rate'")

    top_rate = max_load if max_load is not None else capacity(curve, config, request_batch)
    if path_s:
        top_rate = min(top_rate, 1 / path_s)
    if not top_rate > 0:
        raise ValueError(f"operating_point: max_load {max_load}; expected > 0 requests/s")
    rate = top_rate / 64
    lo_r, hi_r = 0.0, 0.0
    if not run(rate):
        # Even 1/64 of the capacity misses the SLO: look lower, a few halvings.
        hi_r = rate
        for _ in range(6):
            rate /= 2
            if run(rate):
                lo_r = rate
                break
            hi_r = rate
        if not lo_r:
            return 0.0, failed[min(failed)]
    else:
        lo_r = rate
        while lo_r < top_rate:
            rate = min(2 * lo_r, top_rate)
            if not run(rate):
                hi_r = rate
                break
            lo_r = rate
    while hi_r and (hi_r - lo_r) > precision * lo_r:
        mid_r = (lo_r + hi_r) / 2
        if run(mid_r):
            lo_r = mid_r
        else:
            hi_r = mid_r
    return lo_r, passed[lo_r]
