"""Several models on one server beyond the happy path, on the real server: a killed server,
Ctrl-C and a resume, with two load processes (tests/groups.py's two copies of the example MLP).

The group's search is the workload search's loop with a session serving every model, so what
is specific to it is checked here: the restart must load both models again (each class's
requests go to its own), and the resumed search must measure the cut config with both.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import kill_then_interrupt, orphaned_stubs
from tests.groups import FAST, MODEL_SPACE, WORKLOAD, two_model_repository
from tritontune.config.validate import TargetCapabilities
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.traffic import read_traffic
from tritontune.search.instance_budget import InstanceBudget
from tritontune.search.pipeline_space import group_space
from tritontune.search.workload_search import (
    WorkloadSearchProgress,
    WorkloadSearchSettings,
    run_workload_search,
)
from tritontune.serving.opening import open_group_session
from tritontune.study.handle import TuningStudy

pytestmark = pytest.mark.integration


def test_a_group_search_outlives_a_killed_server_and_resumes_after_ctrl_c(
    example_repository: Path, tmp_path: Path, own_servers: Path
):
    """tritonserver SIGKILLed during the first trial: restarted with both models, the trial
    measured again on both; Ctrl-C at the second: the rerun measures that config first. Every
    level is sent by two load processes (``--load-processes 2``)."""
    # the models' own configs as the example's: the baseline's final ramp stops at its first
    # level as a trial's does (with the slow one of group_study it walks down: 37 s, not 11)
    repository = two_model_repository(tmp_path, example_repository, slow_own_config=False)
    (tmp_path / "two.yaml").write_text(WORKLOAD)
    traffic = read_traffic(tmp_path / "two.yaml")
    budget = InstanceBudget.of(TargetCapabilities(), os.cpu_count() or 1)
    space = group_space({"mlp_a": MODEL_SPACE, "mlp_b": MODEL_SPACE}, budget)
    # one level a capacity (400 req/s, the start and the cap): the restart is under test
    settings = WorkloadSearchSettings(
        trials=2, seed=3, storage=f"sqlite:///{tmp_path / 'g.db'}", study_name="g",
        start_rate=400.0, max_rate=400.0, top=1, rounds=1, measure=FAST,
    )  # fmt: skip
    killed: list[int] = []
    load = LoadSettings(processes=2)
    with open_group_session(repository, traffic, settings=FAST, load=load) as session:
        progress = WorkloadSearchProgress(on_trial_start=kill_then_interrupt(session, killed))
        with pytest.raises(KeyboardInterrupt):
            run_workload_search(session, space, traffic, settings, progress)
        assert killed and session.server.launcher.pid != killed[0]
    assert orphaned_stubs(own_servers) == []
    study = TuningStudy.open_existing(settings.storage_name, "g").read_workload()
    (first,) = [t for t in study.trials if t.counted]
    assert first.server_restarts == 1 and first.capacity is not None
    best = first.capacity.detail["best"]
    assert set(best["server"]) == {"mlp_a", "mlp_b"}  # both models served again
    assert best["client"]["processes"] == 2
    (cut,) = [t for t in study.trials if t.interrupted]

    with open_group_session(repository, traffic, settings=FAST, load=load) as session:
        result = run_workload_search(session, space, traffic, settings)
    resumed = [t for t in result.trials if t.number > cut.number][0]
    assert resumed.params == cut.params and resumed.capacity is not None
    assert len(result.trials) == 2 and result.winner is not None
