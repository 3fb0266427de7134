"""Several models on one server (issue 27, item 3): each class of a workload names its model,
and ``search --workload`` tunes every model's config together, on the modelled server of
tests/fakes.py (``FakeGroupSession``: each class sent to its model, the machine's cores shared by
every model's instances)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tests.fakes import FakeGroupSession
from tests.studies import final_rounds_claimed_elsewhere
from tritontune.cli import app
from tritontune.config.pipeline import PipelineVariant
from tritontune.config.repository import load_model_source
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import PIPELINE_KNOBS, Variant
from tritontune.errors import InputError
from tritontune.measure.traffic import Layout, parse_traffic, read_traffic
from tritontune.search.endpoint_layout import point_variant
from tritontune.search.instance_budget import Device, InstanceBudget
from tritontune.search.pipeline_space import group_space
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.search.workload_search import (
    WorkloadSearchProgress,
    WorkloadSearchSettings,
    run_workload_search,
    searched_layouts,
    workload_space,
)
from tritontune.serving.opening import open_group_session

TRAFFIC = parse_traffic(
    {
        "classes": [
            {"name": "chat", "model": "mlp_a", "share": 0.4, "priority": 1, "slo_p99": "20ms"},
            {"name": "embed", "model": "mlp_b", "share": 0.6, "batch_size": 8, "may_shed": True},
        ]
    },
    where="two.yaml",
)
MODEL_SPACE = SearchSpace(
    {
        "max_batch_size": Choice((4, 16, 64)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
        "instance_count": IntRange(1, 4),
    }
)
#: Four cores: each model may have 1 to 3 instances, the two together at most 4.
BUDGET = InstanceBudget(4)
SPACE = group_space({"mlp_a": MODEL_SPACE, "mlp_b": MODEL_SPACE}, BUDGET)


def two_models(example_repository: Path) -> tuple:
    mlp = load_model_source(example_repository, "mlp")
    return dataclasses.replace(mlp, name="mlp_a"), dataclasses.replace(mlp, name="mlp_b")


@pytest.fixture
def session(example_repository: Path) -> FakeGroupSession:
    return FakeGroupSession(two_models(example_repository), cores=4)


def settings(**overrides) -> WorkloadSearchSettings:
    values = dict(trials=10, seed=1, storage=optuna.storages.InMemoryStorage(), study_name="g", rounds=2)
    values.update(overrides)
    return WorkloadSearchSettings(**values)


# -- the workload file -----------------------------------------------------------------------------
def test_a_class_names_its_model_and_the_workload_routes_each_class():
    assert TRAFFIC.routed and TRAFFIC.models == ("mlp_a", "mlp_b")
    assert TRAFFIC.routes("ignored") == {"chat": "mlp_a", "embed": "mlp_b"}
    assert [c.name for c in TRAFFIC.served_by("mlp_b").classes] == ["embed"]
    assert "chat -> mlp_a" in TRAFFIC.describe()
    # kept by studies and exports: written and read back the same
    assert parse_traffic(TRAFFIC.to_file(), where="again") == TRAFFIC
    assert TRAFFIC.from_dict(TRAFFIC.to_dict(), where="study") == TRAFFIC
    one = parse_traffic({"classes": [{"name": "a", "share": 1}]}, where="w")
    assert not one.routed and one.routes("mlp") == {"a": "mlp"}


def test_a_model_on_some_classes_only_is_one_line_naming_the_file_and_class():
    with pytest.raises(InputError) as err:
        parse_traffic(
            {"classes": [{"name": "a", "share": 1, "model": "m"}, {"name": "b", "share": 1}]},
            where="w.yaml",
        )
    assert str(err.value) == (
        "w.yaml: classes[1] (b): model: missing; when a class names its model, every class "
        "must (a calls 'm')"
    )
    for bad in (3, "../m", ""):
        with pytest.raises(InputError, match=r"^w.yaml: classes\[0\] \(a\): model: expected"):
            parse_traffic({"classes": [{"name": "a", "share": 1, "model": bad}]}, where="w.yaml")


def test_an_unknown_model_names_the_file_the_class_and_the_models_present(
    tmp_path: Path, example_repository: Path
):
    path = tmp_path / "w.yaml"
    path.write_text(
        "classes:\n  - {name: a, share: 1, model: mlp}\n  - {name: b, share: 1, model: nope}\n"
    )
    traffic = read_traffic(path)
    with pytest.raises(InputError) as err:
        open_group_session(example_repository, traffic)
    assert str(err.value) == (
        f"{path}: classes[1] (b): model: 'nope' is not a model of {example_repository} "
        "(models there: mlp)"
    )
    assert "\n" not in str(err.value)


def test_model_must_be_one_of_the_models_the_classes_name(tmp_path: Path, example_repository: Path):
    path = tmp_path / "w.yaml"
    path.write_text("classes:\n  - {name: a, share: 1, model: mlp}\n")
    with pytest.raises(InputError, match=r"^--model other: the classes of .* name the models mlp; give"):
        open_group_session(example_repository, read_traffic(path), "other")
    session = open_group_session(example_repository, read_traffic(path), "mlp")
    assert session.serves.tuned_models == ("mlp",) and session.name == "mlp"


def test_the_cli_refuses_endpoints_and_a_missing_model(tmp_path: Path, example_repository: Path):
    path = tmp_path / "w.yaml"
    path.write_text("classes:\n  - {name: a, share: 1, model: mlp}\n")
    runner = CliRunner()
    shown = runner.invoke(
        app, ["search", "-r", str(example_repository), "--workload", str(path), "--layout", "endpoints"]
    )
    assert shown.exit_code != 0 and "--layout endpoints: the classes of" in shown.output
    plain = tmp_path / "plain.yaml"
    plain.write_text("classes:\n  - {name: a, share: 1}\n")
    shown = runner.invoke(app, ["search", "-r", str(example_repository), "--workload", str(plain)])
    assert shown.exit_code != 0 and "--model: required (the model to search), unless" in shown.output
    shown = runner.invoke(
        app, ["profile", "-r", str(example_repository), "-m", "mlp", "--workload", str(path)]
    )
    assert shown.exit_code != 0 and "its classes name their models (mlp); profile serves" in shown.output
    with pytest.raises(InputError, match="--layout endpoints: the classes"):
        searched_layouts(settings(layouts=(Layout.ENDPOINTS,)), True, TRAFFIC)
    assert searched_layouts(settings(layouts=None), True, TRAFFIC) == (Layout.SHARED,)


# -- the instance budget ---------------------------------------------------------------------------
def test_the_budget_is_the_machines_cores_or_four_per_gpu():
    assert InstanceBudget.of(TargetCapabilities(), cpu_count=8) == InstanceBudget(8, Device.CPU)
    assert InstanceBudget.of(TargetCapabilities(), cpu_count=1).limit == 2  # as one model's range
    gpus = InstanceBudget.of(TargetCapabilities(gpu_count=2), cpu_count=8)
    assert gpus == InstanceBudget(4, Device.GPU)
    assert InstanceBudget(8, reserved=3).available == 5
    assert InstanceBudget(8, reserved=3).describe() == (
        "5 instances in all (8 CPU cores, 3 of them the untuned models' own)"
    )


def test_each_models_range_is_narrowed_to_what_fits_beside_the_others():
    assert SPACE.part("mlp_a").dimensions["instance_count"] == IntRange(1, 3)
    narrow = InstanceBudget(2).narrow({"a": MODEL_SPACE, "b": MODEL_SPACE})
    assert narrow["a"].dimensions["instance_count"] == IntRange(1, 1)
    choices = InstanceBudget(5).narrow({"a": SearchSpace({"instance_count": Choice((1, 2, 4, 8))})})
    assert choices["a"].dimensions["instance_count"] == Choice((1, 2, 4))


def test_a_point_over_the_budget_is_clamped_by_what_it_proposed():
    def variant(a: int, b: int) -> PipelineVariant:
        return PipelineVariant(
            models=(("a", Variant(instance_count=a)), ("b", Variant(instance_count=b)))
        )

    assert BUDGET.clamp(variant(1, 3)) == variant(1, 3)  # fits: unchanged
    assert BUDGET.clamp(variant(3, 3)) == variant(2, 2)
    assert BUDGET.clamp(variant(3, 1)) == variant(3, 1)
    assert InstanceBudget(6).clamp(variant(5, 2)) == variant(4, 2)  # the proposed ratio, about
    own = PipelineVariant(models=(("a", Variant(instance_count=4)), ("b", Variant())))
    assert dict(BUDGET.clamp(own).models)["a"].instance_count == 3  # b keeps its own, counts one


# -- the joint space and its points ----------------------------------------------------------------
def test_each_model_keeps_the_batch_sizes_of_its_own_classes():
    narrowed = workload_space(SPACE, TRAFFIC)
    assert narrowed.part("mlp_a").dimensions["max_batch_size"] == Choice((4, 16, 64))
    assert narrowed.part("mlp_b").dimensions["max_batch_size"] == Choice((16, 64))  # batch of 8
    assert narrowed.budget == BUDGET


def test_a_point_sets_each_models_scheduler_for_its_classes_within_the_budget():
    point = {
        "mlp_a/max_batch_size": 16, "mlp_a/dynamic_batching": True, "mlp_a/instance_count": 3,
        "mlp_a/priorities": True, "mlp_a/admission": "none",
        "mlp_b/max_batch_size": 64, "mlp_b/dynamic_batching": True, "mlp_b/instance_count": 3,
        "mlp_b/admission": 16,
    }  # fmt: skip
    variant = point_variant(SPACE, TRAFFIC, point)
    assert isinstance(variant, PipelineVariant)
    a, b = variant.of("mlp_a"), variant.of("mlp_b")
    assert a.priority_levels == 1 and a.max_queue_size is None  # chat's priority, its own model
    assert b.priority_levels is None and b.max_queue_size == 16  # embed: no priority, bounded
    assert (a.instance_count, b.instance_count) == (2, 2)  # 3 + 3 > 4: clamped


# -- the search ------------------------------------------------------------------------------------
def test_the_search_tunes_both_models_under_each_class_and_beats_the_baseline(session):
    result = run_workload_search(session, SPACE, TRAFFIC, settings())
    for trial in result.trials:
        assert {k.split("/")[0] for k in trial.params} == {"mlp_a", "mlp_b"}
        assert "mlp_b/priorities" not in trial.params  # embed names no priority level
        assert set(trial.knobs[PIPELINE_KNOBS]) == {"mlp_a", "mlp_b"}
    # never more instances than the machine's budget (the baseline is the models' own configs)
    assert max(session.instances_loaded) <= BUDGET.limit
    assert result.baseline is not None and result.baseline.trial is None
    assert set(result.baseline.models) == {"mlp_a", "mlp_b"}
    winner = result.winner
    assert winner is not None and winner.trial is not None
    assert winner.routes == {"chat": "mlp_a", "embed": "mlp_b"}
    assert 'name: "mlp_a"' in winner.models["mlp_a"] and 'name: "mlp_b"' in winner.models["mlp_b"]
    assert winner.median > result.baseline.median
    assert all(f.layout == Layout.SHARED for f in result.finalists)  # no endpoints to split
    results = result.to_dict()
    at_capacity = results["winner_at_capacity"]
    assert at_capacity["by_model"]["mlp_a"]["classes"] == ["chat"]
    assert at_capacity["by_model"]["mlp_b"]["classes"] == ["embed"]
    assert set(at_capacity["served_infer_per_s_by_class"]) == {"chat", "embed"}
    assert all(t["served_infer_per_s_by_class"] for t in results["trials"] if t["error"] is None)


def test_each_class_is_measured_on_its_own_model(session):
    session.load(point_variant(SPACE, TRAFFIC, {"mlp_a/instance_count": 1, "mlp_b/instance_count": 1}))
    level = session.measure_traffic(TRAFFIC, 40.0)
    assert set(level.server) == {"mlp_a", "mlp_b"}
    for name, model in TRAFFIC.routes("").items():
        figures = level.figures(name)
        assert level.server[model].requests == max(int(figures.request_rate * level.span_s), 1)


def test_a_model_tuned_alone_is_measured_beside_the_others_own_config(session):
    only_a = group_space({"mlp_a": MODEL_SPACE}, InstanceBudget(4, reserved=1))
    result = run_workload_search(session, only_a, TRAFFIC, settings(trials=4, rounds=1))
    for trial in result.trials:
        assert {k.split("/")[0] for k in trial.params} == {"mlp_a"}
        assert trial.params["mlp_a/instance_count"] <= 3  # the budget less mlp_b's own instance
    winner = result.winner
    assert winner is not None and set(winner.models) == {"mlp_a", "mlp_b"}
    assert winner.models["mlp_b"] == result.baseline.models["mlp_b"]  # its own config, as it is


def test_a_groups_final_rounds_another_worker_claimed_are_left_to_it(session, tmp_path: Path):
    """Two workers of one group study: the one that finds the final rounds over its finalists
    claimed measures none of them, as for one model's workload (the same driver claims them)."""
    storage = f"sqlite:///{tmp_path / 'g.db'}"
    chosen = settings(storage=storage, trials=3, rounds=1)
    # the budget is spent: the other worker claims the rounds first
    trial_done = final_rounds_claimed_elsewhere(storage, "g", 3, chosen.top)

    rounds: list[int] = []
    progress = WorkloadSearchProgress(
        on_trial_done=trial_done, on_final_round=lambda *a: rounds.append(1)
    )
    result = run_workload_search(session, SPACE, TRAFFIC, chosen, progress)
    assert result.final_rounds_reused and result.final.finalists == () and rounds == []
    assert session.instances_loaded  # the trials were this worker's
