"""Ranking given points by their predicted operating points (tritontune.predict.ranking), and
the corrections measurements make."""

from __future__ import annotations

import pytest

from tritontune.config.model_config import parse_config_text
from tritontune.config.variant import apply_variant
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.calibration import BatchPoint, Calibration, SettingCalibration
from tritontune.predict.ranking import Corrections, RankedSpace
from tritontune.search.grid import all_points
from tritontune.search.space import Choice, SearchSpace

ONE = {1: 0.004, 4: 0.007, 16: 0.018, 64: 0.065}
SLO = 0.05


def test_measurements_correct_the_ranking():
    calibration = Calibration({"instance_count": 1})
    calibration.add(
        SettingCalibration(
            {"instance_count": 1},
            tuple(BatchPoint(b, m, 10) for b, m in ONE.items()),
            cv=0.1,
            overhead_s=0.0,
        )
    )
    base = parse_config_text('name: "m" max_batch_size: 64 input [] output []')
    space = SearchSpace(
        {
            "max_batch_size": Choice((4, 64)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((100,)),
            "instance_count": Choice((1,)),
        }
    )
    ranking = RankedSpace(
        all_points(space),
        calibration,
        lambda point: apply_variant(base, space.to_variant(point)),
        slo_p99_s=SLO,
        load_mode=LoadMode.CONCURRENCY,
    ).rank()
    assert [p.point["max_batch_size"] for p in ranking.predicted] == [64, 4]
    corrections = Corrections({ranking.predicted[0].setting: [0.5, 0.6]})
    assert corrections.factor(ranking.predicted[0].setting) == pytest.approx(0.55)
    assert corrections.factor("another setting") == pytest.approx(0.55)  # the median of all
    assert Corrections({"s": [0.9, 1.1]}).factor("s") == 1.0  # within the noise: no correction
    assert Corrections().band("any") == 0.25


def test_corrections_are_measured_over_predicted_throughput_of_configs_with_a_prediction():
    predicted = {"setting": "s", "throughput": 220.0, "raw_throughput": 200.0}
    corrections = Corrections.of([(predicted, 100.0), (None, 50.0), ({"setting": "t"}, 10.0)])
    assert corrections.by_setting == {"s": [0.5]}
