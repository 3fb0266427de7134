"""A space file for a pipeline or for several models on one server (issue 27): keyed by model,
each value a model's own space file mapping; the defaults' rules (batch sizes at or above the
entry's, one instance budget) still hold (no server: sessions are opened, never started)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import optuna
import pytest

from tests.fakes import FakeGroupSession
from tests.groups import two_model_repository
from tests.pipelines import BLS, PIPELINE, STEPS, write_bls, write_pipeline
from tritontune.config.pipeline import Pipeline, PipelineVariant, load_bls_pipeline, load_pipeline
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import PIPELINE_KNOBS, Variant
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.traffic import parse_traffic
from tritontune.search.instance_budget import InstanceBudget
from tritontune.search.pipeline_space import (
    PipelineSpace,
    apply_group_space,
    apply_pipeline_space,
    default_pipeline_space,
    group_space,
)
from tritontune.search.setup import space_for, use_space
from tritontune.search.space import Choice, IntRange, SearchSpace, SpaceSource
from tritontune.search.workload_search import WorkloadSearchSettings, run_workload_search
from tritontune.server.launcher import ServerInfo
from tritontune.serving.opening import open_group_session, open_session
from tritontune.serving.served import ModelGroup, ServedPipeline
from tritontune.serving.session import TuningSession
from tritontune.study.handle import TuningStudy
from tritontune.study.records import StudyIdentity

TARGET = TargetCapabilities()


@pytest.fixture
def pipeline(tmp_path: Path) -> Pipeline:
    """``pipe``: ``shift(scale(x))``, an ensemble whose limit (and its models') is 8."""
    return load_pipeline(write_pipeline(tmp_path / "repository"), PIPELINE)


def defaults(pipeline: Pipeline) -> PipelineSpace:
    return default_pipeline_space(pipeline, TARGET, slo_p99_s=0.1, batch_dims_dynamic={})


def space_file(tmp_path: Path, text: str) -> SpaceSource:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return SpaceSource.file(path)


def test_a_pipelines_file_changes_the_models_it_names_and_keeps_the_others(
    tmp_path: Path, pipeline: Pipeline
):
    default = defaults(pipeline).focused_on("shift", 3)
    source = space_file(
        tmp_path,
        "shift:\n  instance_count: 1\n  max_queue_delay: {min: 200us, max: 2ms}\n"
        "scale:\n  dynamic_batching: false\n",
    )
    space = apply_pipeline_space(source, default, pipeline)
    assert space.models == STEPS  # the pipeline's order, not the file's
    shift, scale = space.part("shift").dimensions, space.part("scale").dimensions
    assert shift["instance_count"] == Choice((1,))
    assert shift["max_queue_delay"] == IntRange(200, 2000, log=True)
    assert scale["dynamic_batching"] == Choice((False,))
    for model, part in (("shift", shift), ("scale", scale)):  # what the file leaves, as it was
        for name, dimension in default.part(model).dimensions.items():
            if (model, name) not in {
                ("shift", "instance_count"),
                ("shift", "max_queue_delay"),
                ("scale", "dynamic_batching"),
            }:
                assert part[name] == dimension, (model, name)
    assert space.dimensions["shift/instance_count"] == Choice((1,))  # what the sampler sees
    assert (space.focus, space.focus_trials, space.calls) == ("shift", 3, False)
    point = {"shift/instance_count": 1, "scale/dynamic_batching": False}
    assert space.to_variant(point).of("shift").instance_count == 1
    # Every point the sampler proposes keeps the fixed value.
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=4))
    for _ in range(20):
        trial = study.ask()
        assert space.suggest(trial)["shift/instance_count"] == 1
        study.tell(trial, 1.0)


