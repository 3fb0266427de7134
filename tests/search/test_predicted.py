"""``--strategy predict`` on a modelled server whose truth is known.

The server is the batcher simulator itself with a known service curve per instance count
(``tests.fakes.SimulatedSession``), two instances slower per execution than one (they share the
cores). The things under test are calibration through the bench, the ranking, the proposals in
the one loop and the corrections, not the simulator.
"""

from __future__ import annotations

import statistics
from pathlib import Path

import optuna
import pytest

from tests.fakes import SimulatedSession
from tritontune.config.model_config import parse_config_text
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.config.variant import apply_variant
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.batcher import ClosedLoop, ServiceCurve, operating_point, simulate
from tritontune.predict.calibration import BatchPoint, Calibration, SettingCalibration
from tritontune.predict.config import batcher_config_of
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.predicted import Strategy
from tritontune.search.ranking import Corrections, all_points, dimension_values, rank_space
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.search.whatif import at_slo, best_for, parse_assignments, study_model, what_if
from tritontune.study.handle import TuningStudy

ONE = {1: 0.004, 4: 0.007, 16: 0.018, 64: 0.065}
CURVES = {
    1: ServiceCurve({b: (m, 0.1 * m) for b, m in ONE.items()}),
    2: ServiceCurve({b: (1.6 * m, 0.16 * m) for b, m in ONE.items()}),
}
SPACE = SearchSpace(
    {
        "max_batch_size": Choice((1, 4, 16, 64)),
        "dynamic_batching": Choice((False, True)),
        "max_queue_delay": Choice((100, 3000)),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1, 2)),
    }
)
SLO = 0.05


def predicted_search(storage, name: str, trials: int) -> SearchSettings:
    """A --strategy predict search on the modelled server (no playoff: not what is tested)."""
    return SearchSettings(
        slo_p99_s=SLO,
        trials=trials,
        storage=storage,
        study_name=name,
        strategy=Strategy.PREDICT,
        playoff=PlayoffSettings(top=0),
        max_load=512,
    )


@pytest.fixture
def source(example_repository: Path) -> ModelSource:
    return load_model_source(example_repository, "mlp")


def truth(session: SimulatedSession) -> dict[str, float]:
    """Every config's true operating point (by the same simulator, with the true curves)."""
    figures = {}
    for point in all_points(SPACE):
        config = batcher_config_of(session.build(SPACE.to_variant(point)))
        load, result = operating_point(CURVES[config.instances], config, slo_p99_s=SLO, max_load=512)
        figures[str(sorted(point.items()))] = result.throughput_ips if load else 0.0
    return figures


def test_the_space_is_enumerated_as_the_sampler_proposes_it():
    points = list(all_points(SPACE))
    # batching off: 4 sizes x 2 instances; on: 4 x 2 delays x 2 instances
    assert len(points) == 8 + 16
    assert all("max_queue_delay" not in p for p in points if not p["dynamic_batching"])
    assert dimension_values("max_queue_delay", IntRange(20, 25_000, log=True))[::7] == (20, 25_000)


def test_predict_finds_the_best_config_with_few_measurements(source):
    session = SimulatedSession(source, CURVES)
    storage = optuna.storages.InMemoryStorage()
    settings = predicted_search(storage, "p", trials=4)
    result = run_search(session, SPACE, settings)
    best_true = max(truth(session).values())
    record = result.study
    assert len(record.results) == 4
    assert record.best is not None and record.best.throughput >= 0.9 * best_true
    # every trial kept what was predicted of it, and the prediction was close to the measurement
    errors = []
    for trial in record.results:
        assert trial.predicted is not None and trial.predicted["setting"]
        errors.append(abs(trial.predicted["raw_throughput"] / trial.throughput - 1))
    assert statistics.median(errors) < 0.15
    # the calibration is in the study: both instance counts, several batch sizes each
    study = TuningStudy.of(optuna.load_study(study_name="p", storage=storage))
    calibration = study.calibration()
    assert calibration is not None and len(calibration.settings) == 2
    assert all(len(s.points) >= 3 for s in calibration.settings.values())

    # a resumed search reuses the calibration: no calibration config is loaded again
    calibrations = sum(1 for v in session.variants if v.max_queue_delay_us == 0)
    again = run_search(session, SPACE, SearchSettings(**{**settings.__dict__, "trials": 6}))
    assert sum(1 for v in session.variants if v.max_queue_delay_us == 0) == calibrations
    assert len(again.study.results) == 6


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
    ranking = rank_space(
        space,
        calibration,
        lambda point: apply_variant(base, space.to_variant(point)),
        slo_p99_s=SLO,
        load_mode=LoadMode.CONCURRENCY,
    )
    assert [p.point["max_batch_size"] for p in ranking.predicted] == [64, 4]
    corrections = Corrections({ranking.predicted[0].setting: [0.5, 0.6]})
    assert corrections.factor(ranking.predicted[0].setting) == pytest.approx(0.55)
    assert corrections.factor("another setting") == pytest.approx(0.55)  # the median of all
    assert Corrections({"s": [0.9, 1.1]}).factor("s") == 1.0  # within the noise: no correction
    assert Corrections().band("any") == 0.25


