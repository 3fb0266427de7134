import math

import numpy as np
import pytest

from tritontune.measure.stats import (
    LatencyStats,
    WindowSummary,
    is_stable,
    percentile_of_sorted,
    relative_deviation,
    spread,
)


def test_percentiles_are_observed_values():
    samples = np.arange(1, 101) / 1000.0  # 1..100 ms
    stats = LatencyStats.from_samples(samples)
    assert stats.count == 100
    # perf_analyzer's index int(p/100 * (n-1) + 0.5): p50 -> int(50.0) = 50 -> 51 ms,
    # p90 -> int(89.6) = 89 -> 90 ms, p99 -> int(98.51) = 98 -> 99 ms (numpy's "higher": 100 ms)
    assert stats.p50 == pytest.approx(0.051)
    assert stats.p90 == pytest.approx(0.090)
    assert stats.p99 == pytest.approx(0.099)
    assert stats.max == pytest.approx(0.100)
    assert stats.mean == pytest.approx(0.0505)
    assert stats.p50 <= stats.p90 <= stats.p95 <= stats.p99 <= stats.p999 <= stats.max
    assert set(stats.to_dict()) >= {"p50", "p99", "p999", "max", "count"}


def test_empty_sample_is_nan_not_zero():
    stats = LatencyStats.from_samples([])
    assert stats.count == 0
    assert math.isnan(stats.p99)


def test_relative_deviation():
    assert relative_deviation([100, 100, 100]) == 0
    assert relative_deviation([90, 100, 110]) == pytest.approx(0.1)
    assert relative_deviation([5]) == 0
    assert relative_deviation([0, 0]) == float("inf")


def test_percentile_index_is_perf_analyzers():
    ordered = np.arange(10, dtype=np.float64)  # index int(p/100 * 9 + 0.5)
    assert percentile_of_sorted(ordered, 50) == 5  # 4.5 + 0.5 -> 5
    assert percentile_of_sorted(ordered, 95) == 9  # 8.55 + 0.5 -> 9
    assert percentile_of_sorted(ordered, 90) == 8  # 8.1 + 0.5 -> 8
    assert percentile_of_sorted(np.array([7.0]), 99) == 7


def test_spread_is_max_over_min():
    assert spread([100, 105, 110]) == pytest.approx(0.1)
    assert spread([1]) == 0
    assert spread([0, 1]) == float("inf")
    assert spread([float("nan"), 1]) == float("inf")


def test_stability_is_perf_analyzers_max_over_min():
    # within 10 % of the mean (the old rule would pass) but max/min = 1.22: perf_analyzer says no
    assert not is_stable([window(900), window(1000), window(1100)], count=3, tolerance=0.1)
    assert is_stable([window(1000), window(1050), window(1099)], count=3, tolerance=0.1)
    # mean latency by the same rule; p99 gets twice the tolerance
    slow_mean = [window(1000, mean=0.010), window(1000, mean=0.0112)] * 2
    assert not is_stable(slow_mean, count=3, tolerance=0.1)
    p99_within = [window(1000, p99=0.020), window(1000, p99=0.0238)] * 2
    assert is_stable(p99_within, count=3, tolerance=0.1)
    p99_over = [window(1000, p99=0.020), window(1000, p99=0.0242)] * 2
    assert not is_stable(p99_over, count=3, tolerance=0.1)


def window(throughput: float, mean: float = 0.01, p99: float = 0.02) -> WindowSummary:
    return WindowSummary(duration=1, completed=100, throughput=throughput, mean_latency=mean, p99=p99)


def test_stable_when_last_windows_agree():
    windows = [window(50), window(1000), window(1010), window(995)]
    assert is_stable(windows, count=3, tolerance=0.1)
    assert not is_stable(windows[:3], count=3, tolerance=0.1)  # warming-up window in the last 3


def test_tail_swing_is_not_stable():
    windows = [window(1000, p99=0.02), window(1000, p99=0.02), window(1000, p99=0.04)]
    assert not is_stable(windows, count=3, tolerance=0.1)


def test_too_few_windows():
    assert not is_stable([window(1), window(1)], count=3, tolerance=0.1)


def test_server_split_from_counters():
    from tritontune.measure.measurement import ServerSplit
    from tritontune.server.client import ModelStatsSnapshot

    split = ServerSplit.from_delta(
        ModelStatsSnapshot(
            success_count=10,
            inference_count=10,
            execution_count=4,
            queue_ns=10 * 2_000_000,
            compute_infer_ns=10 * 1_000_000,
        )
    )
    assert split.avg_batch_size == pytest.approx(2.5)
    assert split.avg_queue_s == pytest.approx(0.002)
    assert split.avg_compute_s == pytest.approx(0.001)
    empty = ServerSplit.from_delta(ModelStatsSnapshot())
    assert empty.avg_batch_size == 0 and empty.avg_queue_s == 0


def test_surely_over_needs_more_past_the_line_than_chance_gives():
    from tritontune.measure.stats import surely_over

    # 1 % allowed: P(X >= 3 | 5) ~ 1e-5, P(X >= 3 | 50) = 1.4 %, P(X >= 4 | 50) = 0.16 %
    assert surely_over(3, 5, 0.01, 0.01)
    assert not surely_over(3, 50, 0.01, 0.01)
    assert surely_over(4, 50, 0.01, 0.01)
    assert not surely_over(0, 5, 0.01, 0.01)
    assert not surely_over(3, 0, 0.01, 0.01)
    # thousands of replies: no overflow, and the line sits near the share
    assert not surely_over(60, 5000, 0.01, 0.01)
    assert surely_over(80, 5000, 0.01, 0.01)
    assert surely_over(1, 1, 0.0, 0.01)
