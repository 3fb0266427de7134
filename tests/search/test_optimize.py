"""The search loop (ask, measure, tell), driven through a fake session on a modelled server.

The thing under test is the loop: the budget, re-proposals, what a failure is blamed on, Ctrl-C
and what reaches the study. The measurement is a queueing model (see test_operating_point) whose
capacity grows with the config's ``max_batch_size``; configs and the study are real (the example
model's config built by tritontune's own variant code, an in-memory Optuna study).
"""

from __future__ import annotations

import subprocess
import threading
import time
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from tests.fakes import FakeSession
from tests.studies import read_study
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import InputError
from tritontune.hostinfo import this_worker
from tritontune.search.loop import Budget
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.space import Choice, SearchSpace
from tritontune.study.coordination import claim
from tritontune.study.handle import TuningStudy
from tritontune.study.storage import study_names
from tritontune.study.verdict import best_point

SPACE = SearchSpace(
    {
        "max_batch_size": Choice((4, 8, 16)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((100,)),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1, 2)),
    }
)


@pytest.fixture
def source(example_repository: Path) -> ModelSource:
    return load_model_source(example_repository, "mlp")


def settings(**overrides) -> SearchSettings:
    values = dict(
        slo_p99_s=0.05,
        trials=4,
        seed=3,
        storage=optuna.storages.InMemoryStorage(),
        study_name="s",
        sampler=optuna.samplers.RandomSampler(seed=3),
    )
    values.update(overrides)
    return SearchSettings(**values)


def test_search_records_typed_results_and_picks_the_highest_throughput(source):
    session = FakeSession(source)
    storage = optuna.storages.InMemoryStorage()
    result = run_search(session, SPACE, settings(trials=10, storage=storage))  # more than the space
    record = result.study
    assert len(record.results) == 6 and not record.failed
    assert record.best is not None and record.best.knobs["max_batch_size"] == 16
    assert record.baseline is not None and record.baseline.feasible
    playoff = record.playoff  # the top 3 and the baseline, interleaved
    assert playoff is not None and playoff.rounds == 3
    assert sorted(e.trial for e in playoff.entries if e.trial is not None) == sorted(
        r.number for r in record.results[:3]
    )
    assert playoff.baseline is not None and len(playoff.baseline.rounds) >= 3
    winner = best_point(record)
    assert winner is not None and winner.figures == "playoff" and winner.result.number == playoff.winner
    assert winner.point.throughput == winner.playoff.throughput.median
    assert result.improvement(record.best) == pytest.approx(
        record.best.throughput / record.baseline.throughput - 1
    )
    assert record.context.server_version == "2.51.0"
    assert record.context.model_files  # hashed for a new study
    assert result.stop_reason == "every one of the space's 6 configs was tried"
    # The ordered choice is stored snapped: the dashboard's param column shows 4, 8 or 16.
    stored = optuna.load_study(study_name="s", storage=storage).trials
    assert {t.params["max_batch_size"] for t in stored if "max_batch_size" in t.params} == {4, 8, 16}


def test_a_server_death_is_measured_again_not_blamed_on_the_config(source):
    session = FakeSession(source, kill={8: 1})
    record = run_search(session, SPACE, settings(trials=6)).study
    eight = [t for t in record.results if t.knobs["max_batch_size"] == 8]
    assert len(eight) == 2 and not record.failed  # both batch-8 configs completed
    assert sorted(t.server_restarts for t in eight) == [0, 1]
    assert session.restarts == 1


def test_a_config_that_brings_the_server_down_twice_fails_with_the_log(source):
    session = FakeSession(source, kill={16: 2})
    record = run_search(session, SPACE, settings(trials=6)).study
    (failed,) = [t for t in record.failed if t.knobs.get("max_batch_size") == 16]
    assert failed.error.startswith("brought the server down 2 times: tritonserver died")
    assert "Segfault" in failed.error and failed.server_restarts == 2
    assert len(record.results) == 5  # the search went on after it


