"""Load from several worker processes (``--load-processes``), merged exactly in the parent.

One Python process sends at most so many requests a second (its event loop is one thread); past
that a level measures the client. :class:`ProcessLoadGenerator` is a
:class:`~tritontune.measure.loadgen.LoadGenerator` whose load comes from P spawned worker
processes, each with its own event loop and connection, while the parent merges what they
report and runs the window controller; :func:`load_generator` picks it or the one-process
generator by the count (:mod:`~tritontune.measure.loadgen` never imports this module). A
concurrency is split evenly; an open loop's arrival schedule (per class) is dealt round robin
from one seed, so every shape is kept exactly. The parent serializes the requests once. Workers
report their records with a *watermark*, and the parent appends only the records completed by
the lowest watermark, so the logs stay in completion order and windows stay exact (a controller
calls :meth:`LoadGenerator.settle` before taking an edge). ``--load-processes auto``
(:func:`measure_with_processes`) doubles the processes for a level measured client-bound.
Workers stop on every exit path of the parent and when it goes away; a worker's error comes back
as a :class:`LoadProcessError`, never as a hang. See ``docs/concepts/measurement.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import math
import multiprocessing
import os
import pickle
import threading
import time
import traceback
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, TypeVar

from tritontune.errors import TritonTuneError
from tritontune.measure.client_cost import ClientCost, LoadThread
from tritontune.measure.loadgen import (
    Deal,
    LoadGenerator,
    LoadMode,
    LoadSpec,
    LoadTransport,
    RequestLog,
    Stream,
    open_transport,
)
from tritontune.server.endpoint import Endpoint

#: How often a worker sends its new records to the parent.
FLUSH_EVERY_S = 0.025
#: How long :meth:`WorkerPool.settle` waits for the workers' watermarks to pass an edge.
SETTLE_TIMEOUT_S = 1.0
#: How long the workers may take to start (spawn a Python, import gRPC, parse the payloads).
START_TIMEOUT_S = 60.0


class LoadProcessError(TritonTuneError):
    """A load worker process failed (could not start, connect, or died): one line for the user."""


def auto_processes_limit(server_is_local: bool) -> int:
    """The most load processes ``--load-processes auto`` may use: every core for a remote server,
    and every core but one for a server on this machine (Triton needs CPU too: its frontend
    threads serve every request, so taking all cores would slow the server being measured)."""
    cores = os.cpu_count() or 1
    return max(1, cores - 1) if server_is_local else cores


class ClientVerdict(Protocol):
    """A measured level that says whether the load generator limited it (a single class's
    ``Measurement``, a workload's ``TrafficMeasurement``), and what its client cost."""

    @property
    def client_bound(self) -> bool: ...

    @property
    def client(self) -> ClientCost | None: ...


class AutoProcesses:
    """``--load-processes auto`` across the levels of one session: where each level starts.

    A level found client-bound is measured again with twice the processes
    (:func:`measure_with_processes`); without a memory every level would start from one again, and
    a walk up the loads would re-learn the count at every step, a wasted measurement or two per
    level. So the session keeps, per kind of load (a concurrency; a rate, a workload's total rate
    too), the count each level
    ended with, and a level starts with the most that any level at or below its load needed:
    a heavier load never needs fewer senders. A lighter level starts from one (more processes
    than needed cost CPU the server could use)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._ended: dict[LoadMode, list[tuple[float, int]]] = {}

    def start(self, kind: LoadMode, load: float) -> int:
        """The processes a level of ``kind`` at ``load`` (a concurrency, a rate) starts with."""
        ended = self._ended.get(kind, [])
        return min(self.limit, max((p for at, p in ended if at <= load), default=1))

    def learn(self, kind: LoadMode, load: float, level: ClientVerdict) -> None:
        """What ``level`` (of ``kind``, at ``load``) ended with; one process teaches nothing."""
        if level.client is not None and level.client.processes > 1:
            self._ended.setdefault(kind, []).append((load, level.client.processes))


Level = TypeVar("Level", bound=ClientVerdict)


def measure_with_processes(
    measure: Callable[[int], Level], processes: int, max_processes: int | None
) -> Level:
    """``measure(processes)``, and with ``max_processes`` (``--load-processes auto``) again with
    twice as many processes while the level is client-bound, up to ``max_processes``: the last
    measurement is kept (its ``client.processes`` says how many measured it). Measuring again
    with as many would not help: the client gets no more CPU; more processes may."""
    while True:
        level = measure(processes)
        if max_processes is None or not level.client_bound or processes >= max_processes:
            return level
        processes = min(2 * processes, max_processes)


def split_concurrency(concurrency: int, processes: int) -> list[int]:
    """Worker i's share of a closed loop of ``concurrency``: as even as can be."""
    return [concurrency // processes + (i < concurrency % processes) for i in range(processes)]


def serialize_requests(requests: Sequence[Any]) -> tuple[str, list[bytes]]:
    """The prepared requests as bytes, once, for every worker: protobuf messages (gRPC) as their
    wire form, anything else (HTTP's encoded inputs) pickled."""
    if requests and all(hasattr(r, "SerializeToString") for r in requests):
        return "protobuf", [r.SerializeToString() for r in requests]
    return "pickle", [pickle.dumps(list(requests), protocol=pickle.HIGHEST_PROTOCOL)]


def parse_requests(kind: str, payloads: list[bytes]) -> list[Any]:
    """The requests back from :func:`serialize_requests` (in a worker)."""
    if kind == "protobuf":
        from tritonclient.grpc import service_pb2

        return [service_pb2.ModelInferRequest.FromString(data) for data in payloads]
    requests: list[Any] = pickle.loads(payloads[0])
    return requests


@dataclass(frozen=True)
class StreamShare:
    """One worker's share of one stream (what crosses into the worker process)."""

    name: str
    position: int
    """The stream's index in the parent's list (the records' destination)."""
    kind: str
    payloads: list[bytes]
    load: LoadSpec
    first_worker: int = 0
    deal: Deal | None = None


@dataclass(frozen=True)
class WorkerPlan:
    """Everything one worker process needs."""

    index: int
    endpoint: Endpoint
    shares: tuple[StreamShare, ...]
    request_timeout: float
    max_in_flight: int
    max_requests: int


def plan_workers(
    streams: Sequence[Stream],
    processes: int,
    endpoint: Endpoint,
    *,
    seeds: Sequence[float],
    start: float,
    request_timeout: float,
    max_in_flight: int,
    max_requests: int,
) -> list[WorkerPlan]:
    """Split every stream over ``processes`` workers (see the module's docstring); each stream's
    payloads are serialized once and shared by every worker's plan."""
    serialized = [serialize_requests(stream.requests) for stream in streams]
    shares: list[list[StreamShare]] = [[] for _ in range(processes)]
    for position, (stream, (kind, payloads), seed) in enumerate(
        zip(streams, serialized, seeds, strict=True)
    ):
        if stream.load.mode == LoadMode.CONCURRENCY:
            first = 0
            for worker, count in enumerate(split_concurrency(max(1, int(stream.load.value)), processes)):
                if count:
                    load = replace(stream.load, value=float(count))
                    shares[worker].append(
                        StreamShare(stream.name, position, kind, payloads, load, first_worker=first)
                    )
                first += count
        else:
            for worker in range(processes):
                deal = Deal(worker, processes, start, seed)
                shares[worker].append(
                    StreamShare(stream.name, position, kind, payloads, stream.load, deal=deal)
                )
    return [
        WorkerPlan(
            index=worker,
            endpoint=endpoint,
            shares=tuple(shares[worker]),
            request_timeout=request_timeout,
            max_in_flight=max(1, max_in_flight // processes),
            max_requests=max(1, max_requests // processes),
        )
        for worker in range(processes)
    ]


# -- the worker process ---------------------------------------------------------------------------


@dataclass
class Batch:
    """New records from one worker since its last batch, all completed before ``watermark``."""

    worker: int
    watermark: float
    records: dict[int, tuple[list[float], list[float], list[str | None]]]
    """By stream position: done_at, latency, error, in completion order."""
    send_lag: dict[int, list[float]] = field(default_factory=dict)
    scheduled: dict[int, list[float]] = field(default_factory=dict)
    error_examples: dict[int, dict[str, str]] = field(default_factory=dict)
    turnaround: list[float] = field(default_factory=list)
    final: bool = False


def worker_main(plan: WorkerPlan, conn: Any) -> None:
    """A worker process's entry point: report ready (pid, loop thread), wait for the start,
    drive its shares until told to stop (or the parent is gone), report records all along."""
    try:
        asyncio.run(_worker(plan, conn))
    except BaseException:  # noqa: BLE001 - reported to the parent, whatever it was
        with contextlib.suppress(OSError):
            conn.send(("error", plan.index, traceback.format_exc(limit=8)))
    finally:
        conn.close()


async def _worker(plan: WorkerPlan, conn: Any) -> None:
    parent = os.getppid()
    requests_of = {}
    streams: list[tuple[int, Stream]] = []
    for share in plan.shares:
        if id(share.payloads) not in requests_of:
            requests_of[id(share.payloads)] = parse_requests(share.kind, share.payloads)
        requests = requests_of[id(share.payloads)]
        stream = Stream(
            share.name, requests, share.load, first_worker=share.first_worker, deal=share.deal
        )
        streams.append((share.position, stream))
    if not streams:
        conn.send(("ready", plan.index, LoadThread.current()))
        conn.recv()
        conn.send(("batch", Batch(plan.index, math.inf, {}, final=True)))
        return
    generator = LoadGenerator(
        plan.endpoint,
        streams[0][1].requests,
        request_timeout=plan.request_timeout,
        max_in_flight=plan.max_in_flight,
    )
    conn.send(("ready", plan.index, LoadThread.current()))
    message = await asyncio.to_thread(conn.recv)  # ("go", start) or ("stop",)
    if message[0] != "go":
        conn.send(("batch", Batch(plan.index, math.inf, {}, final=True)))
        return
    for _, stream in streams:
        if stream.deal is not None:
            stream.deal = replace(stream.deal, start=message[1])
    delay = message[1] - time.perf_counter()
    if delay > 0:
        await asyncio.sleep(delay)
    sent = {position: [0, 0, 0] for position, _ in streams}  # records, send lags, scheduled
    lag_sent = 0

    def batch(final: bool, watermark: float = math.inf) -> Batch:
        nonlocal lag_sent
        out = Batch(plan.index, math.inf if final else watermark, {}, final=final)
        for position, stream in streams:
            log, marks = stream.log, sent[position]
            n, lags, scheduled = len(log), len(log.send_lag), len(log.scheduled)
            out.records[position] = (
                log.done_at[marks[0] : n],
                log.latency[marks[0] : n],
                log.error[marks[0] : n],
            )
            out.send_lag[position] = log.send_lag[marks[1] : lags]
            out.scheduled[position] = log.scheduled[marks[2] : scheduled]
            out.error_examples[position] = dict(log.error_examples)
            marks[:] = [n, lags, scheduled]
        lags_now = len(generator.turnaround)
        out.turnaround = generator.turnaround[lag_sent:lags_now]
        lag_sent = lags_now
        return out

    async def control(_streams: list[Stream], _transport: LoadTransport) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            # The watermark is a time every reply stamped before it has been recorded by: the
            # records of replies stamped in this turn are one turn away (LoadGenerator.settle).
            watermark = time.perf_counter()
            await generator.settle(watermark)
            conn.send(("batch", batch(False, watermark)))
            try:
                stop = conn.poll()
            except (EOFError, OSError):
                return
            if stop or os.getppid() != parent:
                return  # told to stop, or the parent is gone (its pipe end closed)

    await generator.run_streams([s for _, s in streams], control, max_requests=plan.max_requests)
    conn.send(("batch", batch(True)))


# -- the parent -----------------------------------------------------------------------------------


class Merger:
    """Merges the workers' batches into the streams' logs in completion order (see the module's
    docstring): a record is appended once every worker's watermark has passed its completion."""

    def __init__(self, logs: Sequence[RequestLog], workers: int, turnaround: list[float]) -> None:
        self.logs = list(logs)
        self.turnaround = turnaround
        self.watermarks = [-math.inf] * workers
        self._records: list[list[list[tuple[float, float, str | None]]]] = [
            [[] for _ in range(workers)] for _ in self.logs
        ]
        self._lags: list[list[list[tuple[float, float]]]] = [
            [[] for _ in range(workers)] for _ in self.logs
        ]
        self._turnarounds: list[list[tuple[float, float]]] = [[] for _ in range(workers)]

    @property
    def merged_until(self) -> float:
        return min(self.watermarks)

    def add(self, batch: Batch) -> None:
        w = batch.worker
        for position, (done, latency, error) in batch.records.items():
            self._records[position][w].extend(zip(done, latency, error, strict=True))
        for position, lags in batch.send_lag.items():
            self._lags[position][w].extend((batch.watermark, lag) for lag in lags)
        for position, scheduled in batch.scheduled.items():
            self.logs[position].scheduled.extend(scheduled)  # not ordered: counted per span
        for position, examples in batch.error_examples.items():
            for kind, message in examples.items():
                self.logs[position].error_examples.setdefault(kind, message)
        self._turnarounds[w].extend((batch.watermark, lag) for lag in batch.turnaround)
        self.watermarks[w] = max(self.watermarks[w], batch.watermark)
        self._merge()

    def _merge(self) -> None:
        until = self.merged_until
        for log, pending in zip(self.logs, self._records, strict=True):
            for done_at, latency, error in heapq.merge(*_take(pending, until), key=_first):
                log.record(done_at, latency, error)
        for log, pending_lags in zip(self.logs, self._lags, strict=True):
            log.send_lag.extend(lag for _, lag in heapq.merge(*_take(pending_lags, until), key=_first))
        merged = heapq.merge(*_take(self._turnarounds, until), key=_first)
        self.turnaround.extend(lag for _, lag in merged)
        if until == math.inf:
            for log in self.logs:
                log.scheduled.sort()


def _first(item: tuple) -> float:
    """The merge key: completion time (records), or the carrying batch's watermark (lags). Only
    the key is compared: equal times from two workers never compare the rest."""
    return float(item[0])


def _take(pending: list[list[Any]], until: float) -> list[list[Any]]:
    """From each worker's pending items (in key order), those keyed at or before ``until``."""
    taken = []
    for i, items in enumerate(pending):
        cut = 0
        while cut < len(items) and items[cut][0] <= until:
            cut += 1
        if cut:
            taken.append(items[:cut])
            pending[i] = items[cut:]
    return taken


class WorkerPool:
    """The parent's side of the workers: their threads for the client probe, the merge, and
    :meth:`settle` for the controllers."""

    def __init__(self, merger: Merger, workers: int) -> None:
        self.merger = merger
        self.threads: list[LoadThread] = []
        self._ready: dict[int, LoadThread] = {}
        self._workers = workers
        self._changed = asyncio.Event()
        self.error: str | None = None
        self.finished: set[int] = set()

    def on_message(self, message: tuple) -> None:
        """Called in the event loop for every message from a worker."""
        kind = message[0]
        if kind == "ready":
            self._ready[message[1]] = message[2]
            if len(self._ready) == self._workers:
                self.threads = [self._ready[i] for i in range(self._workers)]
        elif kind == "batch":
            self.merger.add(message[1])
            if message[1].final:
                self.finished.add(message[1].worker)
        elif kind == "error" and self.error is None:
            self.error = f"load process {message[1]} failed:\n{message[2]}"
        elif kind == "eof" and message[1] not in self.finished and self.error is None:
            self.error = f"load process {message[1]} exited without finishing"
        self._changed.set()

    async def wait_for(self, done: Callable[[], bool], timeout: float) -> bool:
        """Wait until ``done()`` (or a worker failed: raise); False on timeout."""
        deadline = time.perf_counter() + timeout
        while True:
            if self.error is not None:
                raise LoadProcessError(self.error)
            if done():
                return True
            left = deadline - time.perf_counter()
            if left <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)

    async def settle(self, until: float) -> None:
        """Wait (up to :data:`SETTLE_TIMEOUT_S`) until every record completed by ``until`` is merged."""
        await self.wait_for(lambda: self.merger.merged_until >= until, SETTLE_TIMEOUT_S)


def _reader(conn: Any, worker: int, loop: asyncio.AbstractEventLoop, pool: WorkerPool) -> None:
    """A thread per worker: its messages into the event loop, then an end-of-file."""
    try:
        while True:
            message = conn.recv()
            loop.call_soon_threadsafe(pool.on_message, message)
    except (EOFError, OSError):
        pass
    except RuntimeError:  # the event loop closed
        return
    with contextlib.suppress(RuntimeError):
        loop.call_soon_threadsafe(pool.on_message, ("eof", worker))


class ProcessLoadGenerator(LoadGenerator):
    """A :class:`LoadGenerator` whose load comes from ``processes`` worker processes (see the
    module's docstring), their records merged into the streams' logs as one process's would be."""

    def __init__(
        self,
        endpoint: Endpoint | str,
        requests: list[Any],
        *,
        processes: int,
        request_timeout: float = 30.0,
        max_in_flight: int = 2048,
        seed: int | None = None,
    ) -> None:
        if processes < 1:
            raise ValueError("processes must be at least 1")
        super().__init__(
            endpoint, requests, request_timeout=request_timeout, max_in_flight=max_in_flight, seed=seed
        )
        self.processes = processes
        self._pool: WorkerPool | None = None
        """The worker processes while a run is on."""

    async def settle(self, until: float) -> None:
        """As :meth:`LoadGenerator.settle`: while the workers run, the parent waits (bounded)
        until it has merged what they report up to ``until``."""
        if self._pool is not None:
            await self._pool.settle(until)
        else:
            await super().settle(until)

    def load_threads(self) -> list[LoadThread]:
        """Each worker process's event-loop thread while they run."""
        if self._pool is not None:
            return list(self._pool.threads)
        return super().load_threads()

    async def run_streams(
        self,
        streams: list[Stream],
        controller: Callable[[list[Stream], LoadTransport], Awaitable],
        *,
        max_requests: int,
    ) -> None:
        """:meth:`LoadGenerator.run_streams` over :attr:`processes` worker processes."""
        processes = self.processes
        seeds = [self._rng.random() for _ in streams]
        context = multiprocessing.get_context("spawn")
        loop = asyncio.get_running_loop()
        merger = Merger([s.log for s in streams], processes, self.turnaround)
        pool = WorkerPool(merger, processes)
        workers: list[Any] = []
        conns: list[Any] = []
        readers: list[threading.Thread] = []
        transport = open_transport(self.endpoint, request_timeout=self.request_timeout, connections=2)
        try:
            # The start time is known once they are ready: plans carry a placeholder, "go" the
            # time.
            plans = plan_workers(
                streams,
                processes,
                self.endpoint,
                seeds=seeds,
                start=0.0,
                request_timeout=self.request_timeout,
                max_in_flight=self.max_in_flight,
                max_requests=max_requests,
            )
            for plan in plans:
                parent_end, child_end = context.Pipe()
                process = context.Process(
                    target=worker_main,
                    args=(plan, child_end),
                    name=f"tritontune-load-{plan.index}",
                    daemon=True,
                )
                process.start()
                child_end.close()
                workers.append(process)
                conns.append(parent_end)
                reader = threading.Thread(
                    target=_reader,
                    args=(parent_end, plan.index, loop, pool),
                    daemon=True,
                    name="tritontune-merge",
                )
                reader.start()
                readers.append(reader)
            if not await pool.wait_for(lambda: bool(pool.threads), START_TIMEOUT_S):
                raise LoadProcessError(f"the load processes did not start within {START_TIMEOUT_S:g} s")
            start = time.perf_counter() + 0.05
            for conn in conns:
                conn.send(("go", start))
            self._pool = pool
            await controller(streams, transport)
        finally:
            self._pool = None
            for conn in conns:
                with contextlib.suppress(OSError):
                    conn.send(("stop",))
            with contextlib.suppress(LoadProcessError):
                await pool.wait_for(lambda: len(pool.finished) == processes, self.request_timeout + 2)
            for process in workers:
                await asyncio.to_thread(process.join, 2.0)
                if process.is_alive():
                    process.terminate()
                    await asyncio.to_thread(process.join, 1.0)
                if process.is_alive():
                    process.kill()
                    await asyncio.to_thread(process.join, 1.0)
            for conn in conns:
                conn.close()
            await transport.close()
        if pool.error is not None:
            raise LoadProcessError(pool.error)


def load_generator(
    endpoint: Endpoint | str,
    requests: list[Any],
    *,
    processes: int = 1,
    request_timeout: float = 30.0,
    max_in_flight: int = 2048,
    seed: int | None = None,
) -> LoadGenerator:
    """The generator for a load from ``processes`` processes: this process's own
    (:class:`LoadGenerator`) for one, :class:`ProcessLoadGenerator` for more."""
    if processes == 1:
        return LoadGenerator(
            endpoint, requests, request_timeout=request_timeout, max_in_flight=max_in_flight, seed=seed
        )
    return ProcessLoadGenerator(
        endpoint,
        requests,
        processes=processes,
        request_timeout=request_timeout,
        max_in_flight=max_in_flight,
        seed=seed,
    )
