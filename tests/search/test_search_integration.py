"""Real searches on the example model against the real bundled tritonserver (small budgets)."""

import dataclasses
import json
import os
import signal
import threading
from pathlib import Path

import optuna
import pytest

from tests.conftest import SmallStudies, orphaned_stubs
from tests.measuring import FAST
from tritontune.config.repository import load_model_source
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.search.optimize import SearchProgress, SearchSettings, run_search
from tritontune.search.playoff import HOLD_MARGIN, MAX_EXTRA_ROUNDS, PlayoffSettings
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.search.strategy import COMPUTE_BOUND_RATIO, Strategy, StrategyChoice
from tritontune.serving.session import TuningSession
from tritontune.study.handle import TuningStudy

pytestmark = pytest.mark.integration

SLO = 0.050
SMALL_SPACE = SearchSpace(
    {
        "max_batch_size": Choice((16, 64)),
        "dynamic_batching": Choice((False, True)),
        "max_queue_delay": IntRange(200, 4000, log=True),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1,)),
        "intra_op_thread_count": Choice((1,)),
    }
)


#: Where a test checks what happens to trials (resume, a failing config, a killed server), not
#: which config wins: no playoff (its rounds re-load every finalist, ~30 s here).
NO_PLAYOFF = PlayoffSettings(top=0)


def settings(tmp_path: Path, **overrides) -> SearchSettings:
    values = dict(
        slo_p99_s=SLO,
        trials=4,
        seed=7,
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        study_name="it",
        measure=FAST,
        playoff=PlayoffSettings(top=2, rounds=2, measure=FAST),  # a real playoff, kept short
        # What is under test is the loop (resume, faults), not how far the MLP goes on 2 cores:
        # ramps of 1, 2, 4, 8 (to 64 they took twice as long).
        max_load=8,
    )
    values.update(overrides)
    return SearchSettings(**values)


@pytest.fixture(scope="module")
def session(example_repository: Path):
    """One server for the module's searches (each test's search loads its own configs)."""
    with TuningSession(load_model_source(example_repository, "mlp"), settings=FAST) as s:
        yield s


def test_search_finds_a_config_at_least_as_good_as_the_baseline(small_studies: SmallStudies, session):
    """The session's tight study (tests/conftest.py: 3 trials and a 3-round playoff under a 50 ms
    p99 SLO, shared with the export, check and report tests) as run_search returned it."""
    result, space = small_studies.tight_result, small_studies.tight_space
    assert small_studies.tight_slo_s == SLO
    assert len(result.results) == 3
    assert result.baseline is not None and result.baseline.feasible
    best = result.best
    assert best is not None and best.operating_point is not None
    assert best.throughput >= result.baseline.throughput
    playoff, winner = result.playoff, result.winner
    assert playoff is not None and winner is not None and winner.figures == "playoff"
    assert winner.point.feasible and winner.point.p99_s <= SLO * (1 - HOLD_MARGIN)  # it held
    # 3 rounds, and up to MAX_EXTRA_ROUNDS more where its order against another was uncertain
    assert winner.playoff is not None and 3 <= len(winner.playoff.rounds) <= 3 + MAX_EXTRA_ROUNDS
    assert playoff.baseline is not None and playoff.baseline.rounds  # measured like a candidate
    assert winner.playoff.gain is not None  # within the same rounds

    # Re-measured independently at the load that held, the winner meets the SLO.
    session.load(space.to_variant(winner.result.params))
    again = session.measure(LoadSpec.concurrency(int(winner.point.load)), FAST)
    for _ in range(2):  # as the tool does: a figure taken on a disturbed machine is taken again
        if again.interference is None or not again.interference.result_disturbed:
            break
        again = session.measure(LoadSpec.concurrency(int(winner.point.load)), FAST)
    assert again.error_count == 0
    # It held with a margin in the playoff; one more figure on a shared machine moves by +-15 %
    # (CI once saw 51.9 ms against 50): bounded, not exact.
    assert again.latency.p99 <= SLO * 1.2

    # The study is the source of truth: every trial carries its operating point and config.
    study = optuna.load_study(study_name=small_studies.tight, storage=small_studies.storage)
    for trial in study.trials:
        assert "operating_point" in trial.user_attrs
        assert 'backend: "onnxruntime"' in trial.user_attrs["config_pbtxt"]
    assert study.user_attrs["baseline"]["feasible"]