def test_while_the_bottleneck_is_searched_alone_the_others_keep_what_the_file_fixes(
    tmp_path: Path, pipeline: Pipeline
):
    source = space_file(
        tmp_path,
        "scale:\n  instance_count: 2\n  max_queue_delay: 1ms\n  preferred_batch_size: [none, max]\n"
        "shift:\n  dynamic_batching: true\n  max_queue_delay: 1500us\n",
    )
    space = apply_pipeline_space(source, defaults(pipeline), pipeline).focused_on("shift", 3)
    assert space.pinned == (
        ("scale", ("instance_count", "max_queue_delay")),  # a list of two is not fixed
        ("shift", ("dynamic_batching", "max_queue_delay")),
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    trial = study.ask()  # trial 0: shift searched alone
    point = space.suggest(trial)
    study.tell(trial, 1.0)
    # scale: its fixed instances; not the delay (its batching is not fixed: its own config's).
    assert {k: v for k, v in point.items() if k.startswith("scale/")} == {"scale/instance_count": 2}
    assert point["shift/max_queue_delay"] == 1500 and point["shift/dynamic_batching"] is True
    assert "scale/instance_count" not in trial.params  # one value: nothing asked of the sampler
    variant = space.to_variant(point)
    assert variant.of("scale") == Variant(instance_count=2)
    # The same after the space is changed (as the search narrows precisions, the focus kept).
    changed = space.replace("shift/instance_count", Choice((1,)))
    assert (changed.pinned, changed.focus) == (space.pinned, "shift")
    # Without a file, a model searched alone leaves the others their own configs.
    plain = defaults(pipeline).focused_on("shift", 3)
    trial = study.ask()
    assert not any(k.startswith("scale/") for k in plain.suggest(trial))


def test_an_empty_file_is_the_default_space(tmp_path: Path, pipeline: Pipeline):
    assert apply_pipeline_space(space_file(tmp_path, ""), defaults(pipeline), pipeline) == defaults(
        pipeline
    )


def test_a_narrowed_pipeline_space_round_trips_through_a_resumed_study(
    tmp_path: Path, pipeline: Pipeline
):
    source = space_file(tmp_path, "shift: {instance_count: 2, max_queue_delay: 1500us}\n")
    space = apply_pipeline_space(source, defaults(pipeline), pipeline)
    assert json.loads(json.dumps(space.to_dict())) == space.to_dict()
    assert space.to_dict()["shift"]["instance_count"] == [2]
    url = f"sqlite:///{tmp_path / 's.db'}"
    identity = StudyIdentity(model=PIPELINE, slo_p99_s=0.1, load_mode=LoadMode.CONCURRENCY)

    def study() -> TuningStudy:
        sampler = optuna.samplers.RandomSampler(seed=0)
        return TuningStudy.create_or_resume(url, "s", identity=identity, sampler=sampler)

    use_space(study(), space)
    resumed = study()
    assert resumed.resumed and resumed.recorded_space() == space.to_dict()
    use_space(resumed, apply_pipeline_space(source, defaults(pipeline), pipeline))  # the same file
    other = space_file(tmp_path, "shift: {instance_count: 1}\n")
    with pytest.raises(InputError, match="searched another space"):
        use_space(study(), apply_pipeline_space(other, defaults(pipeline), pipeline))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "instance_count: 1\n",
            "instance_count: a pipeline's space is keyed by model: MODEL: {instance_count: ...}; "
            "models: scale, shift",
        ),
        (
            "[scale, shift]\n",
            "a pipeline's space is keyed by model: MODEL: {instance_count: ...}; models: scale, shift",
        ),
        ("decoder: {instance_count: 1}\n", "decoder: not a model of the pipeline; models: scale, shift"),
        (
            "pipe: {instance_count: 1}\n",
            "pipe: 'pipe' is the ensemble: it has no knobs of its own (Triton refuses instances or a "
            "batcher on it), its composing models are tuned; models: scale, shift",
        ),
        (
            "shift: 2\n",
            "shift: expected a mapping of dimension names to values, e.g. shift: {instance_count: 1}",
        ),
        (
            "shift:\n",
            "shift: expected a mapping of dimension names to values, e.g. shift: {instance_count: 1}",
        ),
        ("shift: {instances: 2}\n", "shift: unknown dimension(s) instances; known: max_batch_size"),
        ("shift: {instance_count: 0}\n", "shift: instance_count: 0 is not a whole number >= 1"),
        ("shift: {max_queue_delay: 500}\n", "shift: max_queue_delay: 500 has no unit"),
        (
            "shift: {max_batch_size: [4, 8, 16]}\n",
            "shift: max_batch_size: 4 below the entry's max_batch_size 8: Triton refuses a pipeline "
            "that lets a client send a batch one of its models cannot take (give sizes of 8 or more)",
        ),
        (
            "shift: {accuracy_kind: embedding}\n",
            "shift: accuracy_kind: not read per model; give --accuracy-kind (by output name, or *), "
            "which every model's precision checks read",
        ),
        ("accuracy_kind: embedding\n", "accuracy_kind: not read per model; give --accuracy-kind"),
        (
            "shift: {precision: [fp32, fp16]}\n",
            "shift: precision: 'shift' has no precision variants to search",
        ),
    ],
)
def test_a_bad_pipeline_space_file_is_one_line_naming_the_file_and_the_key(
    tmp_path: Path, pipeline: Pipeline, text: str, message: str
):
    source = space_file(tmp_path, text)
    with pytest.raises(InputError) as err:
        apply_pipeline_space(source, defaults(pipeline), pipeline)
    assert str(err.value).startswith(f"{source.where}: {message}")
    assert "\n" not in str(err.value)