def test_a_refused_config_fails_without_a_restart(source):
    session = FakeSession(source, refuse=4)
    record = run_search(session, SPACE, settings(trials=6)).study
    assert {t.knobs["max_batch_size"] for t in record.failed} == {4}
    assert all("refused" in t.error for t in record.failed)
    assert session.restarts == 0


def searched_at_random(source: ModelSource, space: SearchSpace, seed: int):
    """10 trials of ``space`` proposed by Optuna's random sampler, no playoff: the fake session
    (what it loaded) and the result."""
    session = FakeSession(source)
    sampler = optuna.samplers.RandomSampler(seed)
    result = run_search(
        session, space, settings(trials=10, sampler=sampler, playoff=PlayoffSettings(top=0))
    )
    return session, result


def test_reproposals_are_told_again_not_measured(source):
    space = SearchSpace({**SPACE.dimensions, "instance_count": Choice((1,))})
    session, result = searched_at_random(source, space, seed=0)
    record = result.study
    counted = [t for t in record.trials if t.counted]
    copies = [t for t in record.trials if t.duplicate_of is not None]
    assert len(counted) == 3  # the space has 3 configs
    assert len(session.loads) == 1 + 3  # the baseline, each config once (no playoff asked for)
    assert result.study.playoff is None and result.winner is not None
    assert result.winner.figures == "screening"
    for copy in copies:
        twin = record.trials[copy.duplicate_of]
        assert copy.params == twin.params and copy.throughput == twin.throughput
    assert result.stop_reason == "every one of the space's 3 configs was tried"


def test_a_config_differing_only_in_a_knob_that_changes_nothing_is_measured_once(source):
    """Without the dynamic batcher, batch sizes 4, 8 and 16 are one config (``effective_point``):
    it is measured once, and the other two points are told its result."""
    space = SearchSpace(
        {
            "max_batch_size": Choice((4, 8, 16)),
            "dynamic_batching": Choice((False, True)),
            "max_queue_delay": Choice((100,)),
            "preferred_batch_size": Choice(("none",)),
        }
    )
    session, result = searched_at_random(source, space, seed=1)
    record = result.study
    counted = [t for t in record.trials if t.counted]
    assert len(counted) == 4  # batching off once, and on at each of the 3 sizes
    assert len(session.loads) == 1 + 4  # the baseline, then each config once
    assert sum(t.knobs.get("dynamic_batching") is False for t in counted) == 1
    copies = [t for t in record.trials if t.duplicate_of is not None]
    unbatched = [c for c in copies if c.params["dynamic_batching"] is False]
    assert {c.params["max_batch_size"] for c in unbatched} | {
        t.params["max_batch_size"] for t in counted if t.params["dynamic_batching"] is False
    } == {4, 8, 16}  # the sampler did propose the other sizes
    for copy in unbatched:
        assert copy.throughput == record.trials[copy.duplicate_of].throughput


def test_ctrl_c_marks_the_trial_interrupted_and_the_resume_measures_it_first(source):
    storage = optuna.storages.InMemoryStorage()
    session = FakeSession(source)
    session.interrupt_after = 12  # the baseline and a trial or two, then Ctrl-C mid-trial
    with pytest.raises(KeyboardInterrupt):
        run_search(session, SPACE, settings(storage=storage, trials=3))
    record = read_study(optuna.load_study(study_name="s", storage=storage))
    (cut,) = [t for t in record.trials if t.interrupted]
    assert not cut.counted
    session.interrupt_after = None
    resumed = run_search(session, SPACE, settings(storage=storage, trials=3))
    assert resumed.resumed
    first_new = [t for t in resumed.study.trials if t.number > cut.number][0]
    assert first_new.params == cut.params and first_new.counted
    assert len(resumed.study.results) == 3


def test_budget_stops_on_trials_deadline_and_repeats():
    budget = Budget(trials=2, deadline=None, space_size=None)
    assert not budget.spent(0)
    budget.finished(1.0, counted=1)
    assert budget.eta() == pytest.approx(1.0)
    assert budget.spent(1, running=1)  # another worker's trial in flight will count
    budget.finished(3.0, counted=2)
    assert budget.spent(2) and budget.stop_reason is None
    late = Budget(trials=None, deadline=time.monotonic() - 1, space_size=None)
    assert late.spent(0) and late.stop_reason is None and late.eta() == 0.0
    stuck = Budget(trials=None, deadline=None, space_size=None)
    for _ in range(50):
        stuck.repeated()
    assert stuck.spent(0) and "proposed only known configs 50 times" in stuck.stop_reason
    assert stuck.eta() is None