def test_interrupted_search_resumes_to_the_full_count(session, tmp_path: Path):
    calls = {"starts": 0, "baselines": 0}

    def interrupt_third(n, total, point):
        calls["starts"] += 1
        if calls["starts"] == 3:
            raise KeyboardInterrupt

    def count_baseline():
        calls["baselines"] += 1

    # What is under test is which trials count and which config is measured again: one load
    # level a ramp (concurrency 1, the floor and the cap) is enough for that. With
    # --strategy auto: a request of the example MLP computes about as long (~0.4 ms) as it
    # spends outside Triton, so TPE searches it, and the resumed search keeps that.
    cfg = settings(tmp_path, trials=3, playoff=NO_PLAYOFF, max_load=1, strategy=Strategy.AUTO)
    with pytest.raises(KeyboardInterrupt):
        run_search(
            session,
            SMALL_SPACE,
            cfg,
            SearchProgress(on_trial_start=interrupt_third, on_baseline_start=count_baseline),
        )
    study = optuna.load_study(study_name="it", storage=cfg.storage)
    states = [t.state for t in study.trials]
    assert states.count(optuna.trial.TrialState.COMPLETE) == 2
    interrupted = [t for t in study.trials if t.user_attrs.get("interrupted")]
    assert len(interrupted) == 1

    assert study.user_attrs["strategy"] == "tpe"
    assert 0 < study.user_attrs["baseline"]["compute_ratio"] < COMPUTE_BOUND_RATIO

    said: list[StrategyChoice] = []
    result = run_search(
        session,
        SMALL_SPACE,
        cfg,
        SearchProgress(on_baseline_start=count_baseline, on_strategy=said.append),
    )
    assert [c.strategy for c in said] == [Strategy.TPE] and "study began" in said[0].why
    assert result.resumed
    assert calls["baselines"] == 1  # the baseline is not measured again
    assert len(result.results) == 3
    assert result.trials_this_run == 1
    # the point cut off by Ctrl-C is the one measured on resume
    resumed_trial = max(result.results, key=lambda r: r.number)
    assert resumed_trial.params == interrupted[0].user_attrs["point"]


