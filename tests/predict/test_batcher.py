"""The dynamic-batcher model (tritontune.predict.batcher) against queueing theory where theory is
exact (M/M/1, M/D/1, M/M/2 with batching off), and against Triton's batching rules worked out by
hand on deterministic traffic (exact batch sizes and latencies).

The queueing checks are statistical: fixed seeds, and enough requests that the sample's error is
well inside the margin (M/M/1 at rho 0.8 is the slowest to settle: 400k requests; over seeds 0-3
its mean stayed within 4 % and its p99 within 8 % at 200k).
"""

from __future__ import annotations

import math

import pytest

from tritontune.predict.batcher import (
    BatcherConfig,
    ClosedLoop,
    OpenLoop,
    Replay,
    ServiceCurve,
    TimeoutAction,
    capacity,
    operating_point,
    simulate,
)

MU = 1000.0  # service rate of the queueing checks: 1 ms mean service time
NO_BATCHING = BatcherConfig()
TINY = ServiceCurve({1: (1e-6, 0.0), 64: (1e-6, 0.0)})  # service too short to matter: 1 us
MS = 1e-3


def batcher(**kw) -> BatcherConfig:
    return BatcherConfig(dynamic_batching=True, **kw)


# --- queueing theory ---------------------------------------------------------------------------


@pytest.mark.parametrize(("rho", "n"), [(0.5, 200_000), (0.8, 400_000)])
def test_mm1_sojourn_mean_and_p99(rho: float, n: int):
    lam = rho * MU
    r = simulate(ServiceCurve({1: (1 / MU, 1 / MU)}), NO_BATCHING, OpenLoop(lam), n_requests=n, seed=1)
    # Sojourn time of M/M/1 is exponential with rate mu - lambda.
    assert r.mean_s == pytest.approx(1 / (MU - lam), rel=0.05)
    assert r.p99_s == pytest.approx(-math.log(0.01) / (MU - lam), rel=0.10)
    assert r.throughput_rps == pytest.approx(lam, rel=0.02)
    assert r.utilization[0] == pytest.approx(rho, rel=0.02)
    assert r.mean_batch == 1.0


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_md1_mean_wait(rho: float):
    lam = rho * MU
    r = simulate(
        ServiceCurve({1: (1 / MU, 0.0)}), NO_BATCHING, OpenLoop(lam), n_requests=200_000, seed=2
    )
    wait = r.mean_s - 1 / MU
    assert wait == pytest.approx(rho / (2 * MU * (1 - rho)), rel=0.05)  # Pollaczek-Khinchine


def _erlang_c(c: int, a: float) -> float:
    """Probability that an arrival waits in M/M/c with offered load a = lambda/mu."""
    head = sum(a**k / math.factorial(k) for k in range(c))
    tail = a**c / math.factorial(c) * c / (c - a)
    return tail / (head + tail)


@pytest.mark.parametrize("rho", [0.5, 0.8])
def test_mm2_mean_wait_is_erlang_c(rho: float):
    lam = rho * 2 * MU
    r = simulate(
        ServiceCurve({1: (1 / MU, 1 / MU)}),
        BatcherConfig(instances=2),
        OpenLoop(lam),
        n_requests=200_000,
        seed=1,
    )
    wait = r.mean_s - 1 / MU
    assert wait == pytest.approx(_erlang_c(2, lam / MU) / (2 * MU - lam), rel=0.10)
    assert r.utilization == pytest.approx((rho, rho), rel=0.02)


# --- Triton's batching rules, exactly ----------------------------------------------------------


def _every_ms(config: BatcherConfig, curve: ServiceCurve = TINY, n: int = 600):
    """Requests at 1, 2, 3, ... ms; no warmup (the pattern is periodic from the first)."""
    return simulate(curve, config, OpenLoop(1000.0, cv=0.0), n_requests=n, warmup=0.0)


def test_the_delay_closes_the_batch_counting_from_the_oldest_enqueue():
    # First request at 1 ms, delay 5.5 ms: the batch goes at 6.5 ms with the requests of 1..6 ms;
    # the next starts at 7 ms, and so on: every batch holds 6.
    r = _every_ms(batcher(max_batch_size=8, max_queue_delay_s=5.5 * MS))
    assert set(r.batch_sizes) == {6}
    waits = [5.5, 4.5, 3.5, 2.5, 1.5, 0.5]
    assert r.mean_s == pytest.approx(sum(waits) / 6 * MS + 1e-6, abs=1e-9)
    assert r.p50_s == pytest.approx(3.0 * MS + 1e-6, abs=1e-9)
    assert r.p99_s == pytest.approx(5.5 * MS + 1e-6, abs=1e-9)


