"""Benchmark: workers sharing one study, coordination only (issue 16).

One 2-core machine can't host two honest measurements at once, so this measures the
coordination itself, on a private PostgreSQL server it starts (Debian's ``postgresql``):

1. ask/tell latency per trial, SQLite vs PostgreSQL (bare Optuna calls through tritontune's
   storage, heartbeats on);
2. wall time of a fixed budget with 1, 2 and 4 worker processes on one PostgreSQL study (from
   the start signal to the last trial of the budget told), and the configs measured twice (must
   be 0). The verdict that follows (the playoff: top 3 and the baseline, 3 interleaved rounds)
   is measurement, not coordination, and runs on one worker by design (its rounds must share one
   server); its time is printed separately, and the total beside it.
   **Each worker's measurement is a STAND-IN**: the fake session of the tests (tests/fakes.py),
   sleeping ``--measure-s`` per load level instead of measuring a server. Workers sample with
   Optuna's RandomSampler, so every run measures exactly the budget (TPE converges on the
   stand-in's modelled server and stops early on re-proposals, which would make runs do
   different work). The runs are interleaved (1, 2, 4 workers, then again) and the figures are
   medians with min-max over ``--repeats``. Each worker process imports what it needs
   (SQLAlchemy, Optuna's RDB models: ~1 s, once per worker, however long it then runs) before
   the clock starts; everything from opening the study on is timed. A real load level takes
   2-5 s; ``--measure-s 0.2`` makes coordination weigh ~10x more than in a real search.

    python bench/distributed.py [--budget 16] [--measure-s 0.2] [--repeats 3]
"""

from __future__ import annotations

import argparse
import datetime as dt
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import optuna

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


from tests.fakes import FakeSession  # noqa: E402 - the stand-in session, shared with the tests
from tests.postgres import postgres_server  # noqa: E402
from tritontune.config.repository import load_model_source  # noqa: E402
from tritontune.measure.loadgen import LoadMode  # noqa: E402
from tritontune.search.optimize import SearchSettings, run_search  # noqa: E402
from tritontune.search.space import Choice, SearchSpace  # noqa: E402
from tritontune.study.handle import TuningStudy  # noqa: E402
from tritontune.study.records import StudyIdentity  # noqa: E402
from tritontune.study.storage import open_storage  # noqa: E402

SPACE = SearchSpace(
    {
        "max_batch_size": Choice((4, 8, 16, 32)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((100, 500, 1000, 2000)),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1, 2, 3, 4)),
    }
)


def ask_tell_latency(storage: str, trials: int) -> float:
    """Median seconds of one ask + suggest + tell through tritontune's storage."""
    study = TuningStudy.create_or_resume(
        storage,
        f"latency-{time.time_ns()}",
        identity=StudyIdentity("mlp", 0.05, LoadMode.CONCURRENCY),
        sampler=optuna.samplers.RandomSampler(seed=0),
    )
    took = []
    warnings.filterwarnings("ignore", message="Heartbeat of storage")  # we ask/tell, not optimize
    for _ in range(trials):
        started = time.perf_counter()
        trial = study.ask()
        SPACE.suggest(trial)
        study.optuna_study.tell(trial, 1.0)
        took.append(time.perf_counter() - started)
    return statistics.median(took)


def _worker(storage: str, study: str, budget: int, measure_s: float, seed: int, go) -> None:
    source = load_model_source(ROOT / "examples" / "model_repository", "mlp")
    session = FakeSession(source, measure_delay_s=measure_s)  # STAND-IN: sleeps, measures nothing
    settings = SearchSettings(
        slo_p99_s=0.05, trials=budget, seed=seed, storage=storage, study_name=study,
        sampler=optuna.samplers.RandomSampler(seed=seed),
    )  # fmt: skip
    open_storage(storage)  # the process's one-time imports (SQLAlchemy, Optuna's RDB models)
    go.wait()
    run_search(session, SPACE, settings)


def budget_wall_time(
    storage: str, workers: int, budget: int, measure_s: float
) -> tuple[float, float, int]:
    """Seconds for ``workers`` processes to finish ``budget`` configs, seconds until they all
    exited (the verdict included), and configs measured twice."""
    study = f"budget-{workers}-{time.time_ns()}"
    go = mp.Event()
    processes = [
        mp.Process(target=_worker, args=(storage, study, budget, measure_s, seed, go))
        for seed in range(workers)
    ]
    for process in processes:
        process.start()
    time.sleep(3.0)  # imports and setup, outside the timed part
    started, started_at = time.perf_counter(), dt.datetime.now()
    go.set()
    for process in processes:
        process.join()
        assert process.exitcode == 0, f"a worker failed (exit {process.exitcode})"
    wall = time.perf_counter() - started
    record = TuningStudy.open_existing(storage, study).read()
    counted = [t for t in record.trials if t.counted]
    assert len(counted) == budget, f"{len(counted)} configs finished, budget {budget}"
    points = [tuple(sorted(t.params.items())) for t in counted]
    last = max(t.finished for t in counted if t.finished is not None)
    return (last - started_at).total_seconds(), wall, len(points) - len(set(points))


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} (min {min(values):.2f}, max {max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=int, default=32)
    parser.add_argument("--measure-s", type=float, default=0.2, help="stand-in seconds per level")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-trials", type=int, default=100)
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    server = postgres_server()
    postgres = next(server)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            sqlite = f"sqlite:///{Path(tmp) / 'bench.db'}"
            for name, url in (("SQLite", sqlite), ("PostgreSQL", postgres)):
                latency = ask_tell_latency(url, args.latency_trials)
                trials = args.latency_trials
                print(f"ask+tell per trial, {name}: {latency * 1e3:.1f} ms (median of {trials})")

        walls: dict[int, list[float]] = {1: [], 2: [], 4: []}
        totals: dict[int, list[float]] = {1: [], 2: [], 4: []}
        duplicates = 0
        for _ in range(args.repeats):
            for workers in walls:
                wall, total, twice = budget_wall_time(postgres, workers, args.budget, args.measure_s)
                walls[workers].append(wall)
                totals[workers].append(total)
                duplicates += twice
        print(
            f"\nbudget {args.budget} configs, STAND-IN measurement {args.measure_s}s per load level, "
            f"PostgreSQL, {args.repeats} interleaved repeats:"
        )
        one = statistics.median(walls[1])
        for workers, values in walls.items():
            ratio = statistics.median(values) / one
            target = {1: "", 2: " (target <= 0.55)", 4: " (target <= 0.30)"}[workers]
            print(f"  {workers} worker(s): {spread(values)} s, {ratio:.2f}x one worker{target}")
        print("with the verdict (playoff on one worker) after the budget, until every worker exited:")
        one = statistics.median(totals[1])
        for workers, values in totals.items():
            ratio = statistics.median(values) / one
            print(f"  {workers} worker(s): {spread(values)} s, {ratio:.2f}x one worker")
        print(f"  configs measured twice: {duplicates} (target 0)")
    finally:
        server.close()


if __name__ == "__main__":
    main()