def test_fp32_alone_and_batch_sizes_at_the_entrys_limit_or_above_are_taken(
    tmp_path: Path, pipeline: Pipeline
):
    source = space_file(tmp_path, "scale: {precision: fp32, max_batch_size: [8, 16]}\n")
    scale = apply_pipeline_space(source, defaults(pipeline), pipeline).part("scale")
    assert scale.dimensions["max_batch_size"] == Choice((8, 16))
    assert scale.dimensions["precision"] == Choice(("fp32",))


def test_a_bls_models_own_batch_limit_is_kept_and_its_other_knobs_are_changed(tmp_path: Path):
    bls = load_bls_pipeline(write_bls(tmp_path / "repository"), BLS, STEPS)
    default = default_pipeline_space(bls, TARGET, slo_p99_s=0.1, batch_dims_dynamic={})
    kept = space_file(tmp_path, "chain: {max_batch_size: 8, instance_count: 2}\n")
    space = apply_pipeline_space(kept, default, bls)
    assert space.calls and space.models == (BLS, *STEPS)
    assert space.part(BLS).dimensions["instance_count"] == Choice((2,))
    changed = space_file(tmp_path, "chain: {max_batch_size: [8, 16]}\n")
    with pytest.raises(InputError) as err:
        apply_pipeline_space(changed, default, bls)
    assert str(err.value) == (
        f"{changed.where}: chain: max_batch_size: a BLS model's own max_batch_size is its "
        "clients' contract: it stays 8 (its config's)"
    )
    below = space_file(tmp_path, "shift: {max_batch_size: 4}\n")
    with pytest.raises(InputError, match=r"shift: max_batch_size: 4 below the entry's max_batch_size 8"):
        apply_pipeline_space(below, default, bls)


def _serving_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """A session that was never started answers as a local CPU server would."""
    info = ServerInfo("127.0.0.1:1", None, None, "2.51.0", TARGET, "local")
    monkeypatch.setattr(TuningSession, "info", property(lambda self: info))