def test_reaching_max_batch_size_closes_the_batch_at_once():
    # Without preferred sizes max_batch_size is the preferred one: the 8th request sends the batch
    # long before the 20 ms delay.
    r = _every_ms(batcher(max_batch_size=8, max_queue_delay_s=20 * MS))
    assert set(r.batch_sizes) == {8}
    assert r.p99_s == pytest.approx(7 * MS + 1e-6, abs=1e-9)
    assert r.mean_s == pytest.approx(3.5 * MS + 1e-6, abs=1e-9)


def test_a_preferred_size_closes_the_batch():
    r = _every_ms(batcher(max_batch_size=8, max_queue_delay_s=5.5 * MS, preferred_batch_sizes=(4,)))
    assert set(r.batch_sizes) == {4}
    assert r.mean_s == pytest.approx(1.5 * MS + 1e-6, abs=1e-9)


def test_no_delay_sends_what_is_queued():
    r = _every_ms(batcher(max_batch_size=8))
    assert set(r.batch_sizes) == {1}
    assert r.p99_s == pytest.approx(1e-6, abs=1e-12)


def test_an_instance_that_frees_takes_the_batch_formed_so_far():
    # 6 ms per batch, delay 2.5 ms. The first batch (1, 2, 3 ms) goes at 3.5 ms; while it runs
    # (to 9.5 ms) the requests of 4..9 ms wait past their delay, and the freed instance takes all
    # six at once; from then on, every 6 ms a batch of the 6 requests that came meanwhile.
    six_ms = ServiceCurve({1: (6 * MS, 0.0), 64: (6 * MS, 0.0)})
    r = _every_ms(batcher(max_batch_size=8, max_queue_delay_s=2.5 * MS), six_ms)
    assert r.batch_sizes[3] == 1
    assert set(r.batch_sizes) == {3, 6}
    # The request of 10 ms waits until 15.5 ms, then 6 ms of service.
    assert r.p99_s == pytest.approx(11.5 * MS, abs=1e-9)
    assert r.utilization[0] == pytest.approx(1.0, abs=0.01)


def test_requests_never_split_and_count_their_batch():
    # Two clients sending 4 inferences each: with max_batch_size 6 they cannot share a batch.
    curve = ServiceCurve({4: (10 * MS, 0.0), 8: (12 * MS, 0.0)})
    alone = simulate(curve, batcher(max_batch_size=6), ClosedLoop(2, request_batch=4), n_requests=200)
    assert set(alone.batch_sizes) == {4}
    together = simulate(curve, batcher(max_batch_size=8), ClosedLoop(2, request_batch=4), n_requests=200)
    assert set(together.batch_sizes) == {8}
    assert together.throughput_ips == pytest.approx(4 * together.throughput_rps)
    assert together.throughput_rps == pytest.approx(2 / (12 * MS), rel=1e-9)


def test_closed_loop_with_batching_is_exact():
    # 4 clients, delay 0, max_batch_size 8: every cycle is one batch of 4 (10 ms), then 1 ms of
    # client/RPC overhead before the clients send again.
    curve = ServiceCurve({1: (5 * MS, 0.0), 4: (10 * MS, 0.0)})
    r = simulate(curve, batcher(max_batch_size=8), ClosedLoop(4), n_requests=400, overhead_s=1 * MS)
    assert r.throughput_rps == pytest.approx(4 / (11 * MS), rel=1e-9)
    assert r.p50_s == pytest.approx(11 * MS, abs=1e-12)
    assert r.p99_s == pytest.approx(11 * MS, abs=1e-12)
    assert r.mean_batch == 4.0
    assert r.utilization[0] == pytest.approx(10 / 11, rel=1e-9)


