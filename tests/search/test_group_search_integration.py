"""Two models on one real server, each class of a workload sent to its own (issue 27, item 3).

Two copies of the example MLP under their own names; a class of single requests for one, a class
of batches of 4 for the other. A search of two trials with the small budgets of
test_workload_search_integration.py (the ramp starts high and stops at twice that: the MLP serves
thousands of req/s). Triton's statistics of each model, read at the same window edges as the
classes' figures, say which model served which class.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import orphaned_stubs
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import PIPELINE_KNOBS
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import read_traffic
from tritontune.search.instance_budget import InstanceBudget
from tritontune.search.pipeline_space import group_space
from tritontune.search.space import Choice, SearchSpace
from tritontune.search.workload_search import WorkloadSearchSettings, run_workload_search
from tritontune.serving.group_session import open_group_session

pytestmark = pytest.mark.integration

FAST = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=30, max_windows=3)
MODEL_SPACE = SearchSpace(
    {
        "max_batch_size": Choice((8, 16)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
        "instance_count": Choice((1, 2)),
        "intra_op_thread_count": Choice((1,)),
    }
)
WORKLOAD = """
classes:
  - name: chat
    model: mlp_a
    share: 0.5
    batch_size: 1
    slo_p99: 100ms
  - name: embed
    model: mlp_b
    share: 0.5
    batch_size: 4
    may_shed: true
"""


def two_model_repository(tmp_path: Path, example_repository: Path) -> Path:
    repository = tmp_path / "repository"
    model_file = (example_repository / "mlp" / "1" / "model.onnx").resolve()
    config = (example_repository / "mlp" / "config.pbtxt").read_text()
    for name in ("mlp_a", "mlp_b"):
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.onnx").symlink_to(model_file)
        (repository / name / "config.pbtxt").write_text(config.replace('name: "mlp"', f'name: "{name}"'))
    return repository


def test_two_models_on_one_server_each_class_served_by_its_own(
    example_repository: Path, tmp_path: Path, own_servers: Path
):
    repository = two_model_repository(tmp_path, example_repository)
    (tmp_path / "two.yaml").write_text(WORKLOAD)
    traffic = read_traffic(tmp_path / "two.yaml")
    budget = InstanceBudget.of(TargetCapabilities(), os.cpu_count() or 1)
    space = group_space({"mlp_a": MODEL_SPACE, "mlp_b": MODEL_SPACE}, budget)
    settings = WorkloadSearchSettings(
        trials=2, seed=3, storage=f"sqlite:///{tmp_path / 'g.db'}", study_name="g",
        start_rate=400.0, max_rate=800.0, top=1, rounds=1, measure=FAST,
    )  # fmt: skip
    with open_group_session(repository, traffic, settings=FAST) as session:
        result = run_workload_search(session, space, traffic, settings)
    assert orphaned_stubs(own_servers) == []

    # every trial tuned both models' configs (the space's, not their own: no batcher, 64)
    assert len(result.trials) == 2 and all(t.error is None for t in result.trials)
    for trial in result.trials:
        knobs = trial.knobs[PIPELINE_KNOBS]
        for model in ("mlp_a", "mlp_b"):
            assert knobs[model]["max_batch_size"] in (8, 16) and knobs[model]["dynamic_batching"]
        instances = sum(g["count"] for m in knobs.values() for g in m["instance_group"])
        assert instances <= budget.limit
        # Triton's statistics of each model, for each level of its capacity
        assert set(trial.capacity.detail["best"]["server"]) == {"mlp_a", "mlp_b"}

    winner = result.winner
    assert winner is not None and winner.routes == {"chat": "mlp_a", "embed": "mlp_b"}
    assert set(winner.models) == {"mlp_a", "mlp_b"}
    best = result.winner_capacity().best
    assert best is not None and set(best.server) == {"mlp_a", "mlp_b"}
    for name, model in winner.routes.items():
        # the requests Triton counted on a model are the ones its class sent in the same span
        sent = best.figures(name).request_rate * best.span_s
        assert best.server[model].requests == pytest.approx(sent, rel=0.2, abs=5)
    # embed's batches of 4 went to mlp_b, chat's single requests to mlp_a
    assert best.server["mlp_b"].avg_batch_size >= 4
    by_model = result.to_dict()["winner_at_capacity"]["by_model"]
    assert by_model["mlp_a"]["classes"] == ["chat"] and by_model["mlp_b"]["classes"] == ["embed"]