def test_space_for_reads_a_pipelines_file_and_a_config_files_space(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    _serving_here(monkeypatch)
    session = open_session(write_pipeline(tmp_path / "repository"), PIPELINE)
    assert isinstance(session.serves, ServedPipeline)
    space = space_for(session, 0.1, space_file(tmp_path, "shift: {instance_count: 2}\n"))
    assert isinstance(space, PipelineSpace)
    assert space.dimensions["shift/instance_count"] == Choice((2,))
    assert (
        space.dimensions["scale/instance_count"]
        == space_for(session, 0.1).dimensions["scale/instance_count"]
    )
    inline = SpaceSource("tt.yaml: search.space", inline={"instance_count": 1})
    with pytest.raises(InputError, match=r"^tt.yaml: search.space: instance_count: a pipeline's space"):
        space_for(session, 0.1, inline)


# -- several models on one server ------------------------------------------------------------------
MODEL = SearchSpace(
    {
        "max_batch_size": Choice((4, 16, 64)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
        "instance_count": IntRange(1, 4),
    }
)
PARTS = {"mlp_a": MODEL, "mlp_b": MODEL}


def test_a_groups_file_is_applied_before_the_budget_narrows_the_others(tmp_path: Path):
    source = space_file(tmp_path, "mlp_a: {instance_count: 2}\n")
    space = apply_group_space(source, PARTS, InstanceBudget(4))
    assert space.part("mlp_a").dimensions["instance_count"] == Choice((2,))
    assert space.part("mlp_b").dimensions["instance_count"] == IntRange(1, 2)  # 4 less mlp_a's 2
    assert space.budget == InstanceBudget(4)
    # Without the file, each model may have 3 (one left for the other).
    assert group_space(PARTS, InstanceBudget(4)).part("mlp_b").dimensions["instance_count"] == (
        IntRange(1, 3)
    )
    ranged = space_file(tmp_path, "mlp_a: {instance_count: {min: 2, max: 4}}\n")
    narrowed = apply_group_space(ranged, PARTS, InstanceBudget(5))
    assert narrowed.part("mlp_a").dimensions["instance_count"] == IntRange(2, 4)
    assert narrowed.part("mlp_b").dimensions["instance_count"] == IntRange(1, 3)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "mlp_a: {instance_count: 4}\n",
            "instance_count: the models' fewest instances (mlp_a 4, mlp_b 1) add up to 5, more than "
            "they share: 4 instances in all (4 CPU cores); lower a fixed count or a range's min",
        ),
        (
            "mlp_a: {instance_count: {min: 3, max: 4}}\nmlp_b: {instance_count: [2, 3]}\n",
            "instance_count: the models' fewest instances (mlp_a 3, mlp_b 2) add up to 5",
        ),
        (
            "max_batch_size: [4, 16]\n",
            "max_batch_size: a group's space is keyed by model: MODEL: {max_batch_size: ...}; "
            "models: mlp_a, mlp_b",
        ),
        ("mlp_c: {instance_count: 1}\n", "mlp_c: not a model of the group; models: mlp_a, mlp_b"),
        ("mlp_b: {instance_count: many}\n", "mlp_b: instance_count: 'many' is not a whole number"),
        ("mlp_b: {accuracy_kind: embedding}\n", "mlp_b: accuracy_kind: not read per model"),
    ],
)
def test_a_bad_group_space_file_is_one_line(tmp_path: Path, text: str, message: str):
    source = space_file(tmp_path, text)
    with pytest.raises(InputError) as err:
        apply_group_space(source, PARTS, InstanceBudget(4))
    assert str(err.value).startswith(f"{source.where}: {message}")


def test_one_instance_each_is_still_allowed_where_the_budget_is_smaller():
    parts = {name: MODEL for name in ("a", "b", "c")}
    budget = InstanceBudget(2)  # 3 models on 2 cores: one each, as without a file
    budget.check_fits(parts, "space.yaml")
    assert all(s.dimensions["instance_count"] == IntRange(1, 1) for s in budget.narrow(parts).values())


def test_a_clamped_point_keeps_the_instance_count_the_file_fixes(tmp_path: Path):
    parts = {name: MODEL.replace("instance_count", IntRange(1, 8)) for name in ("a", "b", "c")}
    source = space_file(tmp_path, "a: {instance_count: 3}\n")
    space = apply_group_space(source, parts, InstanceBudget(8))
    assert space.part("b").dimensions["instance_count"] == IntRange(1, 4)  # 8 less a's 3, c's 1
    proposed = {"a": 3, "b": 4, "c": 4}
    variant = space.to_variant({f"{m}/instance_count": n for m, n in proposed.items()})
    counts = {m: v.instance_count for m, v in variant.models}
    assert counts == {"a": 3, "b": 3, "c": 2}  # 3 + 4 + 4 > 8: b and c share what a leaves
    # Without the fix, the clamp splits all by demand and a's count would change.
    models = tuple((m, Variant(instance_count=n)) for m, n in proposed.items())
    plain = InstanceBudget(8).clamp(PipelineVariant(models=models))
    assert dict(plain.models)["a"].instance_count == 2