def test_client_jitter_breaks_the_lockstep_that_starves_a_second_instance():
    # 2 clients, 2 instances, a short delay: exact waits keep the clients in lockstep, so they
    # always share one batch of 2 and one instance idles; drifting clients use both.
    curve = ServiceCurve({1: (10 * MS, 0.0), 2: (18 * MS, 0.0)})
    config = batcher(max_batch_size=8, max_queue_delay_s=0.1 * MS, instances=2)
    lockstep = simulate(curve, config, ClosedLoop(2), n_requests=400, overhead_s=1 * MS)
    assert lockstep.mean_batch == 2.0
    drifting = simulate(curve, config, ClosedLoop(2), n_requests=400, overhead_s=1 * MS, jitter=0.5)
    assert drifting.mean_batch < 1.2
    assert drifting.throughput_rps > 1.4 * lockstep.throughput_rps
    with pytest.raises(ValueError, match="jitter"):
        simulate(curve, config, ClosedLoop(2), n_requests=10, jitter=2.0)


def test_closed_loop_without_batching_queues_behind_the_other_clients():
    curve = ServiceCurve({1: (10 * MS, 0.0)})
    r = simulate(curve, NO_BATCHING, ClosedLoop(4), n_requests=400)
    assert r.throughput_rps == pytest.approx(100.0, rel=1e-9)
    assert r.p50_s == pytest.approx(40 * MS, abs=1e-12)
    assert r.p99_s == pytest.approx(40 * MS, abs=1e-12)
    assert r.mean_batch == 1.0


# --- queue policy and priorities -----------------------------------------------------------------

TEN_MS = ServiceCurve({1: (10 * MS, 0.0)})


def test_max_queue_size_rejects_at_enqueue():
    # The first executes at once; two wait; the last two find the queue full.
    arrivals = Replay((0.0, 0.1 * MS, 0.2 * MS, 0.3 * MS, 0.4 * MS))
    r = simulate(TEN_MS, batcher(max_batch_size=1, max_queue_size=2), arrivals, n_requests=5, warmup=0)
    assert r.rejected_share == pytest.approx(0.4)
    assert r.classes[0].completed == 3
    assert r.classes[0].rejected == 2


def test_default_timeout_reject():
    # At 10 ms the request of 1 ms is past its 5 ms timeout: rejected; the one of 8 ms runs.
    arrivals = Replay((0.0, 1 * MS, 8 * MS))
    config = batcher(max_batch_size=1, default_timeout_s=5 * MS)
    r = simulate(TEN_MS, config, arrivals, n_requests=3, warmup=0)
    assert r.rejected_share == pytest.approx(1 / 3)
    assert r.mean_s == pytest.approx((10 * MS + 12 * MS) / 2, abs=1e-12)


def test_default_timeout_delay_moves_the_request_behind():
    arrivals = Replay((0.0, 1 * MS, 8 * MS))
    config = batcher(max_batch_size=1, default_timeout_s=5 * MS, timeout_action=TimeoutAction.DELAY)
    r = simulate(TEN_MS, config, arrivals, n_requests=3, warmup=0)
    assert r.rejected_share == 0
    # 0 ms: 0-10; 8 ms (not expired): 10-20; the delayed one of 1 ms: 20-30.
    assert r.mean_s == pytest.approx((10 * MS + 12 * MS + 29 * MS) / 3, abs=1e-12)
    assert r.p99_s == pytest.approx((12 + 0.98 * 17) * MS, abs=1e-12)  # between 12 and 29 ms


@pytest.mark.parametrize(("override", "rejected"), [(True, 1 / 2), (False, 0.0)])
def test_a_shorter_request_timeout_counts_only_with_the_override(override: bool, rejected: float):
    arrivals = Replay((0.0, 6 * MS), timeout_s=2 * MS)  # default deadline 11 ms, own 8 ms
    config = batcher(max_batch_size=1, default_timeout_s=5 * MS, allow_timeout_override=override)
    r = simulate(TEN_MS, config, arrivals, n_requests=2, warmup=0)
    assert r.rejected_share == rejected


def test_a_high_priority_request_is_served_before_queued_low_priority_ones():
    low = Replay((0.0, 1 * MS, 2 * MS), name="low")  # priority 0: the default level, 2
    high = Replay((3 * MS,), priority=1, name="high")
    config = batcher(max_batch_size=1, priority_levels=2, default_priority_level=2)
    r = simulate(TEN_MS, config, [low, high], n_requests=4, warmup=0)
    by_name = {c.name: c for c in r.classes}
    assert by_name["high"].mean_s == pytest.approx(17 * MS, abs=1e-12)  # 10-20 ms
    # low: 0-10, then (after high) 20-30 and 30-40.
    assert by_name["low"].mean_s == pytest.approx((10 + 29 + 38) / 3 * MS, abs=1e-12)


