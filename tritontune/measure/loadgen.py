"""The load generator: closed-loop concurrency and open-loop arrivals over Triton's gRPC or HTTP API.

One asyncio event loop drives all requests, prepared in advance (:mod:`tritontune.measure.inputs`)
so the client spends its time sending, not encoding; gRPC through tritonclient's generated stub on
a grpc.aio channel, HTTP through its asyncio client, both feeding the same :class:`RequestLog`.
Closed loop (``concurrency=N``): N workers, each sending when its last reply is in. Open loop
(``rate=R``): requests sent on a schedule of arrivals (:mod:`tritontune.measure.arrivals`) whether
or not earlier ones returned, latency counted from the *scheduled* send time, so a slow server or
a saturated client shows in the tail (the send lag is reported too). Over gRPC a latency's stamps
are taken as close to the wire as the library lets us (:class:`Reply`: the serializer, the done
callback), as perf_analyzer measures. Every run is bounded in time and in requests. Load from
several processes is :class:`~tritontune.measure.load_processes.ProcessLoadGenerator`, which this
module knows nothing of. See ``docs/concepts/measurement.md``.
"""

from __future__ import annotations

import asyncio
import bisect
import random
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, TypeAlias

import grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import InferenceServerException

from tritontune.enums import TextEnum
from tritontune.measure.arrivals import Arrival, ArrivalTrace, arrival_gaps
from tritontune.measure.client_cost import LoadThread
from tritontune.server.client import (
    GRPC_OPTIONS,
    ModelStatsSnapshot,
    one_line,
    snapshot_from_json,
    snapshot_from_statistics,
    tls_context,
)
from tritontune.server.endpoint import ClientProtocol, Endpoint


class LoadMode(TextEnum):
    """How load is applied: a closed loop of N requests in flight, or open-loop arrivals at a rate.

    The one spelling of this concept; the values are what studies and tuning records keep."""

    CONCURRENCY = "concurrency"
    RATE = "rate"


class LoadEngine(TextEnum):
    """What generated a measurement's load: tritontune's own asyncio generator, or perf_analyzer
    (NVIDIA's C++ load generator, run once per level). Results say which one measured them."""

    ASYNCIO = "asyncio"
    PERF_ANALYZER = "perf_analyzer"


if TYPE_CHECKING:  # tritonclient's generated gRPC stub has no type information
    Stub: TypeAlias = Any
else:
    Stub = service_pb2_grpc.GRPCInferenceServiceStub
#: Error kind recorded for an open-loop arrival dropped because too many requests were in flight.
BACKLOG_ERROR = "CLIENT_BACKLOG"
#: Error kind of a request Triton refused because its priority level's queue was full
#: (admission control: ``max_queue_size``); Triton says "Exceeds maximum queue size".
QUEUE_FULL_ERROR = "QUEUE_FULL"
#: Error kind of a request Triton dropped after waiting its queue timeout ("Request timeout
#: expired"); both come as gRPC UNAVAILABLE / HTTP 503 and are told apart by the message.
QUEUE_TIMEOUT_ERROR = "QUEUE_TIMEOUT"
#: Error kinds that are the scheduler's decisions, not faults.
SCHEDULER_ERRORS = (QUEUE_FULL_ERROR, QUEUE_TIMEOUT_ERROR)
#: Closed loop over HTTP: how often the event loop's own lag is sampled
#: (:attr:`LoadGenerator.turnaround`).
LOOP_LAG_EVERY_S = 0.01
#: The open loop's arrival ticker waits out a gap on its stop event until this long before the
#: arrival, then sleeps the rest: a long gap (a low rate) ends as soon as the level does, not up
#: to a second later, and the arrival is still sent on time (``time.sleep`` wakes within tens of
#: microseconds).
TICKER_SLEEP_S = 0.002
#: The gRPC method every inference goes to (tritonclient's stub calls the same).
MODEL_INFER_METHOD = "/inference.GRPCInferenceService/ModelInfer"


def error_kind(kind: str, message: str) -> str:
    """``kind`` (a gRPC code or ``HTTP_<status>``), refined into a scheduler decision where
    Triton's message says it was one."""
    if "Exceeds maximum queue size" in message:
        return QUEUE_FULL_ERROR
    if "Request timeout expired" in message:
        return QUEUE_TIMEOUT_ERROR
    return kind


