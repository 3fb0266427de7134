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
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.batcher import ClosedLoop, ServiceCurve, operating_point, simulate
from tritontune.predict.calibration import BatchPoint, Calibration, Derivation, SettingCalibration
from tritontune.predict.config import batcher_config_of
from tritontune.predict.ranking import Corrections, Predicted, RankedSpace, Ranking
from tritontune.search.grid import all_points
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.predicted import choose_next, missed_setting
from tritontune.search.space import Choice, SearchSpace, effective_point
from tritontune.search.strategy import Strategy
from tritontune.search.whatif import at_slo, best_for, parse_assignments, study_model, what_if
from tritontune.study.coordination import point_key
from tritontune.study.figures import OperatingPoint
from tritontune.study.handle import TuningStudy
from tritontune.study.records import StudyIdentity, TrialResult

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
    # and its walk over loads started at the predicted load (corrected), not at concurrency 1
    errors = []
    for trial in record.results:
        assert trial.predicted is not None and trial.predicted["setting"]
        errors.append(abs(trial.predicted["raw_throughput"] / trial.throughput - 1))
        start = max(1, round(trial.predicted["load"] * trial.predicted["correction"]))
        assert trial.operating_point is not None
        loads = [level.load for level in trial.operating_point.levels]
        assert start in loads and (start == 1 or 1 not in loads), loads
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


@pytest.mark.parametrize("strategy", ["predict", "auto"])
def test_a_workload_search_refuses_the_predict_strategy(example_repository: Path, strategy: str):
    from typer.testing import CliRunner

    from tritontune.cli import app

    workload = example_repository.parent / "workloads" / "interactive-batch.yaml"
    shown = CliRunner().invoke(
        app,
        ["search", "-r", str(example_repository), "-m", "mlp", "--workload", str(workload),
         "--strategy", strategy],
    )  # fmt: skip
    assert shown.exit_code != 0
    assert "--strategy: not with --workload yet: a workload search uses TPE" in shown.output


#: A CPU space of instances and threads on a 2-core modelled server; ``max_threads: none`` puts
#: the oversubscribed configs back (4 instances x 2 threads: the joint calibration).
CORES_SPACE = SearchSpace(
    {
        "max_batch_size": Choice((1, 4, 16)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((100, 3000)),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1, 2, 4)),
        "intra_op_thread_count": Choice((1, 2)),
    }
)


def shared_cores_curve(config) -> ServiceCurve:
    """The truth: threads speed an execution up by ``threads ** 0.8``; instances and threads
    asking more than the 2 cores stretch every execution by ``(asked / 2) ** 1.7``."""
    instances = batcher_config_of(config).instances
    parameter = config.parameters.get("intra_op_thread_count")
    threads = int(parameter.string_value) if parameter is not None else 1
    busy = threads**0.8
    stretch = max(1.0, instances * busy / 2) ** 1.7
    return ServiceCurve({b: (m / busy * stretch, 0.1 * m / busy * stretch) for b, m in ONE.items()})