def test_mixed_classes_report_each_class():
    curve = ServiceCurve({1: (1 * MS, 0.2 * MS), 8: (2 * MS, 0.3 * MS)})
    a, b = OpenLoop(200.0, name="a"), OpenLoop(100.0, request_batch=2, name="b")
    r = simulate(
        curve, batcher(max_batch_size=8, max_queue_delay_s=1 * MS), [a, b], n_requests=6000, seed=3
    )
    ra, rb = r.classes
    assert (ra.name, rb.name) == ("a", "b")
    assert ra.throughput_rps == pytest.approx(200.0, rel=0.05)
    assert rb.throughput_ips == pytest.approx(2 * rb.throughput_rps)
    assert r.throughput_ips == pytest.approx(ra.throughput_ips + rb.throughput_ips)
    assert ra.requests + rb.requests == r.requests


def test_contention_slows_concurrent_batches():
    alone = ServiceCurve({1: (10 * MS, 0.0)})
    shared = ServiceCurve({1: (10 * MS, 0.0)}, contention=(1.0, 2.0))
    config = BatcherConfig(instances=2)
    free = simulate(alone, config, ClosedLoop(2), n_requests=400)
    slowed = simulate(shared, config, ClosedLoop(2), n_requests=400)
    assert free.throughput_rps == pytest.approx(200.0, rel=1e-9)
    assert slowed.throughput_rps == pytest.approx(100.0, rel=0.02)


def test_same_seed_same_result():
    curve = ServiceCurve({1: (1 * MS, 0.5 * MS), 16: (4 * MS, 1 * MS)})
    config = batcher(max_batch_size=16, max_queue_delay_s=1 * MS, instances=2)
    first = simulate(curve, config, OpenLoop(2000.0), n_requests=2000, seed=7)
    assert simulate(curve, config, OpenLoop(2000.0), n_requests=2000, seed=7) == first
    assert simulate(curve, config, OpenLoop(2000.0), n_requests=2000, seed=8) != first


def test_duration_mode():
    r = simulate(TEN_MS, NO_BATCHING, OpenLoop(50.0, cv=0.0), duration_s=2.0, warmup=0.25)
    assert r.window_s == pytest.approx(1.5)
    assert r.throughput_rps == pytest.approx(50.0, rel=0.02)
    assert r.p99_s == pytest.approx(10 * MS)


@pytest.mark.parametrize(
    ("config", "arrivals", "message"),
    [
        (BatcherConfig(), OpenLoop(1.0, request_batch=2), "request_batch > 1 needs"),
        (batcher(max_batch_size=4), OpenLoop(1.0, request_batch=8), "exceeds max_batch_size"),
        (batcher(max_batch_size=4, priority_levels=2, default_priority_level=1),
         OpenLoop(1.0, priority=3), "priority 3"),
    ],
)  # fmt: skip
def test_simulate_refuses_what_triton_refuses(config, arrivals, message):
    with pytest.raises(ValueError, match=message):
        simulate(TEN_MS, config, arrivals, n_requests=10)


def test_config_validation():
    with pytest.raises(ValueError, match="preferred batch size 16"):
        batcher(max_batch_size=8, preferred_batch_sizes=(16,))
    with pytest.raises(ValueError, match="default_priority_level"):
        batcher(max_batch_size=8, priority_levels=2)
    with pytest.raises(ValueError, match="instances"):
        BatcherConfig(instances=0)
    assert batcher(max_batch_size=8, timeout_action="delay").timeout_action is TimeoutAction.DELAY  # type: ignore[arg-type]


# --- operating point -------------------------------------------------------------------------------

CURVE = ServiceCurve({1: (2 * MS, 0.3 * MS), 8: (5 * MS, 0.6 * MS), 32: (14 * MS, 1.5 * MS)})
CONFIG = batcher(max_batch_size=16, max_queue_delay_s=1 * MS, instances=2)