@dataclass(frozen=True)
class LoadSpec:
    """One load level: ``concurrency`` N (closed loop) or a request ``rate`` in req/s (open loop)."""

    mode: LoadMode
    value: float
    arrival: Arrival = Arrival.POISSON
    cv: float | None = None
    """The gaps' coefficient of variation, for :attr:`Arrival.GAMMA`."""
    trace: ArrivalTrace | None = field(default=None, compare=False, repr=False)
    """The recorded arrivals replayed, for :attr:`Arrival.TRACE`."""

    @classmethod
    def concurrency(cls, n: int) -> LoadSpec:
        return cls(LoadMode.CONCURRENCY, float(n))

    @classmethod
    def rate(
        cls,
        requests_per_s: float,
        arrival: Arrival = Arrival.POISSON,
        cv: float | None = None,
        trace: ArrivalTrace | None = None,
    ) -> LoadSpec:
        return cls(LoadMode.RATE, float(requests_per_s), Arrival(arrival), cv, trace)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for results: the shape of the arrivals too (a gamma's CV, a trace's file
        and how many times faster than recorded it played)."""
        out: dict[str, Any] = {
            "mode": self.mode.value,
            "value": self.value,
            "arrival": self.arrival.value,
        }
        if self.cv is not None:
            out["arrival_cv"] = self.cv
        if self.trace is not None:
            out["trace"] = str(self.trace.source)
            out["speedup"] = round(self.trace.speedup(self.value), 3)
        return out

    def label(self) -> str:
        if self.mode == LoadMode.CONCURRENCY:
            return f"concurrency {int(self.value)}"
        if self.arrival == Arrival.GAMMA:
            shape = f"gamma, cv {self.cv:g}"
        elif self.arrival == Arrival.TRACE and self.trace is not None:
            shape = f"trace {self.trace.source.name} x{self.trace.speedup(self.value):.3g}"
        else:
            shape = str(self.arrival)
        return f"{self.value:g} req/s ({shape})"


@dataclass
class RequestLog:
    """What happened to each request, sorted by completion time (:meth:`record` keeps it so),
    so a window is a slice of these lists."""

    done_at: list[float] = field(default_factory=list)
    latency: list[float] = field(default_factory=list)
    error: list[str | None] = field(default_factory=list)
    send_lag: list[float] = field(default_factory=list)
    scheduled: list[float] = field(default_factory=list)
    """Open loop: each arrival's scheduled time, in arrival order (the load offered)."""
    error_examples: dict[str, str] = field(default_factory=dict)
    """The first message seen for each error kind, to show the user what went wrong."""

    def record(self, done_at: float, latency: float, error: str | None) -> None:
        """Add one request. Records come in completion order (the transport's reply stamps are
        taken in the order the replies are processed, and recorded in that order), save an
        open-loop arrival refused at once while an earlier reply's record is one event-loop turn
        away: such a record is put in its place, so the log stays sorted by ``done_at``."""
        if self.done_at and done_at < self.done_at[-1]:
            at = bisect.bisect_right(self.done_at, done_at)
            self.done_at.insert(at, done_at)
            self.latency.insert(at, latency)
            self.error.insert(at, error)
            return
        self.done_at.append(done_at)
        self.latency.append(latency)
        self.error.append(error)

    def __len__(self) -> int:
        return len(self.done_at)


@dataclass
class Stream:
    """One stream of traffic: its prepared requests (round robin), sent at ``load``, with what
    happened to them in a log of its own (per-class figures for a mixed workload)."""

    name: str
    requests: list[Any]
    load: LoadSpec
    log: RequestLog = field(default_factory=RequestLog)
    first_worker: int = 0
    """Closed loop: the index of this stream's first worker (a load process's share of a bigger
    concurrency starts where the previous share ended, so the payloads still go round robin)."""
    deal: Deal | None = None
    """Open loop: send only this process's share of one common arrival schedule (None: all)."""


