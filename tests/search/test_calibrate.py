"""Calibration's load levels (:mod:`tritontune.search.calibrate`), on the simulated server."""

from __future__ import annotations

import dataclasses

import pytest

from tests.fakes import SimulatedSession
from tests.search.test_predicted import CURVES, SPACE
from tritontune.config.repository import load_model_source
from tritontune.measure.stats import LatencyStats
from tritontune.predict.calibration import SettingCalibration
from tritontune.search.calibrate import (
    _load_at_slo,
    _only_slow_batches,
    _took_the_slo,
    calibrate_setting,
    calibration_loads,
)


def test_the_load_at_the_slo_comes_from_the_two_largest_batches():
    """MiniLM in INT8 (2026-11-28): batches of 1, 2 and 3 took 27, 52 and 79 ms; under a 100 ms
    SLO the batch that takes it is 4, formed at concurrency 8 by one instance (a batch running and
    one as large waiting), at 16 by two."""
    samples = [(1, 20, 20 * 0.0274), (2, 12, 12 * 0.0525), (3, 8, 8 * 0.0788)]
    assert _load_at_slo(samples, 1, 0.100) == 8
    assert _load_at_slo(samples, 2, 0.100) == 16
    assert _load_at_slo(samples[:1], 1, 0.100) is None  # one size: no line yet
    flat = [(1, 20, 20 * 0.030), (2, 12, 12 * 0.030)]
    assert _load_at_slo(flat, 1, 0.100) is None  # a line that does not rise says nothing


def test_a_level_whose_largest_batches_already_took_the_slo_is_not_measured():
    """VGG16 on 2 cores, 1 s SLO (2026-11-29): one instance formed batches of 3 in 1.06 s at
    concurrency 4, twice; at 16 its largest batches are 8 or more. Two instances formed a batch of
    6 in 2.07 s at 8, once (maybe a busy moment), and again in 2.01 s at 32: at 128 their largest
    batches are 32 or more."""
    one = [(1, 9, 9 * 0.356), (1, 3, 3 * 0.348), (3, 2, 2 * 1.056)]
    assert _only_slow_batches(16, 1, one, 1.0)
    assert not _only_slow_batches(4, 1, one, 1.0)  # batches of 2 and more: maybe below 3
    assert not _only_slow_batches(16, 1, one, 1.1)  # nothing took 1.1 s
    two = [(1, 10, 10 * 0.338), (1, 16, 16 * 0.332), (2, 1, 0.711), (1, 12, 12 * 0.336), (6, 1, 2.074)]
    assert not _only_slow_batches(32, 2, two, 1.0)  # one slow execution only
    two += [(3, 2, 2 * 0.992), (6, 1, 2.008)]
    assert _only_slow_batches(128, 2, two, 1.0)
    assert not _only_slow_batches(16, 2, two, 1.0)  # batches of 4: below 6


@pytest.fixture
def session(example_repository) -> SimulatedSession:
    """A server whose batches of 1 to 64 take 4 to 65 ms, one batch of all that is queued."""
    return SimulatedSession(load_model_source(example_repository, "mlp"), CURVES)


def ladder_of(bench: SimulatedSession, slo: float | None) -> tuple[list[int], SettingCalibration]:
    """The loads one instance's calibration (batches up to 64) measured on ``bench``, and it."""
    loads: list[int] = []
    done = calibrate_setting(
        bench, SPACE, {"instance_count": 1}, max_batch_size=64, slo_p99_s=slo,
        on_level=lambda load, _measured: loads.append(load),
    )  # fmt: skip
    return loads, done


def test_a_level_took_the_slo_when_its_largest_batches_did_or_enough_slow_ones_together():
    """At concurrency 16 on MiniLM in INT8 (100 ms SLO), batches of 10-15 ran once or twice each
    at 300-470 ms: no size 3 times, but together past the SLO, 3 times and more."""
    frequent = [(1, 30, 30 * 0.027), (3, 5, 5 * 0.105)]
    assert _took_the_slo(frequent, 0.100)
    assert not _took_the_slo(frequent, 0.110)
    rare = [(1, 30, 30 * 0.027), (12, 1, 0.33), (13, 2, 2 * 0.35), (14, 1, 0.37)]
    assert _took_the_slo(rare, 0.100)  # 4 executions of batches over 100 ms in all
    one_slow = [(1, 30, 30 * 0.027), (2, 10, 10 * 0.053), (4, 1, 0.40)]
    assert not _took_the_slo(one_slow, 0.100)  # one execution, maybe a busy moment