TRAFFIC = parse_traffic(
    {
        "classes": [
            {"name": "chat", "model": "mlp_a", "share": 0.4, "slo_p99": "20ms"},
            {"name": "embed", "model": "mlp_b", "share": 0.6, "batch_size": 8, "may_shed": True},
        ]
    },
    where="two.yaml",
)


def test_a_group_search_measures_every_trial_with_the_fixed_instance_count(
    tmp_path: Path, example_repository: Path
):
    from tests.search.test_group_search import two_models

    session = FakeGroupSession(two_models(example_repository), cores=4)
    source = space_file(tmp_path, "mlp_a: {instance_count: 2}\n")
    space = apply_group_space(source, PARTS, InstanceBudget(4))
    settings = WorkloadSearchSettings(
        trials=6, seed=2, storage=optuna.storages.InMemoryStorage(), study_name="g", rounds=1
    )
    result = run_workload_search(session, space, TRAFFIC, settings)
    assert len(result.trials) == 6
    for trial in result.trials:
        assert "mlp_a/instance_count" not in trial.params or trial.params["mlp_a/instance_count"] == 2
        groups = trial.knobs[PIPELINE_KNOBS]["mlp_a"]["instance_group"]
        assert [g["count"] for g in groups] == [2]
    assert max(session.instances_loaded) <= 4


def test_space_for_reads_a_groups_file_and_refuses_a_model_served_as_it_is(
    tmp_path: Path, example_repository: Path, monkeypatch: pytest.MonkeyPatch
):
    _serving_here(monkeypatch)
    repository = two_model_repository(tmp_path, example_repository)
    session = open_group_session(repository, TRAFFIC)
    assert isinstance(session.serves, ModelGroup)
    space = space_for(session, 0.02, space_file(tmp_path, "mlp_b: {instance_count: 1}\n"))
    assert isinstance(space, PipelineSpace) and space.budget is not None
    assert space.dimensions["mlp_b/instance_count"] == Choice((1,))
    only_a = open_group_session(repository, TRAFFIC, "mlp_a")
    source = space_file(tmp_path, "mlp_b: {instance_count: 1}\n")
    with pytest.raises(InputError) as err:
        space_for(only_a, 0.02, source)
    assert str(err.value) == (
        f"{source.where}: mlp_b: served with its own config in this search (--model tunes mlp_a "
        "only); models: mlp_a"
    )
    assert dataclasses.asdict(space.budget)["reserved"] == 0


def test_a_file_narrows_an_onnx_models_precision_variants(tmp_path: Path, example_repository: Path):
    from tests.pipelines import SCORED, write_onnx_pipeline

    pipeline = load_pipeline(write_onnx_pipeline(tmp_path / "repo", example_repository), SCORED)
    defaults = default_pipeline_space(
        pipeline,
        TARGET,
        slo_p99_s=0.1,
        batch_dims_dynamic={"mlp": True},
        precision_variants=True,
    )
    assert "mlp/precision" in defaults.dimensions and "scale/precision" not in defaults.dimensions
    narrowed = apply_pipeline_space(
        space_file(tmp_path, "mlp: {precision: [fp32, int8_dynamic]}\n"), defaults, pipeline
    )
    assert narrowed.dimensions["mlp/precision"] == Choice(("fp32", "int8_dynamic"))
    with pytest.raises(InputError, match="'scale' has no precision variants to search"):
        apply_pipeline_space(space_file(tmp_path, "scale: {precision: [fp16]}\n"), defaults, pipeline)
