"""Workers sharing one study: real ``tritontune search`` processes, each with its own real
tritonserver, on a real PostgreSQL server (tests/postgres.py) or SQLite.

Budgets are small (3 of 4 configs of the example model, 2 where a worker is killed; short windows,
load ramps up to concurrency 4): what is under test is the coordination (no config lost or
measured twice, a killed worker's config finished by another), not the figures.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest

from tests.conftest import leftover_regions, orphaned_stubs, python_backend_prefixes
from tests.groups import MODELS, two_model_repository
from tests.groups import WORKLOAD as GROUP_WORKLOAD
from tests.measuring import FAST_OPTIONS, FAST_PLAYOFF_OPTIONS
from tests.pipelines import BLS, PIPELINE, write_bls, write_pipeline
from tests.studies import read_study
from tritontune.errors import InputError
from tritontune.search.playoff import finalists
from tritontune.study.handle import TuningStudy

pytestmark = pytest.mark.integration

SPACE = """\
max_batch_size: [8, 16, 32, 64]
dynamic_batching: [true]
max_queue_delay: [1ms]
preferred_batch_size: [none]
instance_count: [1]
intra_op_thread_count: [1]
inter_op_thread_count: [1]
precision: [fp32]
"""
BUDGET = 3
#: The killed worker's test: its trial lost, then measured again by the next worker, and one
#: config more (a third trial was one more load ramp, and nothing the test looks at).
KILLED_BUDGET = 2
TIMEOUT_S = 300
#: Short windows, one interleaved round for the top trial: what is under test is who measures
#: what, not the figures.
FAST = [*FAST_OPTIONS, "--playoff-top", "1", "--playoff-rounds", "1"]
#: A single-class search's playoff short, and with no extra rounds (a traffic mix's final rounds
#: are measured with the trials' windows and have none): where two configs this close are in an
#: uncertain order, 3 more rounds of both took 30 s of a 35 s search.
SHORT_PLAYOFF = ["--playoff-extra-rounds", "0", *FAST_PLAYOFF_OPTIONS]


def start_search(tmp_path: Path, storage: str, seed: int, args: list[str]) -> subprocess.Popen:
    """``tritontune search ARGS --seed SEED`` with ``storage`` in the environment (the URL stays
    off the command line), its output in ``worker-SEED.log``."""
    log = open(tmp_path / f"worker-{seed}.log", "w")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        [sys.executable, "-m", "tritontune", "search", *args, *FAST, "--seed", str(seed)],
        env={**os.environ, "TRITONTUNE_STORAGE": storage},
        stdout=log,
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )


def start_worker(
    example_repository: Path, tmp_path: Path, storage: str, study: str, seed: int, budget: int = BUDGET
) -> subprocess.Popen:
    space = tmp_path / "space.yaml"
    space.write_text(SPACE)
    return start_search(
        tmp_path, storage, seed,
        [
            "-r", str(example_repository), "-m", "mlp", "--slo-p99", "50ms",
            "--trials", str(budget), "--space", str(space), "--study", study,
            "--max-load", "4", "--results", str(tmp_path / f"results-{seed}.json"),
            *SHORT_PLAYOFF,
        ],
    )  # fmt: skip


def finish(worker: subprocess.Popen, tmp_path: Path) -> None:
    try:
        code = worker.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        worker.kill()
        raise
    logs = "\n".join(p.read_text() for p in sorted(tmp_path.glob("worker-*.log")))
    assert code == 0, logs


def shared_study(storage: str, study: str):
    return read_study(optuna.load_study(study_name=study, storage=storage))


def assert_budget_done_once(storage: str, study: str, budget: int = BUDGET) -> None:
    record = shared_study(storage, study)
    counted = [t for t in record.trials if t.counted]
    points = [tuple(sorted(t.params.items())) for t in counted]
    assert len(counted) == budget and len(set(points)) == budget  # no config measured twice
    assert not record.running
    assert record.baseline is not None and record.best is not None
    playoff = record.playoff  # one verdict: one worker ran the playoff, once
    assert playoff is not None
    ranked = [r for r in record.feasible if r.operating_point is not None]
    contenders = {t.number for t in finalists(ranked, 1)}  # the top config (and a close level)
    assert {e.trial for e in playoff.entries} == contenders | {None}  # and the baseline
    assert all(len(e.rounds) == 1 for e in playoff.entries)  # and no extra round


def test_two_workers_finish_one_budget_on_postgresql(example_repository, tmp_path, postgres_url):
    workers = [
        start_worker(example_repository, tmp_path, postgres_url, "two-workers", seed) for seed in (1, 2)
    ]
    for worker in workers:
        finish(worker, tmp_path)
    assert_budget_done_once(postgres_url, "two-workers")
    record = shared_study(postgres_url, "two-workers")
    assert not record.lost
    assert len({t.worker.pid for t in record.trials if t.counted and t.worker}) == 2  # both worked


def wait_for_running_trial(storage: str, study: str, worker: subprocess.Popen) -> int:
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and worker.poll() is None:
        try:
            for trial in shared_study(storage, study).running:
                if trial.worker is not None and trial.worker.pid == worker.pid:
                    return trial.number
        except KeyError:  # the worker has not created the study yet
            pass
        except InputError:  # created, its identity not written yet (one write after another)
            pass
        time.sleep(0.5)
    raise AssertionError(f"the worker never started a trial (exit code {worker.poll()})")


@pytest.mark.parametrize("backend", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_a_worker_killed_mid_trial_loses_nothing(
    backend, example_repository, tmp_path, own_servers, request: pytest.FixtureRequest
):
    """SIGKILL leaves the trial RUNNING in the study; the other worker (PostgreSQL), or the
    same command run again (SQLite), finds its worker gone and measures that config."""
    if backend == "sqlite":
        storage = f"sqlite:///{tmp_path / 'studies.db'}"
    else:
        storage = request.getfixturevalue("postgres_url")
    study = f"killed-{backend}"
    victim = start_worker(example_repository, tmp_path, storage, study, seed=1, budget=KILLED_BUDGET)
    trial = wait_for_running_trial(storage, study, victim)
    time.sleep(1.0)  # well inside the measurement
    prefixes = python_backend_prefixes(own_servers)  # its server's shared memory
    assert prefixes, "the worker's server was not found running"
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=30)
    killed = shared_study(storage, study).trials[trial]
    assert killed.state.name == "RUNNING"  # as SIGKILL leaves it
    assert orphaned_stubs(own_servers) == []  # the killed worker's server went, and its stubs too
    assert leftover_regions(prefixes) == set()  # and its shared memory

    finish(start_worker(example_repository, tmp_path, storage, study, 2, KILLED_BUDGET), tmp_path)
    record = shared_study(storage, study)
    assert [t.number for t in record.lost] == [trial]
    redone = [t for t in record.trials if t.counted and t.params == killed.params]
    assert len(redone) == 1 and redone[0].number > trial  # measured again, once
    assert_budget_done_once(storage, study, KILLED_BUDGET)


@pytest.mark.parametrize("kind", ["ensemble", "bls"])
def test_two_workers_share_one_pipeline_study(kind: str, tmp_path: Path):
    """A pipeline's study shared by two ``search`` processes: the budget measured once between
    them, the baseline and the playoff once, and every trial with each step's figures (a worker
    that finds the baseline claimed by the other searches every model's knobs from the start)."""
    if kind == "bls":
        repository, entry, composing = (
            write_bls(tmp_path / "repository"),
            BLS,
            ["--composing", "shift", "--composing", "scale"],
        )
    else:
        repository, entry, composing = write_pipeline(tmp_path / "repository"), PIPELINE, []
    storage = f"sqlite:///{tmp_path / 'studies.db'}"

    args = [
        "-r", str(repository), "-m", entry, *composing, "--slo-p99", "100ms", "--trials", "2",
        "--study", "pipe", "--max-load", "4", *SHORT_PLAYOFF,
    ]  # fmt: skip
    for worker in [start_search(tmp_path, storage, seed, args) for seed in (1, 2)]:
        finish(worker, tmp_path)
    assert_budget_done_once(storage, "pipe", budget=2)
    record = shared_study(storage, "pipe")
    for trial in (t for t in record.trials if t.counted):
        assert trial.operating_point is not None and trial.operating_point.steps


