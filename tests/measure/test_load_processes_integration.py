"""Load from two worker processes against the real server and the example model: closed and open
loop, with the client's cost reported for both processes and none of them left behind."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings, measure_load
from tritontune.serving.session import TuningSession

pytestmark = pytest.mark.integration

FAST = MeasureSettings(warmup_s=0.5, window_s=0.5, max_windows=6)


@pytest.fixture(scope="module")
def session(example_repository: Path):
    with TuningSession(load_model_source(example_repository, "mlp"), settings=FAST) as s:
        s.load(Variant(max_queue_delay_us=500, instance_count=1))
        yield s


def measure(session: TuningSession, load: LoadSpec, processes: int) -> Measurement:
    m = measure_load(
        session.server.endpoint(),
        session.name,
        session._requests,
        load,
        settings=FAST,
        processes=processes,
    )
    # Reported for the record (pytest -s): the same level from one process and from two.
    assert m.client is not None
    print(
        f"{load.label()} x{processes}: {m.request_rate:.1f} req/s, p99 {m.latency.p99 * 1e3:.2f} ms, "
        f"client {m.client.cpu_us_per_request} us/request, {m.client.cores:.2f} cores"
    )
    return m


def no_load_processes_left() -> bool:
    """No spawned load worker among this process's children (multiprocessing's resource tracker,
    which it starts once and which exits with this process, is not one)."""
    children = psutil.Process().children(recursive=True)
    return not [c for c in children if "spawn_main" in " ".join(c.cmdline())]


def test_two_processes_share_a_closed_loop(session: TuningSession):
    single = measure(session, LoadSpec.concurrency(8), 1)
    m = measure(session, LoadSpec.concurrency(8), 2)
    assert m.error_count == 0
    assert m.client is not None and m.client.processes == 2
    assert m.latency.count > 0 and m.latency.p99 >= m.latency.p50 > 0
    assert m.server is not None and m.server.requests > 0
    assert single.client is not None and single.client.processes == 1
    assert no_load_processes_left()


def test_two_processes_hold_an_open_loop_rate(session: TuningSession):
    measure(session, LoadSpec.rate(300), 1)
    m = measure(session, LoadSpec.rate(300), 2)
    assert m.error_count == 0
    assert m.request_rate == pytest.approx(300, rel=0.25)
    assert m.client is not None and m.client.processes == 2
    assert m.send_lag_p99_s is not None and m.send_lag_p99_s < 0.05
    assert no_load_processes_left()


def test_two_processes_carry_a_mixed_workload(session: TuningSession):
    """Two classes at once, each one's arrivals dealt over the two processes."""
    from tritontune.measure.mixed import ClassRequests, measure_traffic
    from tritontune.measure.traffic import parse_traffic

    traffic = parse_traffic(
        {"classes": [{"name": "a", "rate": 100}, {"name": "b", "rate": 200}]}, where="test workload"
    )
    requests = {name: ClassRequests(session.name, session._requests) for name in ("a", "b")}
    m = measure_traffic(session.server.endpoint(), traffic, requests, 300.0, settings=FAST, processes=2)
    assert m.client is not None and m.client.processes == 2
    for name, rate in (("a", 100), ("b", 200)):
        figures = m.figures(name)
        assert figures.errors == {}
        assert figures.request_rate == pytest.approx(rate, rel=0.3)
    assert no_load_processes_left()