def test_config_that_fails_to_load_does_not_stop_the_search(session, tmp_path: Path):
    space = SearchSpace(
        {
            "max_batch_size": Choice((64,)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((1000,)),
            # onnxruntime can't make a thread pool that large: the model fails in initialize()
            "intra_op_thread_count": Choice((1, 10**12)),
        }
    )
    # One load level a ramp (concurrency 1): what is under test is the config that fails to load.
    cfg = settings(tmp_path, trials=4, seed=3, playoff=NO_PLAYOFF, max_load=1)
    result = run_search(session, space, cfg)
    # Two distinct configs exist: both get measured, re-proposals are not measured again.
    assert result.stop_reason == "every one of the space's 2 configs was tried"
    assert len(result.failed) == 1 and len(result.results) == 1
    assert "failed to load" in (result.failed[0].error or "")
    assert "TypeError" in (result.failed[0].error or "")  # Triton's own reason is kept
    assert result.best is not None and result.best.params["intra_op_thread_count"] == 1
    session.server.launcher.check_alive()


def test_poisson_search_finds_an_arrival_rate(session, tmp_path: Path):
    space = SearchSpace(
        {
            "max_batch_size": Choice((64,)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((1000,)),
            "instance_count": Choice((1,)),
            "intra_op_thread_count": Choice((1,)),
        }
    )
    result = run_search(
        session,
        space,
        # up to 2048 req/s: a doubling or two from half the unloaded rate, then the cap (the
        # default cap, 256x the start, took a ramp and its bisections for the baseline and the trial)
        settings(tmp_path, trials=1, load_mode=LoadMode.RATE, max_load=2048, playoff=NO_PLAYOFF),
    )
    assert result.load_mode == "rate"
    best = result.best
    assert best is not None and best.operating_point is not None
    op = best.operating_point
    assert op.load_mode == "rate" and op.load > 0
    # open loop: what got done is close to what was offered at the operating point
    assert op.throughput >= 0.9 * op.load
    assert any(not level.meets_slo for level in op.levels) or op.load >= 256


def test_a_server_killed_from_outside_does_not_fail_the_config(session, tmp_path: Path):
    """The server is SIGKILLed while a trial switches to its config: the server is restarted and
    the same config measured again, so the trial completes (Optuna learns nothing false)."""
    killed: list[int] = []

    def kill_during_second_trial(n, total, point):
        if n == 2 and not killed:
            pid = session.server.launcher.pid
            killed.append(pid)
            threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()

    progress = SearchProgress(on_trial_start=kill_during_second_trial)
    # One load level a ramp (concurrency 1, over 1 s: the kill lands inside the second trial).
    cfg = settings(tmp_path, trials=2, playoff=NO_PLAYOFF, max_load=1)
    result = run_search(session, SMALL_SPACE, cfg, progress)
    assert killed and session.server.launcher.pid != killed[0]
    # the killed server's backend stubs were stopped on restart
    assert orphaned_stubs(session.server.work_dir) == []
    assert result.restarts == 1 and not result.failed
    record = result.study
    second = [t for t in record.trials if t.counted][1]
    assert second.server_restarts == 1 and second.operating_point is not None


def test_predictions_from_a_real_calibration_and_what_follows_a_miss(session, tmp_path: Path):
    """--strategy predict on the real server. Both settings (1 and 2 instances) are calibrated
    through Triton's batch statistics, and the first config's prediction, made before it was
    measured, is within 2x of its measurement (the machine is shared: the band is wide on
    purpose). Then the calibration of the setting not measured is made 20x too optimistic: the
    config proposed next (that setting's) misses its prediction by far more than its band, and
    the proposal after it is another setting's."""
    space = SearchSpace(
        {
            "max_batch_size": Choice((16,)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((200, 2000)),
            "preferred_batch_size": Choice(("none",)),
            "instance_count": Choice((1, 2)),
            "intra_op_thread_count": Choice((1,)),
        }
    )
    first = settings(tmp_path, trials=1, strategy=Strategy.PREDICT, playoff=NO_PLAYOFF)
    found_first = run_search(session, space, first)
    (trial,) = found_first.study.results
    assert trial.predicted is not None and trial.predicted["calibrated"]
    assert 0.5 <= trial.predicted["raw_throughput"] / trial.throughput <= 2.0
    study = TuningStudy.open_existing(first.storage, "it")
    calibration = study.calibration()
    assert calibration is not None and len(calibration.settings) == 2
    for calibrated in calibration.settings.values():
        # batches of several sizes were seen, and a larger one took longer
        assert len(calibrated.points) >= 3
        assert calibrated.points[-1].mean_s > calibrated.points[0].mean_s
    # the setting the first trial did not measure is made 20x too optimistic (which setting the
    # honest calibration ranks first depends on the machine)
    measured = json.loads(trial.predicted["setting"])["instance_count"]
    (other,) = [s for s in calibration.settings.values() if s.setting["instance_count"] != measured]
    faster = tuple(dataclasses.replace(p, mean_s=p.mean_s / 20) for p in other.points)
    study.save_calibration(dataclasses.replace(other, points=faster, overhead_s=0.0, path_s=0.0))
    found = run_search(session, space, dataclasses.replace(first, trials=3))
    proposed = sorted((t for t in found.study.results if t.number >= 1), key=lambda t: t.number)
    assert len(proposed) == 2
    missed, after = proposed
    assert missed.predicted is not None and after.predicted is not None
    assert json.loads(missed.predicted["setting"])["instance_count"] == other.setting["instance_count"]
    assert abs(missed.throughput / missed.predicted["throughput"] - 1) > missed.predicted["band"]
    assert after.predicted["setting"] != missed.predicted["setting"]