WORKLOAD = Path(__file__).parents[2] / "examples" / "workloads" / "interactive-batch.yaml"
WORKLOAD_SPACE = """\
max_batch_size: [16, 32, 64]
dynamic_batching: [true]
max_queue_delay: [1ms]
instance_count: [1]
intra_op_thread_count: [1]
precision: [fp32]
"""


def start_workload_worker(
    example_repository: Path, tmp_path: Path, storage: str, seed: int
) -> subprocess.Popen:
    space = tmp_path / "workload-space.yaml"
    space.write_text(WORKLOAD_SPACE)
    return start_search(
        tmp_path, storage, seed,
        [
            "-r", str(example_repository), "-m", "mlp", "--workload", str(WORKLOAD),
            "--layout", "shared", "--trials", "2", "--space", str(space), "--study", "mixed",
            "--start-rate", "400", "--max-load", "400",
        ],
    )  # fmt: skip


def test_two_workers_of_one_workload_study_run_its_final_rounds_once(example_repository, tmp_path):
    """Two ``search --workload`` processes on one SQLite study: the budget is measured once
    between them, and the final rounds once. The worker that finds them claimed (still running,
    or done: it may finish its trials after the other's rounds) says so and measures none."""
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    workers = [start_workload_worker(example_repository, tmp_path, storage, seed) for seed in (1, 2)]
    for worker in workers:
        finish(worker, tmp_path)
    logs = [(tmp_path / f"worker-{seed}.log").read_text() for seed in (1, 2)]
    record = TuningStudy.open_existing(storage, "mixed").read_workload()
    counted = [t for t in record.trials if t.counted]
    assert len(counted) == 2 and len({tuple(sorted(t.params.items())) for t in counted}) == 2
    # every finalist (the top trial in each layout, the baseline) one round, by one worker only
    final = optuna.load_study(study_name="mixed", storage=storage).user_attrs["workload_final"]
    rounds = [line for log in logs for line in log.splitlines() if "final round 1:" in line]
    assert len(rounds) == len(final["finalists"]) == 3, logs
    ran = [log for log in logs if "final round 1:" in log]
    (left,) = [log for log in logs if "final round 1:" not in log]
    assert len(ran) == 1
    assert "another worker of this study runs them" in left or "(reused)" in left, left
    if "another worker of this study runs them" in left:
        assert "final rounds (interleaved)" not in left, left  # no empty table of them
    assert "winner:" in ran[0]


