"""Splitting load over worker processes and merging what they report
(tritontune.measure.load_processes): the concurrency split, one open-loop schedule dealt round
robin (exactly the one-process schedule, whatever its shape), the exact merge of raw records in
completion order under watermarks, and the controllers' settle."""

from __future__ import annotations

import asyncio
import math
import os
import random
import time
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from tritontune.measure.arrivals import Arrival, arrival_gaps
from tritontune.measure.client_cost import ClientCost
from tritontune.measure.load_processes import (
    AutoProcesses,
    Batch,
    LoadProcessError,
    Merger,
    ProcessLoadGenerator,
    WorkerPool,
    auto_processes_limit,
    load_generator,
    parse_requests,
    plan_workers,
    serialize_requests,
    split_concurrency,
)
from tritontune.measure.loadgen import (
    HttpInferRequest,
    LoadGenerator,
    LoadMode,
    LoadSpec,
    RequestLog,
    Stream,
    arrival_times,
)
from tritontune.measure.stats import LatencyStats
from tritontune.server.endpoint import Endpoint


@pytest.mark.parametrize(
    ("n", "p", "expected"),
    [(8, 2, [4, 4]), (7, 3, [3, 2, 2]), (2, 4, [1, 1, 0, 0]), (1, 1, [1])],
)
def test_concurrency_is_split_evenly(n: int, p: int, expected: list[int]):
    assert split_concurrency(n, p) == expected
    assert sum(split_concurrency(n, p)) == n