def test_an_oversubscribed_setting_is_answered_within_its_band(source, tmp_path: Path, monkeypatch):
    """The modelled server has contention in its truth; the calibration (one-knob settings and
    the joint one) and the answer for 2 instances x 2 threads, never calibrated itself."""
    from typer.testing import CliRunner

    from tritontune.cli import app
    from tritontune.hostinfo import HostInfo

    monkeypatch.setattr(
        "tritontune.search.predicted.describe_host", lambda: HostInfo("modelled", cpu_count=2)
    )
    url = f"sqlite:///{tmp_path / 'c.db'}"
    session = SimulatedSession(source, shared_cores_curve)
    run_search(session, CORES_SPACE, predicted_search(url, "c", trials=2))
    study = TuningStudy.open_existing(url, "c")
    calibration = study.calibration()
    assert calibration is not None and calibration.cores == 2
    joint = {"instance_count": 4, "intra_op_thread_count": 2}
    assert calibration.has(joint) and len(calibration.settings) == 5
    model = study_model(study)
    wanted = {"instance_count": 2, "intra_op_thread_count": 2, "max_batch_size": 16}
    (answer,) = what_if(model, wanted, [32])
    assert answer.derivation == Derivation.CONTENTION and not answer.calibrated
    config = batcher_config_of(model.build(answer.point))
    truth = simulate(
        shared_cores_curve(model.build(answer.point)), config, ClosedLoop(32), n_requests=4000
    )
    assert answer.throughput == pytest.approx(truth.throughput_ips, rel=answer.band)
    # as independent knobs (the composition before the contention model) it was far outside
    independent = Calibration(calibration.reference)
    independent.settings = dict(calibration.settings)
    composed = simulate(
        independent.predict({"instance_count": 2, "intra_op_thread_count": 2}).curve,
        config,
        ClosedLoop(32),
        n_requests=4000,
    )
    assert composed.throughput_ips > (1 + answer.band) * truth.throughput_ips

    shown = CliRunner().invoke(
        app,
        ["predict", "--study", "c", "--storage", url, "--set", "instance_count=2",
         "--set", "intra_op_thread_count=2", "--set", "max_batch_size=16", "--load", "32"],
    )  # fmt: skip
    assert shown.exit_code == 0, shown.output
    assert "shared cores" in shown.output


def result_of(number: int, setting: str, predicted: float, measured: float, band: float):
    """A measured proposal as the study keeps it."""
    point = OperatingPoint(SLO, LoadMode.CONCURRENCY, True, 4, measured, 0.005, 0.01, 0.0, 0.0, 4.0)
    return TrialResult(
        number=number,
        params={},
        knobs={},
        operating_point=point,
        config_pbtxt="",
        duration_s=1.0,
        predicted={
            "setting": setting,
            "throughput": predicted,
            "raw_throughput": predicted,
            "band": band,
        },
    )