def test_what_if_answers_come_from_the_study_alone(source, tmp_path: Path):
    from typer.testing import CliRunner

    from tritontune.cli import app

    url = f"sqlite:///{tmp_path / 'p.db'}"
    settings = predicted_search(url, "p", trials=3)
    run_search(SimulatedSession(source, CURVES), SPACE, settings)
    model = study_model(TuningStudy.open_existing(url, "p"))
    low, high = what_if(model, {"max_batch_size": 16, "instance_count": 1}, [2, 32])
    assert low.point["max_batch_size"] == 16 and low.calibrated
    assert low.p99_s < high.p99_s and low.throughput < high.throughput
    # the truth at concurrency 32: batches of up to 16 on one instance
    config = batcher_config_of(model.build(low.point))
    truth_high = simulate(CURVES[1], config, ClosedLoop(32), n_requests=4000).throughput_ips
    assert high.throughput == pytest.approx(truth_high, rel=high.band + 0.1)
    at = at_slo(model, {"instance_count": 2})
    assert at.p99_s <= SLO and at.point["instance_count"] == 2
    tighter = best_for(model, SLO / 5, top=3)
    assert len(tighter) == 3 and all(a.p99_s <= SLO / 5 for a in tighter)
    with pytest.raises(InputError, match="unknown knob"):
        parse_assignments(model.space, ["batch=3"])
    assert parse_assignments(model.space, ["max_queue_delay=2ms"]) == {"max_queue_delay": 2000}

    shown = CliRunner().invoke(
        app,
        ["predict", "--study", "p", "--storage", url, "--set", "max_batch_size=16", "--load", "2,32"],
    )
    assert shown.exit_code == 0, shown.output
    assert "predicted (p, SLO p99 <= 50ms)" in shown.output and "calibrated" in shown.output
    refused = CliRunner().invoke(app, ["predict", "--study", "p", "--storage", url, "--set", "x"])
    assert refused.exit_code != 0 and "expected KNOB=VALUE" in refused.output


def test_predict_needs_a_calibrated_study(source, tmp_path: Path):
    from typer.testing import CliRunner

    from tritontune.cli import app

    url = f"sqlite:///{tmp_path / 't.db'}"
    settings = SearchSettings(
        slo_p99_s=SLO,
        trials=1,
        storage=url,
        study_name="t",
        sampler=optuna.samplers.RandomSampler(seed=1),
        playoff=PlayoffSettings(top=0),
    )
    run_search(SimulatedSession(source, CURVES), SPACE, settings)
    shown = CliRunner().invoke(app, ["predict", "--study", "t", "--storage", url, "--load", "4"])
    assert shown.exit_code != 0 and "search it with --strategy predict first" in shown.output


def test_the_report_compares_prediction_and_measurement(source, tmp_path: Path):
    from tritontune.report.html import write_report

    url = f"sqlite:///{tmp_path / 'r.db'}"
    settings = predicted_search(url, "r", trials=3)
    run_search(SimulatedSession(source, CURVES), SPACE, settings)
    data = write_report(TuningStudy.open_existing(url, "r"), tmp_path / "r.html")
    assert len(data.predictions) == 3
    error = data.prediction_error
    assert error is not None and error[0] < 0.15
    html = (tmp_path / "r.html").read_text()
    assert "Prediction against measurement" in html and "fig-prediction" in html


def test_a_workload_search_refuses_the_predict_strategy(example_repository: Path):
    from typer.testing import CliRunner

    from tritontune.cli import app

    workload = example_repository.parent / "workloads" / "interactive-batch.yaml"
    shown = CliRunner().invoke(
        app,
        ["search", "-r", str(example_repository), "-m", "mlp", "--workload", str(workload),
         "--strategy", "predict"],
    )  # fmt: skip
    assert shown.exit_code != 0
    assert "--strategy: not with --workload yet" in shown.output