def schedule(arrival: Arrival, cv: float | None, seed: float, offset: int, stride: int) -> list[float]:
    gaps = arrival_gaps(arrival, 300.0, random.Random(seed), cv)
    times = arrival_times(12.5, gaps, offset, stride)
    return [next(times) for _ in range(2000 // stride)]


@pytest.mark.parametrize(("arrival", "cv"), [(Arrival.POISSON, None), (Arrival.GAMMA, 3.0)])
@pytest.mark.parametrize("processes", [2, 3])
def test_dealt_shares_make_exactly_the_one_process_schedule(
    arrival: Arrival, cv: float | None, processes: int
):
    whole = schedule(arrival, cv, 0.25, 0, 1)
    shares = [schedule(arrival, cv, 0.25, k, processes) for k in range(processes)]
    union = sorted(t for share in shares for t in share)
    assert union == whole[: len(union)]
    assert all(share == whole[k::processes][: len(share)] for k, share in enumerate(shares))


def test_plans_share_one_serialized_payload_list_and_divide_the_caps():
    from tritonclient.grpc import service_pb2

    requests = [service_pb2.ModelInferRequest(model_name="m", id=str(i)) for i in range(3)]
    streams = [Stream("c", requests, LoadSpec.concurrency(5)), Stream("r", requests, LoadSpec.rate(100))]
    plans = plan_workers(
        streams,
        2,
        Endpoint.grpc("localhost:1"),
        seeds=[0.1, 0.2],
        start=3.0,
        request_timeout=1.0,
        max_in_flight=100,
        max_requests=1001,
    )
    assert [[(s.name, s.load.value, s.first_worker) for s in p.shares] for p in plans] == [
        [("c", 3.0, 0), ("r", 100.0, 0)],
        [("c", 2.0, 3), ("r", 100.0, 0)],
    ]
    assert [s.deal.offset for p in plans for s in p.shares if s.deal] == [0, 1]
    assert all(p.max_in_flight == 50 and p.max_requests == 500 for p in plans)
    assert plans[0].shares[0].payloads is plans[1].shares[0].payloads  # serialized once
    assert parse_requests(*serialize_requests(requests)) == requests


def test_http_requests_cross_as_a_pickle_with_their_encoded_tensors():
    import numpy as np
    import tritonclient.http as http

    tensor = http.InferInput("x", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.arange(4, dtype=np.float32).reshape(1, 4), binary_data=True)
    kind, payloads = serialize_requests([HttpInferRequest("m", (tensor,), priority=2)])
    (back,) = parse_requests(kind, payloads)
    assert kind == "pickle" and back.model == "m" and back.priority == 2
    assert back.inputs[0]._get_binary_data() == tensor._get_binary_data()


def reference_log(records: list[tuple[float, float, str | None]]) -> RequestLog:
    log = RequestLog()
    for record in sorted(records):
        log.record(*record)
    return log


def test_merging_keeps_completion_order_and_the_exact_percentiles():
    rng = random.Random(7)
    workers = 3
    per_worker: list[list[tuple[float, float, str | None]]] = []
    for _ in range(workers):
        done = sorted(rng.uniform(0, 10) for _ in range(400))
        per_worker.append(
            [(d, rng.expovariate(200), None if rng.random() > 0.05 else "X") for d in done]
        )
    log, turnaround = RequestLog(), []
    merger = Merger([log], workers, turnaround)
    # Each worker reports in batches at its own watermarks, out of step with the others.
    marks = {w: sorted(rng.uniform(0, 10) for _ in range(15)) + [math.inf] for w in range(workers)}
    events = sorted((mark, w) for w, ws in marks.items() for mark in ws)
    sent = [0] * workers
    for mark, w in events:
        records = per_worker[w]
        upto = sent[w]
        while upto < len(records) and records[upto][0] <= mark:
            upto += 1
        chunk = records[sent[w] : upto]
        sent[w] = upto
        merger.add(
            Batch(
                w,
                mark,
                {0: ([r[0] for r in chunk], [r[1] for r in chunk], [r[2] for r in chunk])},
                send_lag={0: [0.001] * len(chunk)},
                turnaround=[0.0005],
            )
        )
        assert log.done_at == sorted(log.done_at)
        assert all(d <= merger.merged_until for d in log.done_at)
    reference = reference_log([r for records in per_worker for r in records])
    assert log.done_at == reference.done_at
    assert log.latency == reference.latency
    assert log.error == reference.error
    assert len(log.send_lag) == 1200 and len(turnaround) == 3 * 16
    ok = [lat for lat, err in zip(log.latency, log.error, strict=True) if err is None]
    ref_ok = [lat for lat, err in zip(reference.latency, reference.error, strict=True) if err is None]
    assert LatencyStats.from_samples(ok) == LatencyStats.from_samples(ref_ok)


def test_records_completed_at_the_same_time_by_two_workers_merge():
    log = RequestLog()
    merger = Merger([log], 2, [])
    merger.add(Batch(0, 2.0, {0: ([1.0], [0.5], [None])}))
    merger.add(Batch(1, 2.0, {0: ([1.0], [0.5], ["UNAVAILABLE"])}))
    assert log.done_at == [1.0, 1.0] and sorted(map(str, log.error)) == ["None", "UNAVAILABLE"]


def test_settle_waits_for_every_watermark_to_pass_the_edge():
    async def scenario() -> tuple[bool, float]:
        log = RequestLog()
        pool = WorkerPool(Merger([log], 2, []), 2)
        pool.on_message(("batch", Batch(0, 5.0, {0: ([4.0], [0.1], [None])})))
        pool.on_message(("batch", Batch(1, 3.0, {0: ([2.0], [0.1], [None])})))
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, pool.on_message, ("batch", Batch(1, 6.0, {0: ([], [], [])})))
        started = loop.time()
        await pool.settle(4.5)
        waited = loop.time() - started
        return log.done_at == [2.0, 4.0], waited

    merged, waited = asyncio.run(scenario())
    assert merged and 0.04 <= waited < 0.5


def test_settle_gives_up_after_its_bound_and_raises_on_a_failed_worker():
    async def scenario() -> None:
        pool = WorkerPool(Merger([RequestLog()], 1, []), 1)
        started = asyncio.get_running_loop().time()
        await pool.settle(1.0)  # nobody reports: returns after the bound, not a hang
        assert 0.9 <= asyncio.get_running_loop().time() - started < 2.0
        pool.on_message(("error", 0, "Traceback: cannot connect"))
        with pytest.raises(LoadProcessError, match="load process 0 failed"):
            await pool.settle(2.0)

    asyncio.run(scenario())


def test_in_process_settle_returns_at_once_and_names_this_thread():
    generator = LoadGenerator("localhost:1", [object()])
    asyncio.run(asyncio.wait_for(generator.settle(1e12), 0.1))
    assert len(generator.load_threads()) == 1


def test_the_caller_picks_the_generator_by_the_count_of_processes():
    one = load_generator("localhost:1", [object()], seed=1)
    assert type(one) is LoadGenerator and one.processes == 1
    three = load_generator("localhost:1", [object()], processes=3, request_timeout=2.0)
    assert isinstance(three, ProcessLoadGenerator) and three.processes == 3
    assert three.request_timeout == 2.0
    assert three.load_threads() == one.load_threads()  # no workers before a run: this thread
    with pytest.raises(ValueError, match="at least 1"):
        load_generator("localhost:1", [object()], processes=0)


def test_auto_limit_leaves_a_core_to_a_local_server(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert auto_processes_limit(server_is_local=True) == 7
    assert auto_processes_limit(server_is_local=False) == 8
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert auto_processes_limit(server_is_local=True) == 1


def _explode() -> object:
    raise ValueError("poisoned payload")


class Poison:
    """Pickles in the parent, fails to unpickle in a worker: a worker that cannot start."""

    def __reduce__(self) -> tuple:
        return (_explode, ())


def spawned_workers() -> list[psutil.Process]:
    children = psutil.Process().children(recursive=True)
    return [c for c in children if "spawn_main" in " ".join(c.cmdline())]


@pytest.mark.parametrize("concurrency", [3, 1])
def test_workers_report_against_a_dead_port_and_are_gone_after(concurrency: int):
    """Real worker processes (no server: every request is refused): their records reach the
    parent's log in completion order, and none of them outlives the run (at concurrency 1, one
    of the two has nothing to do)."""
    from tritonclient.grpc import service_pb2

    requests = [service_pb2.ModelInferRequest(model_name="m")]
    generator = ProcessLoadGenerator("127.0.0.1:9", requests, request_timeout=1.0, processes=2)
    threads: list = []

    async def controller(log: RequestLog, _transport: object) -> None:
        await asyncio.sleep(0.3)
        at = time.perf_counter()
        await generator.settle(at)
        threads.extend(generator.load_threads())

    log = asyncio.run(generator.run(LoadSpec.concurrency(concurrency), controller, max_requests=10_000))
    assert len(log) > 0 and set(log.error) == {"UNAVAILABLE"}
    assert log.done_at == sorted(log.done_at)
    assert len({t.pid for t in threads}) == 2
    assert spawned_workers() == []


def test_a_worker_that_fails_raises_its_message_and_a_failing_controller_stops_them():
    generator = ProcessLoadGenerator("127.0.0.1:9", [Poison()], processes=2)

    async def controller(log: RequestLog, _transport: object) -> None:
        await asyncio.sleep(5)

    with pytest.raises(LoadProcessError, match="poisoned payload"):
        asyncio.run(generator.run(LoadSpec.concurrency(2), controller, max_requests=10))
    assert spawned_workers() == []

    from tritonclient.grpc import service_pb2

    generator = ProcessLoadGenerator("127.0.0.1:9", [service_pb2.ModelInferRequest()], processes=2)

    async def failing(log: RequestLog, _transport: object) -> None:
        await asyncio.sleep(0.1)
        raise KeyError("controller")

    with pytest.raises(KeyError):
        asyncio.run(generator.run(LoadSpec.rate(50), failing, max_requests=10))
    assert spawned_workers() == []


ORPHAN_PARENT = """
import asyncio, sys
from tritonclient.grpc import service_pb2
from tritontune.measure.load_processes import ProcessLoadGenerator
from tritontune.measure.loadgen import LoadSpec

async def controller(log, transport):
    await asyncio.sleep(0.2)
    print(" ".join(str(t.pid) for t in generator.load_threads()), flush=True)
    await asyncio.sleep(60)

if __name__ == "__main__":
    generator = ProcessLoadGenerator("127.0.0.1:9", [service_pb2.ModelInferRequest()], processes=2)
    asyncio.run(generator.run(LoadSpec.rate(20), controller, max_requests=1000))
"""


def test_workers_stop_when_their_parent_is_killed(tmp_path):
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(ORPHAN_PARENT)
    root = Path(__file__).resolve().parents[2]  # this checkout's tritontune, not an installed one
    env = {**os.environ, "PYTHONPATH": str(root)}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, cwd=root, env=env
    )
    try:
        assert parent.stdout is not None
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(psutil.pid_exists(pid) for pid in pids)
    finally:
        parent.kill()
        parent.wait()

    def alive(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 5
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in pids)


@pytest.mark.parametrize(("limit", "tried"), [(4, [1, 2, 4]), (3, [1, 2, 3]), (1, [1])])
def test_auto_measures_a_client_bound_level_again_with_twice_the_processes(
    monkeypatch: pytest.MonkeyPatch, limit: int, tried: list[int]
):
    from tritontune.measure import measurement
    from tritontune.measure.client_cost import ClientCost

    seen: list[int] = []

    async def fake(*args: object, **_: object) -> SimpleNamespace:
        processes = args[-1]
        assert isinstance(processes, int)
        seen.append(processes)
        cost = ClientCost(None, 1.0, 0.95, 0.01, bound_windows=1, windows=3, processes=processes)
        return SimpleNamespace(client_bound=True, client=cost)

    monkeypatch.setattr(measurement, "_measure", fake)
    m = measurement.measure_load("x:1", "m", [object()], LoadSpec.concurrency(64), max_processes=limit)
    assert seen == tried and m.client.processes == tried[-1]


def test_without_auto_a_client_bound_level_is_measured_once(monkeypatch: pytest.MonkeyPatch):
    from tritontune.measure import measurement

    seen: list[object] = []

    async def fake(*args: object, **_: object) -> SimpleNamespace:
        seen.append(args[-1])
        return SimpleNamespace(client_bound=True)

    monkeypatch.setattr(measurement, "_measure", fake)
    measurement.measure_load("x:1", "m", [object()], LoadSpec.concurrency(64), processes=2)
    assert seen == [2]


def _ended_with(processes: int) -> SimpleNamespace:
    cost = ClientCost(None, 1.0, 0.5, 0.001, bound_windows=0, windows=3, processes=processes)
    return SimpleNamespace(client_bound=False, client=cost)


def test_auto_starts_a_level_where_the_lighter_levels_of_its_kind_ended():
    """A walk up the loads does not re-learn the count at every level: a level starts with the
    most processes any level at or below its load ended with (of the same kind of load), a
    lighter one from one, never above the limit."""
    auto = AutoProcesses(limit=4)
    assert auto.start(LoadMode.RATE, 1000) == 1
    auto.learn(LoadMode.RATE, 8000, _ended_with(2))
    auto.learn(LoadMode.RATE, 16000, _ended_with(4))
    auto.learn(LoadMode.RATE, 500, _ended_with(1))  # one process teaches nothing
    assert auto.start(LoadMode.RATE, 4000) == 1
    assert auto.start(LoadMode.RATE, 8000) == 2
    assert auto.start(LoadMode.RATE, 12000) == 2
    assert auto.start(LoadMode.RATE, 32000) == 4
    assert auto.start(LoadMode.CONCURRENCY, 64) == 1  # a rate says nothing of a concurrency
    assert AutoProcesses(limit=1).start(LoadMode.RATE, 32000) == 1
    auto.learn(LoadMode.CONCURRENCY, 16, SimpleNamespace(client_bound=False, client=None))
    assert auto.start(LoadMode.CONCURRENCY, 64) == 1  # perf_analyzer's levels have no client
