import multiprocessing
import time
from dataclasses import replace
from pathlib import Path

import optuna
import pytest

import tritontune.study.coordination as coordination
from tests.studies import make_study, point, read_study
from tritontune.errors import InputError
from tritontune.hostinfo import this_worker
from tritontune.measure.loadgen import LoadMode
from tritontune.search.optimize import default_study_name
from tritontune.search.space import DIMENSIONS
from tritontune.study.figures import OperatingPoint
from tritontune.study.handle import TuningStudy
from tritontune.study.records import (
    RecordedRequestShape,
    StudyContext,
    StudyIdentity,
    WorkloadIdentity,
)
from tritontune.study.storage import open_storage
from tritontune.study.verdict import best_point, gain_over_baseline

IDENTITY = StudyIdentity(model="mlp", slo_p99_s=0.05, load_mode=LoadMode.CONCURRENCY)


def test_default_name():
    assert default_study_name("mlp", 0.05, "concurrency") == "mlp-p99-50ms-concurrency"


def test_storage_that_cannot_be_opened(tmp_path: Path):
    with pytest.raises(InputError, match="--storage sqlite:////nonexistent/dir/x.db: cannot be opened"):
        open_storage("sqlite:////nonexistent/dir/x.db")
    with pytest.raises(InputError, match="--storage nosuchdb://x: cannot be opened"):
        open_storage("nosuchdb://x")


def _open_after(barrier, url: str) -> None:
    barrier.wait()
    open_storage(url)


def test_workers_creating_one_new_sqlite_file_at_once_all_open_it(tmp_path: Path):
    # Every worker creates Optuna's tables and stamps its schema version; the losers of that race
    # must find the winner's tables, not exit (before the fix: 3 of 6 rounds of 4 failed).
    context = multiprocessing.get_context("fork")
    for round_ in range(3):
        url = f"sqlite:///{tmp_path / f'race-{round_}.db'}"
        barrier = context.Barrier(4)
        workers = [context.Process(target=_open_after, args=(barrier, url)) for _ in range(4)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(60)
        assert [w.exitcode for w in workers] == [0, 0, 0, 0]


def test_resume_checks_identity(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    sampler = optuna.samplers.RandomSampler(seed=0)
    study = TuningStudy.create_or_resume(url, "s", identity=IDENTITY, sampler=sampler)
    assert not study.resumed and study.read().identity.model == "mlp"
    again = TuningStudy.create_or_resume(url, "s", identity=IDENTITY, sampler=sampler)
    assert again.resumed
    with pytest.raises(
        InputError, match=r"created for model 'mlp', p99 SLO 50ms.*not model 'mlp', p99 SLO 20ms"
    ):
        TuningStudy.create_or_resume(
            url, "s", identity=replace(IDENTITY, slo_p99_s=0.02), sampler=sampler
        )
    with pytest.raises(InputError, match="not model 'resnet'"):
        TuningStudy.create_or_resume(
            url, "s", identity=replace(IDENTITY, model="resnet"), sampler=sampler
        )


def test_interrupted_and_lost_trials_do_not_count(tmp_path: Path):
    study = TuningStudy.create_or_resume(
        optuna.storages.InMemoryStorage(),
        "s",
        identity=IDENTITY,
        sampler=optuna.samplers.RandomSampler(),
    )
    done = study.ask()
    study.optuna_study.tell(done, 1.0)
    cut = study.ask()
    study.tell_interrupted(cut)
    broken = study.ask()
    study.tell_failed(broken, "Triton refused it")
    lost = study.ask()
    study.optuna_study.tell(lost, state=optuna.trial.TrialState.FAIL)  # as a stale heartbeat leaves it
    record = study.read()
    assert [t.counted for t in record.trials] == [True, False, True, False]
    assert [t.number for t in record.lost] == [3]


def test_best_point_states_the_confirmed_figure_only_when_it_held(example_repository: Path):
    held = point(5200, 0.04, load=64)
    record = read_study(make_study(example_repository, [3000, 6000, 4000], confirmed=held))
    best = best_point(record)
    assert best is not None and best.result.throughput == 6000
    assert best.confirmed and best.point == OperatingPoint.from_dict(held.to_dict())  # as stored
    assert gain_over_baseline(record.baseline, best.point.throughput) == pytest.approx(5200 / 1000 - 1)

    missed = point(5000, 0.07, load=64, feasible=False)
    record = read_study(make_study(example_repository, [3000, 6000], confirmed=missed))
    best = best_point(record)
    assert not best.confirmed and best.point == best.result.operating_point  # the screening one


def test_no_gain_without_a_feasible_baseline(example_repository: Path):
    record = read_study(
        make_study(example_repository, [3000], baseline=point(900, 0.09, feasible=False))
    )
    assert gain_over_baseline(record.baseline, 3000) is None


def test_a_study_written_by_an_older_version_reads_with_defaults():
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    for key, value in {"model": "mlp", "slo_p99_s": 0.05, "load_mode": "rate"}.items():
        study.set_user_attr(key, value)  # as tritontune 0.1 wrote them: no context, no space
    trial = study.ask()
    trial.set_user_attr("point", {"max_batch_size": 8})
    study.tell(trial, 10.0)
    record = read_study(study)
    assert record.identity.load_mode is LoadMode.RATE
    assert record.context.request_shape.batch_size == 1 and record.context.server_version == "unknown"
    assert record.trials[0].params == {"max_batch_size": 8} and record.trials[0].counted


def test_a_study_not_made_by_tritontune_is_refused():
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), study_name="other")
    with pytest.raises(InputError, match="study 'other' was not made by tritontune search"):
        read_study(study)


