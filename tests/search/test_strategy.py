"""``--strategy auto``: predict for a compute-bound model, TPE otherwise, chosen once a study."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest

from tests.fakes import SimulatedSession
from tests.search.test_predicted import CURVES, SLO, SPACE, predicted_search
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.measure.loadgen import LoadMode
from tritontune.search.optimize import SearchProgress, run_search
from tritontune.search.strategy import (
    COMPUTE_BOUND_RATIO,
    Strategy,
    StrategyChoice,
    choose_strategy,
)
from tritontune.study.figures import OperatingPoint
from tritontune.study.handle import TuningStudy


def baseline(ratio: float | None) -> OperatingPoint:
    return OperatingPoint(
        slo_p99_s=SLO, load_mode=LoadMode.CONCURRENCY, feasible=True, load=4, throughput=40.0,
        p50_s=0.02, p99_s=0.03, p99_deviation=0.0, throughput_deviation=0.0, avg_batch_size=1.0,
        compute_ratio=ratio,
    )  # fmt: skip


def test_auto_predicts_only_a_compute_bound_single_model():
    # MiniLM's request computes ~50x as long as it spends outside Triton; the MLP's ~1x
    busy, idle = baseline(53.0), baseline(1.24)
    assert choose_strategy(Strategy.AUTO, busy, pipeline=False).strategy == Strategy.PREDICT
    at_idle = choose_strategy(Strategy.AUTO, idle, pipeline=False)
    assert at_idle.strategy == Strategy.TPE and "1.2x" in at_idle.why
    edge = baseline(COMPUTE_BOUND_RATIO)
    assert choose_strategy(Strategy.AUTO, edge, pipeline=False).strategy == Strategy.PREDICT
    # a pipeline is not predicted; nor is a config whose compute time was not measured
    assert choose_strategy(Strategy.AUTO, busy, pipeline=True).strategy == Strategy.TPE
    for unknown in (baseline(None), None):
        assert choose_strategy(Strategy.AUTO, unknown, pipeline=False).strategy == Strategy.TPE
    # what was asked for is what runs
    for asked in (Strategy.TPE, Strategy.PREDICT):
        assert choose_strategy(asked, idle, pipeline=False).strategy == asked


def test_the_compute_ratio_is_kept_with_the_operating_point():
    point = baseline(53.45678)
    assert OperatingPoint.from_dict(point.to_dict()).compute_ratio == pytest.approx(53.457)
    assert "compute_ratio" not in baseline(None).to_dict()  # older studies read as before
    assert OperatingPoint.from_dict(baseline(None).to_dict()).compute_ratio is None


@pytest.fixture
def source(example_repository: Path) -> ModelSource:
    return load_model_source(example_repository, "mlp")


def test_auto_on_a_compute_bound_server_predicts_and_a_resume_keeps_the_choice(source):
    # the modelled server's requests spend no time outside it: its baseline is compute-bound
    storage = optuna.storages.InMemoryStorage()
    settings = dataclasses.replace(predicted_search(storage, "a", trials=3), strategy=Strategy.AUTO)
    said: list[StrategyChoice] = []
    result = run_search(
        SimulatedSession(source, CURVES), SPACE, settings, SearchProgress(on_strategy=said.append)
    )
    assert result.study.baseline is not None
    assert (result.study.baseline.compute_ratio or 0) >= COMPUTE_BOUND_RATIO
    assert [c.strategy for c in said] == [Strategy.PREDICT] and "compute-bound" in said[0].why
    assert result.study.strategy == "predict"
    assert all(trial.predicted is not None for trial in result.study.results)
    assert TuningStudy.of(optuna.load_study(study_name="a", storage=storage)).calibration()

    # resumed: the study's choice, not a new one
    said.clear()
    again = dataclasses.replace(settings, trials=4)
    run_search(SimulatedSession(source, CURVES), SPACE, again, SearchProgress(on_strategy=said.append))
    assert [(c.strategy, c.why) for c in said] == [(Strategy.PREDICT, "chosen when the study began")]