def test_a_miss_corrects_the_settings_sharing_its_cores_and_waits_for_another_setting():
    int8 = '{"instance_count":2,"intra_op_thread_count":2,"precision":"int8"}'
    fp32 = '{"instance_count":2,"intra_op_thread_count":2,"precision":"fp32"}'
    alone = '{"instance_count":1,"intra_op_thread_count":2,"precision":"fp32"}'
    corrections = Corrections({int8: [0.4]})
    # the same split of the cores at another precision takes the miss's correction; another
    # split only the median of all (here the same figure), and says so with a wider band
    assert corrections.factor(fp32) == pytest.approx(0.4)
    assert corrections.band(fp32, 0.35) == 0.15
    assert corrections.band(alone, 0.35) == 0.35
    assert Corrections({int8: [0.4], alone: [1.0]}).factor(fp32) == pytest.approx(0.4)
    # a composed setting's miss (its split calibrated, its precision's ratio wrong) is carried
    # over to settings composed alike at any split, not to other precisions at its split
    four_int8 = '{"instance_count":4,"intra_op_thread_count":1,"precision":"int8"}'
    composed_miss = Corrections({int8: [0.4], alone: [1.0]}, composed={int8})
    assert composed_miss.factor(fp32) == 1.0  # the median of the others: alone's, no correction
    assert composed_miss.factor(four_int8) == pytest.approx(0.4)
    assert composed_miss.band(four_int8, 0.35) == 0.15
    assert composed_miss.band(fp32, 0.35) == 0.35
    read = Corrections.of([({"setting": int8, "raw_throughput": 100, "derivation": "composed"}, 40)])
    assert read.composed == {int8} and read.by_setting == {int8: [0.4]}

    missed = [result_of(0, alone, 100, 99, 0.25), result_of(1, int8, 300, 120, 0.25)]
    assert missed_setting(missed) == int8
    assert missed_setting([*missed, result_of(2, alone, 100, 101, 0.25)]) is None
    assert missed_setting(missed[:1]) is None  # within its band

    def predicted(setting: str, throughput: float, size: int) -> Predicted:
        return Predicted(
            {"max_batch_size": size, "s": setting}, setting, 4, throughput, 0.01, Derivation.MEASURED
        )

    ranking = Ranking([predicted(int8, 500, 16), predicted(alone, 150, 4)], 2, 2, 0.0)
    choice = choose_next(ranking, Corrections(), set(), 0, missed=int8)
    assert choice is not None and choice[0].setting == alone
    choice = choose_next(ranking, Corrections(), set(), 0)
    assert choice is not None and choice[0].setting == int8
    # a config measured already, but for a batch size that changes nothing without the batcher
    twin = {"max_batch_size": 4, "dynamic_batching": False, "s": int8}
    larger = Predicted({**twin, "max_batch_size": 64}, int8, 4, 500, 0.01, Derivation.MEASURED)
    unbatched = Ranking([larger, predicted(alone, 150, 4)], 2, 2, 0.0)
    choice = choose_next(unbatched, Corrections(), {point_key(effective_point(twin))}, 0)
    assert choice is not None and choice[0].setting == alone
    only = Ranking([predicted(int8, 500, 16)], 1, 1, 0.0)  # nothing else open: proposed anyway
    choice = choose_next(only, Corrections(), set(), 0, missed=int8)
    assert choice is not None and choice[0].setting == int8

    # exploring: a split of the cores never measured teaches most, then a precision never
    # measured; another precision (or graph level) at a measured split teaches nothing new
    measured = Corrections({int8: [0.4]})
    one_int8 = '{"instance_count":1,"intra_op_thread_count":2,"precision":"int8"}'
    assert measured.novelty(int8) == 0
    assert measured.novelty(fp32) == 1  # a measured split, a new precision
    assert measured.novelty(one_int8) == 2  # a new split, a measured precision
    assert measured.novelty(alone) == 3
    novel = Ranking([predicted(alone, 90, 4)], 1, 1, 0.0)
    exploit = choose_next(ranking, measured, set(), 0, novel=novel)
    explore = choose_next(ranking, measured, set(), 1, novel=novel)  # every 2nd proposal
    assert exploit is not None and exploit[0].setting == int8
    assert explore is not None and explore[0].setting == alone

    # exploiting: a setting never measured, predicted within its band (here the 15 % carried
    # over from the measured setting sharing its split) of a measured setting's next config, is
    # measured first; further off, the measured setting's config
    basic = '{"graph":"basic","instance_count":2,"intra_op_thread_count":2,"precision":"int8"}'
    best = Ranking([predicted(int8, 200, 16), predicted(int8, 199, 4)], 2, 2, 0.0)
    close = Ranking([predicted(basic, 175, 16)], 1, 1, 0.0)
    choice = choose_next(best, Corrections({int8: [1.0]}), set(), 0, unmeasured=close)
    assert choice is not None and choice[0].setting == basic
    far = Ranking([predicted(basic, 165, 16)], 1, 1, 0.0)
    choice = choose_next(best, Corrections({int8: [1.0]}), set(), 0, unmeasured=far)
    assert choice is not None and choice[0].setting == int8
    choice = choose_next(best, Corrections(), set(), 0, unmeasured=close)  # nothing measured
    assert choice is not None and choice[0].setting == int8


def test_the_ranking_is_redone_with_the_corrections_and_keeps_its_simulations(source):
    session = SimulatedSession(source, shared_cores_curve)
    calibration = Calibration({"instance_count": 1, "intra_op_thread_count": 1}, cores=2)
    for instances, threads in ((1, 1), (2, 1), (4, 1), (1, 2)):
        config = session.build(
            CORES_SPACE.to_variant({"instance_count": instances, "intra_op_thread_count": threads})
        )
        curve = shared_cores_curve(config)
        calibration.add(
            SettingCalibration(
                {"instance_count": instances, "intra_op_thread_count": threads},
                tuple(BatchPoint(b, curve.mean(b), 10) for b in ONE),
                cv=0.1,
                overhead_s=0.0,
            )
        )
    ranked = RankedSpace(
        all_points(CORES_SPACE),
        calibration,
        lambda point: session.build(CORES_SPACE.to_variant(point)),
        slo_p99_s=SLO,
        load_mode=LoadMode.CONCURRENCY,
        max_load=512,
    )
    first = ranked.rank(keep=3)
    simulated = first.simulated
    top = first.predicted[0].setting
    again = ranked.rank(lambda key: 0.1 if key == top else 1.0, keep=3)
    assert again.predicted[0].setting != top  # the corrected setting fell
    assert again.simulated >= simulated  # earlier simulations kept, new ones only where reached
    assert ranked.rank(keep=3).predicted == first.predicted


