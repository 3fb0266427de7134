"""The load generator's own cost and the client-bound verdict: real threads, a real CPU burner."""

import os
import subprocess
import sys
import threading
import time

import pytest

from tests.measure.test_interference import BURN
from tritontune.measure.client_cost import (
    CLIENT_LAG_LIMIT_S,
    LOOP_DEMAND_LIMIT,
    ClientCost,
    ClientProbe,
    ClientWindow,
    LoadThread,
    lag_p99,
    schedstat_seconds,
)

linux_only = pytest.mark.skipif(
    not os.path.exists(f"/proc/{os.getpid()}/task"), reason="schedstat is Linux's"
)

# A loop's slack and its core's burners are real: another test beside it would take that core.
pytestmark = pytest.mark.alone


def test_a_window_is_client_bound_only_when_the_loop_had_no_slack_and_it_showed():
    busy_and_late = ClientWindow(1.0, 0.9, 1000, LOOP_DEMAND_LIMIT, CLIENT_LAG_LIMIT_S)
    assert busy_and_late.bound
    assert not ClientWindow(1.0, 0.9, 1000, LOOP_DEMAND_LIMIT - 0.01, 0.050).bound  # slack left
    assert not ClientWindow(1.0, 0.9, 1000, 1.0, CLIENT_LAG_LIMIT_S / 2).bound  # no lag from it
    assert not ClientWindow(1.0, 0.9, 1000, 1.0, None).bound


def test_the_cost_over_windows_is_cpu_per_answered_request():
    windows = [
        ClientWindow(1.0, 0.30, 2000, 0.40, 0.001),
        ClientWindow(2.0, 0.50, 3000, 0.95, 0.004),
    ]
    cost = ClientCost.of(windows)
    assert cost.cpu_us_per_request == pytest.approx(0.80 / 5000 * 1e6)
    assert cost.cores == pytest.approx(0.80 / 3.0)
    assert cost.loop_demand == 0.95 and cost.lag_p99_s == 0.004
    assert cost.bound and cost.bound_windows == 1 and cost.windows == 2
    text = cost.describe()
    assert text is not None and "client-bound" in text and "1 of 2 windows" in text
    assert ClientCost.from_dict(cost.to_dict()).to_dict() == cost.to_dict()
    assert ClientCost.of([windows[0]]).describe() is None
    # one busy window of three does not make the level the client's; two of three do
    assert not ClientCost.of([windows[0], windows[1], windows[0]]).bound
    assert ClientCost.of([windows[1], windows[0], windows[1]]).bound
    assert ClientCost.of([ClientWindow(1.0, 0.1, 0, 0.1, None)]).cpu_us_per_request is None


def test_lag_p99_is_a_sample_that_happened():
    samples = [0.001] * 99 + [0.050]
    assert lag_p99(samples) == 0.050
    assert lag_p99([]) is None


def _server_of_arrivals(stop: threading.Event, ids: list[LoadThread], rate=1200, cost_s=0.0005):
    """A stand-in event loop: work items arrive at ``rate`` per second and each takes
    ``cost_s`` of CPU (60 % of a core); it sleeps until the next one when nothing is due. Starved
    of CPU, its backlog grows and it never sleeps, as a load generator's loop would."""
    ids.append(LoadThread.current())
    start, done = time.perf_counter(), 0
    while not stop.is_set():
        arrived = int((time.perf_counter() - start) * rate)
        if done < arrived:
            end = time.thread_time() + cost_s
            while time.thread_time() < end:
                pass
            done += 1
        else:
            time.sleep(max(0.0, start + (done + 1) / rate - time.perf_counter()))


def _demand_of_loop(pin_cpu: int | None, burner: bool) -> tuple[float, float]:
    """The (loop demand, run share) the probe reads for the stand-in loop over 1 s."""
    stop, ids = threading.Event(), []
    thread = threading.Thread(target=_server_of_arrivals, args=(stop, ids))
    hogs = []
    try:
        if burner:  # two of them: a third of the core is left, half of what the loop needs
            hogs = [
                subprocess.Popen(
                    ["taskset", "-c", str(pin_cpu), sys.executable, "-c", BURN.format(seconds=5)]
                )
                for _ in range(2)
            ]
            time.sleep(0.2)
        thread.start()
        while not ids:
            time.sleep(0.001)
        if pin_cpu is not None:
            os.sched_setaffinity(ids[0].tid, {pin_cpu})
        time.sleep(0.2)
        probe = ClientProbe(ids)
        before = schedstat_seconds(ids[0])
        time.sleep(1.0)
        window = probe.sample(requests=100, lags=[])
        after = schedstat_seconds(ids[0])
        assert before is not None and after is not None
        return window.loop_demand, (after[0] - before[0]) / window.wall_s
    finally:
        stop.set()
        thread.join()
        for hog in hogs:
            hog.kill()
            hog.wait()


@linux_only
@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to pin apart")
def test_a_starved_loop_has_no_slack_though_it_runs_less():
    cpu = max(os.sched_getaffinity(0))
    alone, _ = _demand_of_loop(cpu, burner=False)
    starved, run_share = _demand_of_loop(cpu, burner=True)
    # Alone it needs ~60 % of its core; sharing the core with two burners it runs about a third
    # of the time, yet it is never idle: running or waiting for the CPU. Busy time alone would
    # call it a third busy and miss it.
    assert alone < LOOP_DEMAND_LIMIT, alone
    assert starved >= LOOP_DEMAND_LIMIT, (starved, run_share)
    assert run_share < 0.6, run_share
