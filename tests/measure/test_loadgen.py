"""Where the load generator stamps a request's latency (tritontune.measure.loadgen): the gRPC
transport's send and reply stamps bracket what the server did (against an in-process gRPC server
that notes when it had each request), failures keep their kind, the log stays in completion
order whoever records, and a window edge after ``settle`` holds every reply stamped before it."""

from __future__ import annotations

import asyncio
import bisect
import time

import grpc
import pytest
from tritonclient.grpc import service_pb2, service_pb2_grpc

from tritontune.measure import loadgen
from tritontune.measure.arrivals import Arrival
from tritontune.measure.loadgen import (
    QUEUE_FULL_ERROR,
    LoadGenerator,
    LoadSpec,
    LoadTransport,
    RequestLog,
    open_transport,
)
from tritontune.server.endpoint import Endpoint

HOLD_S = 0.005


class FakeTriton(service_pb2_grpc.GRPCInferenceServiceServicer):
    """Answers ModelInfer after :data:`HOLD_S`, noting when each request was in its hands;
    a request whose id is ``full`` is refused as Triton refuses one over its queue limit."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[float, float]] = {}

    async def ModelInfer(self, request, context):  # noqa: N802 - gRPC's name
        arrived = time.perf_counter()
        if request.id == "full":
            await context.abort(grpc.StatusCode.UNAVAILABLE, "Exceeds maximum queue size")
        await asyncio.sleep(HOLD_S)
        self.held[request.id] = (arrived, time.perf_counter())
        return service_pb2.ModelInferResponse(model_name=request.model_name, id=request.id)


async def serve() -> tuple[grpc.aio.Server, FakeTriton, str]:
    server = grpc.aio.server()
    fake = FakeTriton()
    service_pb2_grpc.add_GRPCInferenceServiceServicer_to_server(fake, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, fake, f"127.0.0.1:{port}"


def request(name: str) -> service_pb2.ModelInferRequest:
    return service_pb2.ModelInferRequest(model_name="m", id=name)


def test_grpc_stamps_bracket_the_server_and_come_before_the_await_returns():
    async def main() -> None:
        server, fake, address = await serve()
        transport = open_transport(Endpoint.grpc(address), request_timeout=5, connections=1)
        log = RequestLog()
        try:
            for n in range(20):
                asked = time.perf_counter()
                reply = await transport.send(request(f"r{n}"), log)
                returned = time.perf_counter()
                arrived, answered = fake.held[f"r{n}"]
                assert reply.error is None
                assert asked <= reply.sent_at <= arrived
                assert answered <= reply.done_at <= returned
                assert reply.done_at - reply.sent_at >= HOLD_S
        finally:
            await transport.close()
            await server.stop(None)

    asyncio.run(main())


def test_each_prepared_request_is_serialized_once_and_sent_as_it_is():
    async def main() -> None:
        server, fake, address = await serve()
        transport = open_transport(Endpoint.grpc(address), request_timeout=5, connections=1)
        prepared = [request("a"), request("b")]
        try:
            for _ in range(3):
                for r in prepared:
                    assert (await transport.send(r, RequestLog())).error is None
            assert isinstance(transport, loadgen._GrpcTransport)
            assert len(transport._wire) == 2
            assert transport.wire(prepared[0]) == prepared[0].SerializeToString()
            assert set(fake.held) == {"a", "b"}
        finally:
            await transport.close()
            await server.stop(None)

    asyncio.run(main())


def test_a_refused_request_keeps_its_kind_its_message_and_its_stamps():
    async def main() -> None:
        server, _, address = await serve()
        transport = open_transport(Endpoint.grpc(address), request_timeout=5, connections=1)
        log = RequestLog()
        try:
            asked = time.perf_counter()
            reply = await transport.send(request("full"), log)
            returned = time.perf_counter()
        finally:
            await transport.close()
            await server.stop(None)
        assert reply.error == QUEUE_FULL_ERROR
        assert "Exceeds maximum queue size" in log.error_examples[QUEUE_FULL_ERROR]
        assert asked <= reply.sent_at <= reply.done_at <= returned

    asyncio.run(main())


def test_no_server_is_an_error_with_stamps_not_a_hang():
    async def main() -> None:
        transport = open_transport(Endpoint.grpc("127.0.0.1:1"), request_timeout=2, connections=1)
        try:
            reply = await transport.send(request("x"), RequestLog())
        finally:
            await transport.close()
        assert reply.error == "UNAVAILABLE"
        assert 0 < reply.sent_at <= reply.done_at

    asyncio.run(main())


def test_the_log_stays_in_completion_order_when_a_record_comes_late():
    log = RequestLog()
    log.record(1.0, 0.1, None)
    log.record(3.0, 0.3, "CLIENT_BACKLOG")
    log.record(2.0, 0.2, None)  # stamped before the refusal, recorded a turn after it
    log.record(2.0, 0.25, "QUEUE_FULL")
    log.record(4.0, 0.4, None)
    assert log.done_at == [1.0, 2.0, 2.0, 3.0, 4.0]
    assert log.latency == [0.1, 0.2, 0.25, 0.3, 0.4]
    assert log.error == [None, None, "QUEUE_FULL", "CLIENT_BACKLOG", None]


@pytest.mark.parametrize("load", [LoadSpec.concurrency(8), LoadSpec.rate(400)])
def test_an_edge_after_settle_holds_exactly_the_replies_stamped_before_it(
    monkeypatch: pytest.MonkeyPatch, load: LoadSpec
):
    """The latencies are the transport's stamps (send to reply), and a window edge taken after
    ``settle`` is an index into the log: every reply stamped by then, no other."""
    stamps: list[float] = []
    done = loadgen._Stamped.done

    def noted(self: loadgen._Stamped, call: object) -> None:
        done(self, call)
        stamps.append(self.done_at)

    monkeypatch.setattr(loadgen._Stamped, "done", noted)

    async def main() -> tuple[RequestLog, list[tuple[float, int, int]]]:
        server, fake, address = await serve()
        generator = LoadGenerator(Endpoint.grpc(address), [request("a"), request("b")], seed=1)
        edges: list[tuple[float, int, int]] = []

        async def controller(log: RequestLog, _: LoadTransport) -> None:
            for _ in range(40):
                await asyncio.sleep(0.007)
                at = time.perf_counter()
                await generator.settle(at)
                edges.append((at, bisect.bisect_right(log.done_at, at), sum(s <= at for s in stamps)))

        try:
            log = await generator.run(load, controller, max_requests=100_000)
        finally:
            await server.stop(None)
        return log, edges

    log, edges = asyncio.run(main())
    assert len(log) > 40
    assert log.done_at == sorted(log.done_at)
    assert all(error is None for error in log.error)
    assert min(log.latency) >= HOLD_S
    for _at, index, stamped in edges:
        assert index == stamped


def test_a_closed_loops_client_lag_is_each_workers_turnaround_read_off_its_stamps(
    monkeypatch: pytest.MonkeyPatch,
):
    """Closed loop over gRPC: the client's lag is, per worker, the span from a reply's stamp to
    its next request's send stamp, one per request after a worker's first; no timer wakes the
    loop to measure it (a loop woken every few ms takes CPU from the server)."""
    sends: list[tuple[float, float]] = []
    done = loadgen._Stamped.done

    def noted(self: loadgen._Stamped, call: object) -> None:
        done(self, call)
        sends.append((self.sent_at, self.done_at))

    monkeypatch.setattr(loadgen._Stamped, "done", noted)
    woken: list[float] = []

    async def watcher(self: LoadGenerator, stop: asyncio.Event) -> None:
        woken.append(time.perf_counter())

    monkeypatch.setattr(LoadGenerator, "_watch_loop_lag", watcher)

    async def main() -> tuple[RequestLog, list[float]]:
        server, _fake, address = await serve()
        generator = LoadGenerator(Endpoint.grpc(address), [request("a")], seed=1)

        async def controller(log: RequestLog, _: LoadTransport) -> None:
            await asyncio.sleep(0.3)

        try:
            log = await generator.run(LoadSpec.concurrency(2), controller, max_requests=100_000)
        finally:
            await server.stop(None)
        return log, generator.turnaround

    log, turnaround = asyncio.run(main())
    assert len(log) > 20 and not woken
    assert len(turnaround) == len(log) - 2  # each worker's first request follows no reply
    assert all(lag >= 0 for lag in turnaround)
    # every turnaround is a gap between one call's reply stamp and another call's send stamp
    replies = sorted(d for _, d in sends)
    for lag in turnaround[:10]:
        assert any(abs(s - d - lag) < 1e-9 for s, _ in sends for d in replies), lag


def test_a_low_rate_level_ends_when_its_controller_does_not_at_the_next_arrival():
    """At 0.5 req/s the next arrival is 2 s away when the level ends: the load generator returns
    without waiting for it (the arrival ticker's wait is cut short), and sends nothing more."""

    async def main() -> tuple[RequestLog, float]:
        server, _, address = await serve()
        generator = LoadGenerator(Endpoint.grpc(address), [request("a")], seed=1)

        async def controller(log: RequestLog, _: LoadTransport) -> None:
            await asyncio.sleep(0.3)

        try:
            started = time.perf_counter()
            log = await generator.run(
                LoadSpec.rate(0.5, arrival=Arrival.CONSTANT), controller, max_requests=100
            )
            return log, time.perf_counter() - started
        finally:
            await server.stop(None)

    log, took = asyncio.run(main())
    assert len(log) == 0 and log.scheduled == []  # the first arrival was due at 2 s
    assert took < 1.1  # the wait for that arrival ended with the level (it was >= 1.3 s)