def test_a_pipeline_search_refuses_the_predict_strategy_before_any_server(tmp_path: Path):
    import time

    from typer.testing import CliRunner

    from tests.pipelines import write_pipeline
    from tritontune.cli import app

    repository = write_pipeline(tmp_path / "repo")
    started = time.monotonic()
    shown = CliRunner().invoke(
        app,
        ["search", "-r", str(repository), "-m", "pipe", "--slo-p99", "50ms",
         "--strategy", "predict", "--storage", f"sqlite:///{tmp_path / 's.db'}"],
    )  # fmt: skip
    assert shown.exit_code != 0
    assert "a pipeline's configs are not predicted yet" in shown.output
    assert "server" not in shown.output.lower()  # refused before anything was launched
    assert time.monotonic() - started < 10  # a launched server would take longer


def test_calibration_stops_rising_once_a_batch_takes_the_slo(source):
    from tritontune.search.calibrate import calibrate_setting, calibration_loads

    session = SimulatedSession(source, CURVES)
    whole = calibrate_setting(session, SPACE, {"instance_count": 1}, max_batch_size=64)
    assert whole.levels == len(calibration_loads(1, 64)) == 5  # 1, 4, 16, 64, 128
    # a batch of 64 takes 65 ms: with a 20 ms SLO the level that formed them is the last
    short = calibrate_setting(session, SPACE, {"instance_count": 1}, max_batch_size=64, slo_p99_s=0.02)
    assert short.levels < whole.levels
    assert short.points[-1].mean_s >= 0.02  # what stopped it was measured


#: Precisions and graph levels on the modelled server (one instance).
PRECISE_SPACE = SearchSpace(
    {
        "max_batch_size": Choice((1, 4, 16)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((100,)),
        "preferred_batch_size": Choice(("none",)),
        "precision": Choice(("fp32", "fp16", "int8_static")),
        "graph_optimization": Choice(("all", "basic")),
    }
)


def precise_curve(config) -> ServiceCurve:
    """The truth: INT8 static is 4x faster than FP32 at graph level ``all`` and 2x slower at
    ``basic`` (its integer kernels need the fusions); the other knobs compose."""
    from tritontune.config.variant import precision_of

    precision = precision_of(config)
    basic = config.optimization.graph.level == -1
    factor = {"fp32": 1.0, "fp16": 0.9, "int8_static": 0.25}[precision]
    if basic:
        factor = 2.0 if precision == "int8_static" else factor * 1.1
    return ServiceCurve({b: (m * factor, 0.1 * m * factor) for b, m in ONE.items()})


def test_the_other_knobs_are_calibrated_in_the_fastest_precision(source):
    from tritontune.hostinfo import this_worker
    from tritontune.search.predicted import calibrate_space

    study = TuningStudy.create_or_resume(
        optuna.storages.InMemoryStorage(),
        "p",
        identity=StudyIdentity("mlp", SLO, LoadMode.CONCURRENCY),
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    calibrate_space(study, SimulatedSession(source, precise_curve), PRECISE_SPACE, worker=this_worker())
    calibration = study.calibration()
    assert calibration is not None
    slow = {"precision": "int8_static", "graph_optimization": "basic"}
    # each precision at level all, then the other level in the fastest precision only
    assert calibration.has(slow) and len(calibration.settings) == 4
    predicted = calibration.predict(slow)
    assert predicted.measured
    assert predicted.curve.mean(4) == pytest.approx(2.0 * ONE[4], rel=0.2)  # not 0.25 x 1.1
