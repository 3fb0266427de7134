"""The ramp-and-bisect algorithm, driven by a modelled server instead of a real one.

The thing under test is the search over load levels, so the measurement is replaced by a queueing
model: throughput grows with load up to a capacity, latency follows Little's law past it.
"""

import dataclasses

import pytest

from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, ServerSplit
from tritontune.measure.stats import LatencyStats, WindowSummary
from tritontune.search.operating_point import (
    OperatingPoint,
    find_operating_point,
    meets_slo,
)


def measurement(
    load: LoadSpec, throughput: float, p99: float, errors: int = 0, rate=None, window_p99=()
):
    lat = LatencyStats(1000, p99 / 2, p99 / 2, p99, p99, p99, p99, p99)
    windows = tuple(WindowSummary(1.0, 300, throughput, p99 / 2, w) for w in window_p99)
    return Measurement(
        load=load,
        batch_size=1,
        throughput=throughput,
        request_rate=rate if rate is not None else throughput,
        latency=lat,
        errors={"UNAVAILABLE": errors} if errors else {},
        stable=True,
        windows=windows,
        throughput_deviation=0.01,
        p99_deviation=0.02,
        duration_s=1.0,
        server=ServerSplit(1000, 500, 2.0, 0.001, 0.001, 0),
    )


class ModelledServer:
    """Closed loop: service time ``s`` per request, ``capacity`` req/s at most."""

    def __init__(self, service_s: float = 0.002, capacity: float = 2000.0):
        self.service_s, self.capacity, self.calls = service_s, capacity, []

    def __call__(self, load: LoadSpec) -> Measurement:
        self.calls.append(load.value)
        c = load.value
        throughput = min(c / self.service_s, self.capacity)
        mean = c / throughput  # Little's law
        return measurement(load, throughput, p99=1.5 * mean)


def test_finds_the_highest_load_under_the_slo():
    server = ModelledServer()
    op = find_operating_point(server, 0.050)
    # p99 = 1.5 * c / 2000 past saturation (c >= 4): the SLO of 50 ms allows c <= 66
    assert op.feasible
    assert op.throughput == pytest.approx(2000)
    assert op.p99_s <= 0.050
    assert len(server.calls) <= 8
    assert server.calls[0] == 1


def test_stops_ramping_at_saturation_and_at_the_cliff():
    server = ModelledServer(service_s=0.001, capacity=1000)
    op = find_operating_point(server, 1.0)  # a loose SLO: saturation ends the ramp
    assert op.feasible and op.throughput == pytest.approx(1000)
    assert max(server.calls) <= 64


def test_bisection_narrows_between_pass_and_fail():
    server = ModelledServer()
    op = find_operating_point(server, 0.050, max_bisections=5, precision=0.05)
    assert 55 <= op.load <= 66
    assert all(level.meets_slo == (level.p99_s <= 0.050) for level in op.levels)


def test_infeasible_at_the_lowest_load_is_a_constraint_violation():
    server = ModelledServer(service_s=0.2, capacity=5)
    op = find_operating_point(server, 0.050)
    assert not op.feasible
    assert op.throughput == 0
    assert op.slo_excess_s == pytest.approx(0.3 - 0.05)
    assert server.calls == [1]


def test_errors_and_unreached_rates_miss_the_slo():
    spec = LoadSpec.concurrency(4)
    assert meets_slo(measurement(spec, 100, 0.01), 0.05)
    assert not meets_slo(measurement(spec, 100, 0.01, errors=50), 0.05)
    rate = LoadSpec.rate(1000)
    assert not meets_slo(measurement(rate, 800, 0.01, rate=800), 0.05)
    assert meets_slo(measurement(rate, 950, 0.01, rate=950), 0.05)


def test_round_trip_through_a_dict():
    op = find_operating_point(ModelledServer(), 0.050)
    again = OperatingPoint.from_dict(op.to_dict())
    assert again.load == op.load and again.feasible == op.feasible
    assert again.throughput == pytest.approx(op.throughput, rel=1e-6)
    assert len(again.levels) == len(op.levels)


class ClientLimitedServer(ModelledServer):
    """The modelled server behind a load generator that runs out of CPU at ``client_limit``
    requests in flight: those levels are flagged client-bound (and look better than they are)."""

    def __init__(self, client_limit: int, **kwargs):
        super().__init__(**kwargs)
        self.client_limit = client_limit

    def __call__(self, load: LoadSpec) -> Measurement:
        m = super().__call__(load)
        if load.value < self.client_limit:
            return m
        from dataclasses import replace

        from tritontune.measure.client_cost import ClientCost

        bound = ClientCost(150.0, 0.98, 0.99, 0.016, bound_windows=3, windows=3)
        return replace(m, throughput=m.throughput * 10, client=bound)  # a figure not to trust