@pytest.mark.filterwarnings("ignore:Heartbeat of storage")  # we ask/tell, not optimize()
def test_a_trial_whose_heartbeats_stopped_is_lost_and_queued_again(tmp_path: Path, monkeypatch):
    """A worker on another machine can't be looked up: its trial is lost once its heartbeats stop
    for the grace period (here shortened), and its config is queued for the next worker."""
    monkeypatch.setattr(coordination, "HEARTBEAT_INTERVAL_S", 1)
    monkeypatch.setattr(coordination, "HEARTBEAT_GRACE_S", 2)
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = TuningStudy.create_or_resume(
        url, "s", identity=IDENTITY, sampler=optuna.samplers.RandomSampler(0)
    )
    trial = study.optuna_study.ask(
        {"max_batch_size": optuna.distributions.CategoricalDistribution([8, 16])}
    )
    study.save_worker(trial, replace(this_worker(), hostname="elsewhere"))  # not on this machine
    with study.heartbeat(trial):
        time.sleep(1.5)
    assert study.recover_lost_trials() == []  # heartbeats are recent: still running
    time.sleep(2.5)
    assert study.recover_lost_trials() == [trial.number]
    assert [t.number for t in study.read().lost] == [trial.number]
    again = study.optuna_study.ask()
    assert again.suggest_categorical("max_batch_size", [8, 16]) == trial.params["max_batch_size"]


def test_dashboard_values_sit_beside_the_point_and_old_trials_read_the_same():
    study = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    for key, value in {"model": "mlp", "slo_p99_s": 0.05, "load_mode": "concurrency"}.items():
        study.set_user_attr(key, value)
    old = study.ask()  # as written before the value: attributes
    old.set_user_attr("point", {"max_batch_size": 8})
    study.tell(old, 10.0)
    new = study.ask()
    TuningStudy.of(study).save_point(new, {"max_batch_size": 16, "max_queue_delay": 2000}, DIMENSIONS)
    study.tell(new, 20.0)
    assert study.trials[1].user_attrs["value:max_batch_size"] == 16
    assert study.trials[1].user_attrs["value:max_queue_delay_us"] == 2000
    record = read_study(study)
    assert [t.params for t in record.trials] == [
        {"max_batch_size": 8},
        {"max_batch_size": 16, "max_queue_delay": 2000},
    ]


def test_old_studies_of_each_kind_read_their_request_shape_and_traffic_apart():
    """Studies used to keep both the request payload (single-class) and the traffic mix
    (workload) under one attribute, ``workload``: a workload study's context then read the mix as
    a request shape. Each reads as what it was, and a new study keeps them under their names."""
    old_single = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    for key, value in {
        "model": "mlp", "slo_p99_s": 0.05, "load_mode": "concurrency",
        "workload": {"batch_size": 4, "dynamic_dim": 8, "input_data": "/data/in.json"},
    }.items():  # fmt: skip
        old_single.set_user_attr(key, value)
    shape = read_study(old_single).context.request_shape
    assert (shape.batch_size, shape.dynamic_dim, shape.input_data) == (4, 8, "/data/in.json")

    traffic = {"classes": [{"name": "interactive", "share": 1.0, "slo_p99": "20ms"}]}
    old_workload = optuna.create_study(storage=optuna.storages.InMemoryStorage(), direction="maximize")
    for key, value in {"model": "mlp", "workload": traffic, "server_version": "2.51.0"}.items():
        old_workload.set_user_attr(key, value)
    handle = TuningStudy.of(old_workload)
    assert handle.kind == "workload"
    record = handle.read_workload()
    assert [c.name for c in record.traffic.classes] == ["interactive"]
    assert record.context.request_shape.batch_size == 1  # no shape recorded: the default, not the mix
    assert record.context.server_version == "2.51.0" and record.final is None
    with pytest.raises(InputError, match="is a workload study"):
        handle.read()

    new = TuningStudy.create_or_resume(
        optuna.storages.InMemoryStorage(),
        "w",
        identity=WorkloadIdentity("mlp", traffic),
        sampler=optuna.samplers.RandomSampler(0),
    )
    new.ensure_context(lambda: StudyContext(request_shape=RecordedRequestShape(batch_size=2)))
    again = new.read_workload()
    assert again.traffic.classes[0].name == "interactive"
    assert again.context.request_shape.batch_size == 2