@dataclass(frozen=True)
class Deal:
    """One load process's share of an open-loop stream split over ``stride`` processes: every
    process draws the same gaps (the same ``seed``) from the same ``start`` time and sends the
    arrivals ``offset``, ``offset + stride``, ... So the union is exactly the one-process schedule,
    whatever the arrivals' shape (a Poisson stream could be split into thinner Poisson streams,
    a gamma or a trace could not)."""

    offset: int
    stride: int
    start: float
    """``time.perf_counter()`` of the schedule's origin (CLOCK_MONOTONIC: the same in every process)."""
    seed: float


@dataclass(frozen=True)
class HttpInferRequest:
    """One prepared HTTP request: the model and its inputs, tensors already encoded as binary."""

    model: str
    inputs: tuple[Any, ...]
    """``tritonclient.http.InferInput`` objects holding their raw bytes."""
    priority: int = 0
    timeout_us: int | None = None


def arrival_times(
    start: float, gaps: Iterator[float], offset: int = 0, stride: int = 1
) -> Iterator[float]:
    """The times of arrivals ``offset``, ``offset + stride``, ... of a stream of ``gaps`` from
    ``start``: all of them by default, one process's share of a dealt schedule otherwise. Every
    share adds up the same gaps in the same order, so its times are the one-process times exactly."""
    due = start
    for position, gap in enumerate(gaps):
        due += gap
        if position % stride == offset:
            yield due


class Reply(NamedTuple):
    """What became of one request, stamped by the transport (``time.perf_counter()``)."""

    error: str | None
    """None on success, else the error kind."""
    sent_at: float
    """When the request was handed to the wire (as close to it as the client library shows)."""
    done_at: float
    """When its reply (or failure) was known (likewise)."""


class LoadTransport(ABC):
    """Sends prepared requests over one protocol and reads the model's statistics meanwhile."""

    stamps_inside_call: bool = False
    """The reply stamp is taken when the call completes, before the worker that awaits it runs
    again (gRPC: the call's done callback). Then a closed loop's client lag is each worker's
    turnaround, from a reply's stamp to its next request's send stamp, read off the stamps for
    free; a transport stamping around the await (HTTP) hides that lag inside the latency, so its
    closed loop samples the event loop's own lag with a timer instead."""

    @abstractmethod
    async def send(self, request: Any, log: RequestLog) -> Reply:
        """Send one request: its outcome and its stamps (the error's first message kept in
        ``log``). The stamps, not the await, bound the latency: see the module's docstring."""

    @abstractmethod
    async def statistics(self, model: str) -> ModelStatsSnapshot | None:
        """The model's cumulative counters now (None if the server did not answer)."""

    @abstractmethod
    async def close(self) -> None: ...


def open_transport(endpoint: Endpoint, *, request_timeout: float, connections: int) -> LoadTransport:
    """The transport for ``endpoint``'s protocol (call inside the event loop that will use it)."""
    if endpoint.protocol == ClientProtocol.HTTP:
        return _HttpTransport(endpoint, request_timeout, connections)
    return _GrpcTransport(endpoint, request_timeout)


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None


class _Stamped:
    """One gRPC request in flight: its wire bytes and its two stamps. It is what the call is
    given to send: grpc.aio hands it to :meth:`serialize` just before it starts the send, and
    calls :meth:`done` when the call's status is in."""

    __slots__ = ("wire", "sent_at", "done_at")

    def __init__(self, wire: bytes) -> None:
        self.wire = wire
        self.sent_at = 0.0
        self.done_at = 0.0

    @staticmethod
    def serialize(request: _Stamped) -> bytes:
        request.sent_at = time.perf_counter()
        return request.wire

    def done(self, _call: Any) -> None:
        self.done_at = time.perf_counter()