def test_two_workers_share_one_study_without_measuring_a_config_twice(source):
    storage = optuna.storages.InMemoryStorage()
    sessions = [FakeSession(source), FakeSession(source)]
    errors: list[BaseException] = []

    def work(session: FakeSession, seed: int) -> None:
        try:
            run_search(
                session,
                SPACE,
                settings(storage=storage, trials=5, sampler=optuna.samplers.RandomSampler(seed)),
            )
        except BaseException as err:  # surfaced by the assertion below
            errors.append(err)

    threads = [threading.Thread(target=work, args=(s, i)) for i, s in enumerate(sessions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors
    record = read_study(optuna.load_study(study_name="s", storage=storage))
    counted = [t for t in record.trials if t.counted]
    assert len(counted) == 5 and not record.lost and not record.running
    points = [tuple(sorted(t.params.items())) for t in counted]
    assert len(set(points)) == 5  # distinct configs, none measured twice
    assert record.baseline is not None and record.playoff is not None
    # one worker measured the baseline (its first config); the playoff re-measures it later
    assert sum(1 for s in sessions if s.variants and s.variants[0] == Variant()) == 1


def test_a_trial_left_running_by_a_dead_worker_is_measured_again(source, tmp_path: Path):
    storage = optuna.storages.InMemoryStorage()
    run_search(FakeSession(source), SPACE, settings(storage=storage, trials=1))
    study = optuna.load_study(study_name="s", storage=storage)
    dead = subprocess.Popen(["true"])
    dead.wait()
    first = study.trials[0].params  # the orphan draws another config (else it is answered
    other = {**first, "instance_count": 3 - first["instance_count"]}  # from trial 0, unmeasured)
    study.enqueue_trial(other)
    orphan = study.ask()  # as a SIGKILLed worker leaves it: RUNNING, its worker gone
    point = SPACE.suggest(orphan)
    TuningStudy.of(study).save_point(orphan, point)
    TuningStudy.of(study).save_worker(orphan, replace(this_worker(), pid=dead.pid))

    record = run_search(FakeSession(source), SPACE, settings(storage=storage, trials=2)).study
    assert [t.number for t in record.lost] == [orphan.number] and not record.running
    redo = [t for t in record.trials if t.counted and t.number > orphan.number]
    assert redo and redo[0].params == point  # the lost config was measured first


def test_a_worker_on_other_hardware_is_refused_unless_it_has_its_own_group(source):
    storage = optuna.storages.InMemoryStorage()
    run_search(FakeSession(source), SPACE, settings(storage=storage, trials=1))
    study = optuna.load_study(study_name="s", storage=storage)
    study.set_user_attr("host", {"cpu_model": "Other CPU 9000", "cpu_count": 64, "gpus": []})
    with pytest.raises(InputError, match=r"measured on other hardware \(CPU .*--host-group NAME"):
        run_search(FakeSession(source), SPACE, settings(storage=storage, trials=2))
    grouped = run_search(FakeSession(source), SPACE, settings(storage=storage, trials=1, host_group="b"))
    assert grouped.study_name == "s@b" and grouped.baseline is not None


def test_a_claim_goes_to_one_worker_and_a_dead_holder_loses_it():
    storage = optuna.storages.InMemoryStorage()
    optuna.create_study(storage=storage, study_name="s")
    me = this_worker()
    assert claim(storage, "s", "baseline", me) and not claim(storage, "s", "baseline", me)
    dead = subprocess.Popen(["true"])
    dead.wait()
    assert claim(storage, "s", "confirm-3", replace(me, pid=dead.pid))
    assert claim(storage, "s", "confirm-3", me)  # its holder is gone: taken over
    assert study_names(storage) == ["s"]  # claims are not listed as studies