def test_a_client_bound_level_bounds_the_walk_and_is_never_the_answer():
    server = ClientLimitedServer(client_limit=40)
    op = find_operating_point(server, 0.050, max_bisections=4, precision=0.05)
    assert op.feasible and op.client_bound
    assert op.load < 40  # the best level measured cleanly, not the client's
    assert op.throughput == pytest.approx(2000)
    limited = [level for level in op.levels if level.client_bound]
    assert limited and all(level.load >= 40 for level in limited)
    assert "client-bound" in (limited[0].disturbance or "")
    # the flag survives the study's JSON
    again = OperatingPoint.from_dict(op.to_dict())
    assert again.client_bound and [lv.client_bound for lv in again.levels] == [
        lv.client_bound for lv in op.levels
    ]


def test_a_walk_the_client_never_limits_says_so():
    op = find_operating_point(ModelledServer(), 0.050)
    assert not op.client_bound
    assert "client_bound" not in op.to_dict()  # old studies' form, unchanged


class OpenLoopServer:
    """Open loop: ``capacity`` req/s at most; p99 grows like a queue's with utilization
    (``base_s`` unloaded, x 1 / (1 - u)), and past capacity the server falls behind."""

    def __init__(self, capacity: float, base_s: float = 0.010):
        self.capacity, self.base_s, self.calls = capacity, base_s, []

    def __call__(self, load: LoadSpec) -> Measurement:
        self.calls.append(load.value)
        utilization = load.value / self.capacity
        served = min(load.value, self.capacity)
        p99 = self.base_s / (1 - min(utilization, 0.99))
        return measurement(load, served, p99=p99, rate=served)


def test_concurrency_starts_at_its_floor_so_an_infeasible_config_costs_one_level():
    """Concurrency 1 is the floor: a config missing the SLO there is measured once, as before
    the walk could step down, and says so without stepping."""
    server = ModelledServer(service_s=0.2, capacity=5)
    op = find_operating_point(server, 0.050, max_bisections=4)
    assert server.calls == [1]
    assert not op.feasible and len(op.levels) == 1


def test_an_open_loop_start_over_the_slo_steps_down_and_bisects():
    """Open loop at 450 req/s on a server whose p99 passes 50 ms past 80 % of 500 req/s (400
    req/s): the first rate misses, the walk halves it (225 passes), then bisects between them to
    the usual precision."""
    server = OpenLoopServer(capacity=500.0)
    op = find_operating_point(
        server, 0.050, load_mode=LoadMode.RATE, start=450.0, max_load=10_000.0, max_bisections=3
    )
    assert server.calls[:2] == [450.0, 225.0]
    assert len(server.calls) > 2 and all(225.0 < rate < 450.0 for rate in server.calls[2:])
    assert op.feasible
    assert op.load <= 400.0 < op.load * 1.25
    assert op.p99_s <= 0.050
    assert all(level.meets_slo == (level.load <= op.load) for level in op.levels)


def test_an_open_loop_config_infeasible_down_to_the_floor():
    """p99 over the SLO at any rate: six halvings to 1/64 of the start, then infeasible, by how
    far the lowest rate was over (Optuna's constraint)."""
    server = OpenLoopServer(capacity=500.0, base_s=0.080)
    op = find_operating_point(server, 0.050, load_mode=LoadMode.RATE, start=128.0, max_load=10_000.0)
    assert server.calls == [128.0 / 2**k for k in range(7)]
    assert not op.feasible
    lowest = 0.080 / (1 - 2.0 / 500.0)
    assert op.slo_excess_s == pytest.approx(lowest - 0.050)
    assert (
        find_operating_point(
            OpenLoopServer(500.0, base_s=0.080),
            0.050,
            load_mode=LoadMode.RATE,
            start=128.0,
            min_load=32.0,
        )
        .levels[0]
        .load
        == 32.0
    )


def test_each_level_says_which_engine_and_how_many_load_processes_measured_it():
    from tritontune.measure.client_cost import ClientCost
    from tritontune.measure.loadgen import LoadEngine

    def engine_server(load: LoadSpec) -> Measurement:
        m = ModelledServer()(load)
        client = ClientCost(
            cpu_us_per_request=10.0, cores=0.3, loop_demand=0.2, lag_p99_s=0.0, bound_windows=0,
            windows=3, processes=2,
        )  # fmt: skip
        return dataclasses.replace(m, engine=LoadEngine.PERF_ANALYZER, client=client)

    op = find_operating_point(engine_server, 0.050)
    assert {(lv.engine, lv.load_processes) for lv in op.levels} == {("perf_analyzer", 2)}
    again = OperatingPoint.from_dict(op.to_dict())
    assert again.levels[0].engine == "perf_analyzer" and again.levels[0].load_processes == 2
    old = op.to_dict()
    for level in old["levels"]:  # a study made before levels said so
        del level["engine"], level["load_processes"]
    assert OperatingPoint.from_dict(old).levels[0].engine == "asyncio"