def test_two_workers_of_one_group_study_run_its_final_rounds_once(example_repository, tmp_path):
    """Several models on one server (tests/groups.py): two ``search --workload`` processes on
    one SQLite study measure the budget once and the final rounds once, as for one model."""
    repository = two_model_repository(tmp_path, example_repository, slow_own_config=False)
    (tmp_path / "two.yaml").write_text(GROUP_WORKLOAD)
    per_model = "".join(
        f"{m}:\n" + "".join(f"  {line}\n" for line in WORKLOAD_SPACE.splitlines()) for m in MODELS
    )
    (tmp_path / "group-space.yaml").write_text(per_model)
    storage = f"sqlite:///{tmp_path / 'studies.db'}"

    args = [
        "-r", str(repository), "--workload", str(tmp_path / "two.yaml"), "--trials", "2",
        "--space", str(tmp_path / "group-space.yaml"), "--study", "group",
        "--start-rate", "400", "--max-load", "400",
    ]  # fmt: skip
    for worker in [start_search(tmp_path, storage, seed, args) for seed in (1, 2)]:
        finish(worker, tmp_path)
    logs = [(tmp_path / f"worker-{seed}.log").read_text() for seed in (1, 2)]
    record = TuningStudy.open_existing(storage, "group").read_workload()
    counted = [t for t in record.trials if t.counted]
    assert len(counted) == 2 and len({tuple(sorted(t.params.items())) for t in counted}) == 2
    final = optuna.load_study(study_name="group", storage=storage).user_attrs["workload_final"]
    rounds = [line for log in logs for line in log.splitlines() if "final round 1:" in line]
    assert len(rounds) == len(final["finalists"]) == 2, logs  # the top trial and the baseline
    (left,) = [log for log in logs if "final round 1:" not in log]
    assert "another worker of this study runs them" in left or "(reused)" in left, left