class _GrpcTransport(LoadTransport):
    """The inference method on a grpc.aio channel, stamped (:class:`_Stamped`); each prepared
    request is serialized once, on first use, and its reply is not parsed (only its status
    counts). Statistics through tritonclient's generated stub."""

    stamps_inside_call = True

    def __init__(self, endpoint: Endpoint, request_timeout: float) -> None:
        tls = endpoint.tls
        if tls is None:
            self._channel = grpc.aio.insecure_channel(endpoint.address, options=GRPC_OPTIONS)
        else:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_read(tls.ca),
                private_key=_read(tls.key),
                certificate_chain=_read(tls.cert),
            )
            self._channel = grpc.aio.secure_channel(endpoint.address, credentials, options=GRPC_OPTIONS)
        self._stub: Stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)
        self._infer = self._channel.unary_unary(
            MODEL_INFER_METHOD, request_serializer=_Stamped.serialize, response_deserializer=None
        )
        self._metadata = endpoint.grpc_metadata()
        self._timeout = request_timeout
        self._wire: dict[int, tuple[Any, bytes]] = {}
        """Serialized requests by ``id()``, each with its request (kept alive: ids stay unique)."""

    def wire(self, request: Any) -> bytes:
        """``request``'s serialized form, made on its first send."""
        known = self._wire.get(id(request))
        if known is None:
            known = self._wire[id(request)] = (request, request.SerializeToString())
        return known[1]

    async def send(self, request: Any, log: RequestLog) -> Reply:
        stamped = _Stamped(self.wire(request))
        call = self._infer(stamped, timeout=self._timeout, metadata=self._metadata)
        call.add_done_callback(stamped.done)
        try:
            await call
            return Reply(None, stamped.sent_at, stamped.done_at)
        except grpc.aio.AioRpcError as err:
            message = err.details() or ""
            kind = error_kind(err.code().name, message)
            if kind not in log.error_examples:
                log.error_examples[kind] = one_line(message)
            now = time.perf_counter()
            return Reply(kind, stamped.sent_at or now, stamped.done_at or now)

    async def statistics(self, model: str) -> ModelStatsSnapshot | None:
        try:
            reply = await self._stub.ModelStatistics(
                service_pb2.ModelStatisticsRequest(name=model), timeout=5, metadata=self._metadata
            )
        except grpc.aio.AioRpcError:
            return None
        return snapshot_from_statistics(reply)

    async def close(self) -> None:
        await self._channel.close()


class _HttpTransport(LoadTransport):
    """tritonclient's asyncio HTTP client, one connection per request in flight (up to
    ``connections``), so a closed loop of N never queues inside the client."""

    def __init__(self, endpoint: Endpoint, request_timeout: float, connections: int) -> None:
        import aiohttp
        import tritonclient.http.aio as aio_http

        self._aiohttp = aiohttp
        tls: dict[str, Any] = {}
        if endpoint.tls is not None:
            tls = {"ssl": True, "ssl_context": tls_context(endpoint.tls)}
        self._client = aio_http.InferenceServerClient(
            endpoint.address, conn_limit=connections, conn_timeout=request_timeout, **tls
        )
        self._headers = endpoint.header_dict()

    async def send(self, request: Any, log: RequestLog) -> Reply:
        # infer() adds its own header to the dict it gets: each call gets a copy.
        headers = dict(self._headers) if self._headers else None
        start = time.perf_counter()
        try:
            await self._client.infer(
                request.model,
                request.inputs,
                headers=headers,
                priority=request.priority,
                timeout=request.timeout_us,
            )
            return Reply(None, start, time.perf_counter())
        except InferenceServerException as err:
            message = str(err.message())
            kind = error_kind(f"HTTP_{err.status()}", message)
        except asyncio.TimeoutError:
            kind, message = "DEADLINE_EXCEEDED", "no reply within the request timeout"
        except self._aiohttp.ClientConnectionError as err:
            kind, message = "UNAVAILABLE", str(err)
        except self._aiohttp.ClientError as err:
            kind, message = "CLIENT_ERROR", str(err)
        if kind not in log.error_examples:
            log.error_examples[kind] = one_line(message)
        return Reply(kind, start, time.perf_counter())

    async def statistics(self, model: str) -> ModelStatsSnapshot | None:
        try:
            reply = await self._client.get_inference_statistics(model, headers=self._headers)
        except (InferenceServerException, asyncio.TimeoutError, self._aiohttp.ClientError):
            return None
        return snapshot_from_json(reply)

    async def close(self) -> None:
        await self._client.close()


