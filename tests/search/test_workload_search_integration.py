"""The workload search's fault guarantees on the real server: they are the one loop's, so a
workload search gets them as the single-class search does (issue 23).

Small budgets: these check what happens to a trial when its server dies or the user presses
Ctrl-C, not the figures. The ramp starts high and stops at twice that (the example MLP serves
thousands of req/s), so a capacity takes two levels.
"""

from __future__ import annotations

import os
import signal
import threading
from pathlib import Path

import pytest

from tests.conftest import orphaned_stubs
from tritontune.config.repository import load_model_source
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import Layout, read_traffic
from tritontune.search.space import Choice, SearchSpace
from tritontune.search.workload_search import (
    WorkloadSearchProgress,
    WorkloadSearchSettings,
    run_workload_search,
)
from tritontune.serving.session import TuningSession
from tritontune.study.handle import TuningStudy

pytestmark = pytest.mark.integration

WORKLOAD = Path(__file__).parents[2] / "examples" / "workloads" / "interactive-batch.yaml"
FAST = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=30, max_windows=3)
SPACE = SearchSpace(
    {
        "max_batch_size": Choice((16, 64)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
        "instance_count": Choice((1,)),
        "intra_op_thread_count": Choice((1,)),
    }
)


def settings(tmp_path: Path, **overrides) -> WorkloadSearchSettings:
    values = dict(
        trials=2, seed=2, storage=f"sqlite:///{tmp_path / 'w.db'}", study_name="w",
        start_rate=400.0, max_rate=800.0, top=1, rounds=1, endpoints=False, measure=FAST,
    )  # fmt: skip
    values.update(overrides)
    return WorkloadSearchSettings(**values)


def test_a_workload_trial_whose_server_is_killed_is_measured_again(
    example_repository: Path, tmp_path: Path, own_servers: Path
):
    """tritonserver SIGKILLed while the second trial switches to its config: the server is
    restarted, the same config measured again, and the search finishes with a winner. Its
    trials are one endpoint per class (two models loaded side by side), so the restart reloads
    the split, not the shared model."""
    traffic = read_traffic(WORKLOAD)
    source = load_model_source(example_repository, "mlp")
    killed: list[int] = []
    with TuningSession(source, settings=FAST) as session:

        def kill_during_second_trial(n: int, total: int | None, point: dict) -> None:
            if n == 2 and not killed:
                pid = session.server.launcher.pid
                killed.append(pid)
                threading.Timer(0.3, os.kill, (pid, signal.SIGKILL)).start()

        progress = WorkloadSearchProgress(on_trial_start=kill_during_second_trial)
        # What is under test is the restart, not how far a config goes: its ramps are one level
        # (400 req/s, the start and the cap) where they pass there.
        endpoints = settings(tmp_path, layouts=(Layout.ENDPOINTS,), max_rate=400.0)
        result = run_workload_search(session, SPACE, traffic, endpoints, progress)
        assert killed and session.server.launcher.pid != killed[0]
    assert orphaned_stubs(own_servers) == []
    assert result.restarts == 1
    assert all(t.error is None for t in result.trials), [t.error for t in result.trials]
    second = sorted(result.trials, key=lambda t: t.number)[1]
    assert second.server_restarts == 1 and second.capacity is not None
    assert result.winner is not None and len(result.winner.rates) == 1
    assert {t.params["layout"] for t in result.trials} == {"endpoints"}
    assert any(f.layout == Layout.ENDPOINTS and f.trial is not None for f in result.finalists)


def test_ctrl_c_in_a_workload_trial_and_the_rerun_measures_that_config(
    example_repository: Path, tmp_path: Path
):
    """SIGINT (what Ctrl-C sends) during the second trial: the trial is marked interrupted, not
    counted, and running the same search again measures that config first."""
    traffic = read_traffic(WORKLOAD)
    source = load_model_source(example_repository, "mlp")
    sent: list[bool] = []

    def interrupt_second_trial(n: int, total: int | None, point: dict) -> None:
        if n == 2 and not sent:
            sent.append(True)
            threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()

    progress = WorkloadSearchProgress(on_trial_start=interrupt_second_trial)
    with pytest.raises(KeyboardInterrupt), TuningSession(source, settings=FAST) as session:
        run_workload_search(session, SPACE, traffic, settings(tmp_path), progress)
    study = TuningStudy.open_existing(settings(tmp_path).storage_name, "w").read_workload()
    (cut,) = [t for t in study.trials if t.interrupted]
    assert not cut.counted and len([t for t in study.trials if t.counted]) == 1

    with TuningSession(source, settings=FAST) as session:
        result = run_workload_search(session, SPACE, traffic, settings(tmp_path))
    again = TuningStudy.open_existing(settings(tmp_path).storage_name, "w").read_workload()
    first_new = [t for t in again.trials if t.number > cut.number][0]
    assert first_new.params == cut.params and first_new.counted and first_new.capacity is not None
    assert len(result.trials) == 2 and result.winner is not None