def test_the_last_level_is_aimed_at_the_batch_that_takes_the_slo(session: SimulatedSession):
    """Batches of 1 to 64 take 4 to 65 ms here (and this server forms one batch of all that is
    queued). Under a 20 ms SLO the ladder would go from 16 to 64 (batches of 64, 65 ms each); the
    level after 16 is aimed at the batches that take 20 ms instead, and is the last."""
    loads: list[int] = []
    aimed = calibrate_setting(
        session, SPACE, {"instance_count": 1}, max_batch_size=64, slo_p99_s=0.020,
        on_level=lambda load, _measured: loads.append(load),
    )  # fmt: skip
    assert calibration_loads(1, 64) == [1, 4, 16, 64, 128]
    assert loads[:3] == [1, 4, 16] and 16 < loads[3] < 64 and len(loads) == 4, loads
    assert aimed.levels == 4
    assert 0.020 <= aimed.points[-1].mean_s < 0.065  # past the SLO, short of batches of 64
    # Without an SLO nothing is aimed: the whole ladder.
    whole: list[int] = []
    calibrate_setting(
        session, SPACE, {"instance_count": 1}, max_batch_size=64,
        on_level=lambda load, _measured: whole.append(load),
    )  # fmt: skip
    assert whole == [1, 4, 16, 64, 128]


@pytest.mark.parametrize("slo", [0.005, 0.5])
def test_an_slo_below_every_batch_or_above_them_all_keeps_the_ladder_bounds(
    session: SimulatedSession, slo: float
):
    loads, _ = ladder_of(session, slo)
    ladder = calibration_loads(1, 64)
    assert loads[0] == 1 and set(loads) <= set(range(1, ladder[-1] + 1))
    assert loads == sorted(set(loads))  # always rising, never twice
    if slo > 0.1:
        assert loads == ladder  # no batch takes it: the whole ladder


def test_a_slow_models_single_requests_are_measured_until_they_ran_enough(example_repository):
    """A level that held two executions (VGG16 in INT8 on 2 cores: 1.2 s a request) is measured
    again at concurrency 1 until its batches of one ran 3 times (at most 3 levels there): with
    fewer, no point of the curve is kept and the setting can't be calibrated."""
    slow = SimulatedSession(load_model_source(example_repository, "mlp"), CURVES, requests=3)
    loads, calibrated = ladder_of(slow, 0.5)
    assert loads[:3] == [1, 1, 4], loads  # 2 executions a level here
    assert calibrated.points[0].batch_size == 1 and calibrated.points[0].executions >= 3


class FewExecutions(SimulatedSession):
    """Above concurrency 1, windows that held no execution of the server's (a model that runs a
    few batches a second, in 0.4-1.6 s windows): only the latencies tell what the level formed."""

    def measure(self, load, settings=None):
        measured = super().measure(load, settings)
        if load.value > 1 and measured.server is not None:
            measured = dataclasses.replace(
                measured, server=dataclasses.replace(measured.server, batches=())
            )
        return measured


def test_a_level_whose_requests_wait_twice_the_slo_is_the_last(example_repository):
    """Batches of 1 take 4 ms here, and concurrency 16 serves about 890 requests a second: by
    Little's law they wait 18 ms, past twice an 8 ms SLO. Its batches took the SLO, though its
    windows held none of them, and no level above it is measured."""
    loads, _ = ladder_of(FewExecutions(load_model_source(example_repository, "mlp"), CURVES), 0.008)
    assert loads == [1, 4, 16], loads


class NoReplies(SimulatedSession):
    """Above concurrency 1, windows that held no reply at all (batches that outlast a window)."""

    def measure(self, load, settings=None):
        measured = super().measure(load, settings)
        if load.value > 1:
            none = LatencyStats(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
            measured = dataclasses.replace(measured, latency=none, server=None)
        return measured


def test_a_level_whose_windows_held_no_reply_is_the_last(example_repository):
    """Its batches outlast its windows: the next level, with four times as many requests in
    flight, would leave the server a backlog to compute past the request timeout."""
    loads, _ = ladder_of(NoReplies(load_model_source(example_repository, "mlp"), CURVES), 0.5)
    assert loads == [1, 4], loads