class LoadGenerator:
    """Sends ``requests`` (round robin) to one model at one load level until told to stop, from
    this process's event loop (from several processes:
    :class:`~tritontune.measure.load_processes.ProcessLoadGenerator`)."""

    processes: int = 1
    """The processes generating the load."""

    def __init__(
        self,
        endpoint: Endpoint | str,
        requests: list[Any],
        *,
        request_timeout: float = 30.0,
        max_in_flight: int = 2048,
        seed: int | None = None,
    ) -> None:
        """``requests`` are prepared for ``endpoint``'s protocol (:func:`inputs.build_requests`);
        a plain ``host:port`` is a gRPC endpoint."""
        if not requests:
            raise ValueError("at least one request payload is needed")
        self.endpoint = Endpoint.grpc(endpoint) if isinstance(endpoint, str) else endpoint
        self.requests = requests
        self.request_timeout = request_timeout
        self.max_in_flight = max_in_flight
        self._rng = random.Random(seed)
        self.turnaround: list[float] = []
        """Closed loop: the client's lag between one request and the next, in completion order.
        Over gRPC, each worker's turnaround: from a reply's stamp to the send stamp of its next
        request (the turns the event loop took to resume the worker and send). Over HTTP, how
        late a 1 ms timer of the event loop fired, sampled every :data:`LOOP_LAG_EVERY_S`
        (see :attr:`LoadTransport.stamps_inside_call`)."""

    async def run(
        self,
        load: LoadSpec,
        controller: Callable[[RequestLog, LoadTransport], Awaitable],
        *,
        max_requests: int,
    ) -> RequestLog:
        """Drive ``load`` while ``controller(log, transport)`` runs; stop when it returns.

        The controller watches the log (windows, stability) and may use the transport for
        statistics calls. Load also stops after ``max_requests`` sends.
        """
        stream = Stream("", self.requests, load)

        async def control(streams: list[Stream], transport: LoadTransport) -> None:
            await controller(stream.log, transport)

        await self.run_streams([stream], control, max_requests=max_requests)
        return stream.log

    async def run_streams(
        self,
        streams: list[Stream],
        controller: Callable[[list[Stream], LoadTransport], Awaitable],
        *,
        max_requests: int,
    ) -> None:
        """Drive every stream at once, each with its own requests, load and log, over one
        connection, while ``controller(streams, transport)`` runs; each stream also stops after
        ``max_requests`` sends."""
        closed = sum(max(1, int(s.load.value)) for s in streams if s.load.mode == LoadMode.CONCURRENCY)
        opened = sum(1 for s in streams if s.load.mode == LoadMode.RATE)
        transport = open_transport(
            self.endpoint,
            request_timeout=self.request_timeout,
            connections=closed + opened * self.max_in_flight + 1,
        )
        stop = asyncio.Event()
        drivers: list[asyncio.Task] = []
        if closed and not transport.stamps_inside_call:
            drivers.append(asyncio.create_task(self._watch_loop_lag(stop)))
        try:
            for stream in streams:
                if stream.load.mode == LoadMode.CONCURRENCY:
                    drivers += [
                        asyncio.create_task(
                            self._closed_worker(
                                transport, stream, stop, stream.first_worker + i, max_requests
                            )
                        )
                        for i in range(max(1, int(stream.load.value)))
                    ]
                else:
                    drivers.append(
                        asyncio.create_task(self._open_scheduler(transport, stream, stop, max_requests))
                    )
            try:
                await controller(streams, transport)
            finally:
                stop.set()
                done, pending = await asyncio.wait(drivers, timeout=self.request_timeout + 1)
                for task in pending:
                    task.cancel()
                await asyncio.gather(*drivers, return_exceptions=True)
        finally:
            await transport.close()

    async def settle(self, until: float) -> None:
        """Wait until every request completed by ``until`` (a ``time.perf_counter()`` taken in
        this event loop's current turn) is in the logs, so a window edge taken at ``until`` is an
        index into them. In one process a reply stamped by then has its record one turn away (the
        stamp's callback already scheduled the worker that records it), so one yield does (with
        worker processes the parent waits for what they report:
        :meth:`~tritontune.measure.load_processes.ProcessLoadGenerator.settle`)."""
        await asyncio.sleep(0)

    def load_threads(self) -> list[LoadThread]:
        """The event-loop threads generating the load (for :class:`client_cost.ClientProbe`):
        this one (with worker processes, each worker's)."""
        return [LoadThread.current()]

    async def _watch_loop_lag(self, stop: asyncio.Event) -> None:
        lag = self.turnaround
        while not stop.is_set():
            start = time.perf_counter()
            await asyncio.sleep(0.001)
            lag.append(max(0.0, time.perf_counter() - start - 0.001))
            await asyncio.sleep(LOOP_LAG_EVERY_S)

    async def _closed_worker(
        self, transport: LoadTransport, stream: Stream, stop: asyncio.Event, worker: int, cap: int
    ) -> None:
        index = worker
        send = transport.send
        requests, log = stream.requests, stream.log
        count = len(requests)
        turnaround = self.turnaround if transport.stamps_inside_call else None
        replied_at = None  # the stamp of this worker's previous reply
        while not stop.is_set() and len(log) < cap:
            error, sent_at, done_at = await send(requests[index % count], log)
            if turnaround is not None and replied_at is not None:
                turnaround.append(max(0.0, sent_at - replied_at))
            log.record(done_at, done_at - sent_at, error)
            index += 1
            replied_at = done_at
            if error == "UNAVAILABLE":
                replied_at = None  # the pause below is ours on purpose, not lag
                await asyncio.sleep(0.01)  # no server: don't spin on instant refusals

    async def _open_scheduler(
        self, transport: LoadTransport, stream: Stream, stop: asyncio.Event, cap: int
    ) -> None:
        """Arrivals come from a ticker thread: ``time.sleep`` wakes within tens of microseconds,
        while asyncio's timers round up to whole milliseconds, which would add client-side lag
        to every latency counted from the schedule."""
        loop = asyncio.get_running_loop()
        in_flight: set[asyncio.Task] = set()
        ticker_stop = threading.Event()
        sent = 0
        load, log, requests = stream.load, stream.log, stream.requests
        deal = stream.deal
        rng = random.Random(self._rng.random() if deal is None else deal.seed)

        async def one(index: int, due: float) -> None:
            log.send_lag.append(time.perf_counter() - due)
            error, _, done_at = await transport.send(requests[index % len(requests)], log)
            log.record(done_at, done_at - due, error)

        capped = asyncio.Event()

        def launch(due: float) -> None:
            nonlocal sent
            if stop.is_set() or sent >= cap:
                ticker_stop.set()
                capped.set()
                return
            log.scheduled.append(due)
            if len(in_flight) >= self.max_in_flight:
                now = time.perf_counter()
                log.record(now, now - due, BACKLOG_ERROR)
                return
            task = loop.create_task(one(sent, due))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
            sent += 1

        def tick() -> None:
            start = time.perf_counter() if deal is None else deal.start
            gaps = arrival_gaps(load.arrival, load.value, rng, load.cv, load.trace)
            share = (0, 1) if deal is None else (deal.offset, deal.stride)
            for due in arrival_times(start, gaps, *share):
                if ticker_stop.is_set():
                    return
                delay = due - time.perf_counter()
                if delay > TICKER_SLEEP_S and ticker_stop.wait(delay - TICKER_SLEEP_S):
                    return  # the level ended during the gap: no need to wait it out
                delay = due - time.perf_counter()
                if delay > 0:
                    time.sleep(delay)
                try:
                    loop.call_soon_threadsafe(launch, due)
                except RuntimeError:  # the loop closed under us
                    return

        name = f"tritontune-arrivals-{stream.name}" if stream.name else "tritontune-arrivals"
        ticker = threading.Thread(target=tick, name=name, daemon=True)
        ticker.start()
        try:
            # Wait on events, not a poll: a loop woken every few ms takes CPU from the server.
            ends = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(capped.wait())]
            try:
                await asyncio.wait(ends, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for end in ends:
                    end.cancel()
            if in_flight:
                await asyncio.wait(list(in_flight), timeout=self.request_timeout + 1)
        finally:
            ticker_stop.set()
            await asyncio.to_thread(ticker.join, 1.0)
            for task in in_flight:
                task.cancel()