def test_operating_point_concurrency_meets_the_slo_and_grows_with_it():
    loads = []
    for slo in (10 * MS, 20 * MS, 40 * MS):
        load, result = operating_point(CURVE, CONFIG, slo_p99_s=slo)
        assert result.p99_s <= slo
        # One more client misses the SLO (or the knee is past: more clients, no more throughput).
        more = simulate(CURVE, CONFIG, ClosedLoop(int(load) + 1), n_requests=2000, seed=0)
        assert more.p99_s > slo or more.throughput_rps <= result.throughput_rps
        loads.append(load)
    assert loads == sorted(loads) and loads[0] >= 1


def test_operating_point_rate_meets_the_slo_within_the_precision():
    cap = capacity(CURVE, CONFIG)
    assert cap == pytest.approx(2 * 16 / CURVE.mean(16))
    previous = 0.0
    for slo in (10 * MS, 30 * MS):
        rate, result = operating_point(CURVE, CONFIG, slo_p99_s=slo, mode="rate")
        assert result.p99_s <= slo
        assert 0 < rate <= cap
        assert rate >= previous
        previous = rate
        # Near the knee p99 is noisy; well past it the SLO fails.
        higher = simulate(CURVE, CONFIG, OpenLoop(rate * 1.2), n_requests=2000, seed=0)
        assert higher.p99_s > slo or rate * 1.2 > cap


def test_operating_point_when_nothing_meets_the_slo():
    load, result = operating_point(CURVE, CONFIG, slo_p99_s=0.1 * MS)
    assert load == 0 and result.p99_s > 0.1 * MS


# --- the service curve -----------------------------------------------------------------------------


def test_service_curve_interpolates_and_extrapolates():
    curve = ServiceCurve({1: (1 * MS, 0.1 * MS), 5: (3 * MS, 0.9 * MS)})
    assert curve.points_used == (1, 5)
    assert curve.mean(3) == pytest.approx(2 * MS)
    assert curve.cv(3) == pytest.approx(0.2)  # cv 0.1 at 1, 0.3 at 5
    assert curve.mean(9) == pytest.approx(5 * MS)  # the line through the last two points
    assert curve.cv(9) == pytest.approx(0.3)
    # Never below the largest measured mean, even when the last two points slope down.
    assert ServiceCurve({1: (2 * MS, 0.0), 4: (1 * MS, 0.0)}).mean(16) == pytest.approx(1 * MS)
    # Below the smallest: the smallest's; one point: in proportion past it.
    assert ServiceCurve({4: (2 * MS, 0.0), 8: (3 * MS, 0.0)}).mean(1) == pytest.approx(2 * MS)
    assert ServiceCurve({2: (1 * MS, 0.0)}).mean(4) == pytest.approx(2 * MS)


def test_service_curve_sampling():
    import random

    rng = random.Random(0)
    assert ServiceCurve({1: (3 * MS, 0.0)}).sample(1, rng) == 3 * MS
    curve = ServiceCurve({1: (2 * MS, 1 * MS)})  # cv 0.5: the gamma path
    draws = [curve.sample(1, rng) for _ in range(20_000)]
    mean = sum(draws) / len(draws)
    std = math.sqrt(sum((d - mean) ** 2 for d in draws) / len(draws))
    assert mean == pytest.approx(2 * MS, rel=0.02)
    assert std == pytest.approx(1 * MS, rel=0.04)
    assert min(draws) > 0


def test_service_curve_contention_factor():
    assert ServiceCurve({1: (MS, 0.0)}).factor(3) == 1.0
    listed = ServiceCurve({1: (MS, 0.0)}, contention=(1.0, 1.5))
    assert (listed.factor(1), listed.factor(2), listed.factor(5)) == (1.0, 1.5, 1.5)
    assert ServiceCurve({1: (MS, 0.0)}, contention=lambda k: 1 + 0.1 * (k - 1)).factor(3) == 1.2


@pytest.mark.parametrize(
    ("points", "message"),
    [
        ({}, "no measured points"),
        ({0: (MS, 0.0)}, "batch size 0"),
        ({-2: (MS, 0.0)}, "batch size -2"),
        ({1: (0.0, 0.0)}, "mean service time at batch 1"),
        ({1: (-MS, 0.0)}, "mean service time at batch 1"),
        ({1: (MS, -1.0)}, "std at batch 1"),
    ],
)
def test_service_curve_validation(points, message):
    with pytest.raises(ValueError, match=message):
        ServiceCurve(points)
