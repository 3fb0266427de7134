"""A pipeline's joint space: names, variants, the bottleneck-first focus (no server)."""

from __future__ import annotations

import optuna
import pytest

from tests.search.test_first_trials import cpu_space
from tritontune.config.pipeline import PipelineVariant
from tritontune.config.variant import Variant
from tritontune.errors import InputError
from tritontune.search.first_trials import FirstTrials
from tritontune.search.optimize import _focus_on_bottleneck, simplicity
from tritontune.search.pipeline_space import PipelineSpace, default_pipeline_space, split_name
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.study.figures import OperatingPoint, StepFigure, bottleneck

TOKENIZER = SearchSpace({"max_batch_size": Choice((8, 16)), "instance_count": IntRange(1, 2)})
ENCODER = SearchSpace(
    {
        "max_batch_size": Choice((8, 16, 32)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": IntRange(100, 5000, log=True),
    }
)


def space() -> PipelineSpace:
    return PipelineSpace.of({"tokenizer": TOKENIZER, "encoder": ENCODER})


def ask(study: optuna.Study, s: PipelineSpace) -> dict:
    trial = study.ask()
    point = s.suggest(trial)
    study.tell(trial, 1.0)
    return point


def test_every_models_knob_is_a_dimension_named_model_slash_knob():
    s = space()
    assert set(s.dimensions) == {
        "tokenizer/max_batch_size",
        "tokenizer/instance_count",
        "encoder/max_batch_size",
        "encoder/dynamic_batching",
        "encoder/max_queue_delay",
    }
    assert s.size() == 2 * 2 * 3 * 1 * (5000 - 100 + 1)
    assert s.describe()["encoder/max_queue_delay"].startswith("100us..5ms")
    assert s.to_dict() == {"tokenizer": TOKENIZER.to_dict(), "encoder": ENCODER.to_dict()}


def test_a_point_becomes_one_variant_per_model():
    s = space()
    point = ask(optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1)), s)
    assert set(point) == set(s.dimensions)
    variant = s.to_variant(point)
    assert isinstance(variant, PipelineVariant)
    assert variant.of("tokenizer").max_batch_size == point["tokenizer/max_batch_size"]
    assert variant.of("encoder").max_queue_delay_us == point["encoder/max_queue_delay"]
    assert variant.of("encoder").dynamic_batching is True
    assert variant.of("not-a-step") == Variant()  # a model it does not name keeps its config
    assert set(variant.to_dict()) == {"tokenizer", "encoder"}


def test_names_that_name_no_model_are_refused_with_the_models():
    with pytest.raises(InputError, match="names no composing model"):
        split_name("max_batch_size")
    with pytest.raises(InputError, match="no composing model 'decoder'.*tokenizer, encoder"):
        space().to_variant({"decoder/max_batch_size": 8})
    with pytest.raises(InputError, match="no composing model 'decoder'"):
        space().focused_on("decoder", 3)


def test_replace_changes_one_models_dimension_and_keeps_the_focus():
    s = space().focused_on("encoder", 4).replace("encoder/max_batch_size", Choice((32,)))
    assert s.part("encoder").dimensions["max_batch_size"] == Choice((32,))
    assert s.part("tokenizer") == TOKENIZER
    assert (s.focus, s.focus_trials) == ("encoder", 4)


def test_a_focused_space_proposes_the_bottlenecks_knobs_alone_then_every_models():
    s = space().focused_on("encoder", 3)
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=2))
    points = [ask(study, s) for _ in range(5)]
    for point in points[:3]:
        assert point and all(name.startswith("encoder/") for name in point)
        assert s.to_variant(point).of("tokenizer") == Variant()  # its own config meanwhile
    for point in points[3:]:
        assert set(point) == set(s.dimensions)


def step(model: str, queue_ms: float, compute_ms: float) -> StepFigure:
    return StepFigure(model, queue_ms / 1e3, compute_ms / 1e3, 1.0)


def baseline(*steps: StepFigure) -> OperatingPoint:
    return OperatingPoint(0.1, "concurrency", True, 4, 100.0, 0.01, 0.02, 0.0, 0.0, 1.0, steps=steps)  # type: ignore[arg-type]


def test_the_bottleneck_is_the_step_with_the_most_queue_and_compute():
    # The tokenizer computes less but its queue makes it the slower step end to end.
    steps = (step("tokenizer", 9.0, 1.0), step("encoder", 2.0, 7.0))
    found = bottleneck(steps)
    assert found is not None and found.model == "tokenizer"
    assert bottleneck(()) is None


def test_a_bls_models_own_share_leaves_out_the_calls_it_waits_for():
    # The BLS model computes 10 ms, 9 of them waiting for the encoder it calls.
    steps = (step("bls", 0.5, 10.0), step("tokenizer", 0.2, 0.8), step("encoder", 1.0, 7.0))
    assert bottleneck(steps).model == "bls"  # type: ignore[union-attr]
    assert bottleneck(steps, caller="bls").model == "encoder"  # type: ignore[union-attr]
    # Its own queue counts in full: requests waiting for a free BLS instance.
    queued = (step("bls", 20.0, 10.0), *steps[1:])
    assert bottleneck(queued, caller="bls").model == "bls"  # type: ignore[union-attr]


def test_the_search_focuses_on_the_baselines_bottleneck_for_half_the_budget():
    measured = baseline(step("tokenizer", 0.1, 0.2), step("encoder", 1, 9))
    focused = _focus_on_bottleneck(space(), measured, 12)
    assert (focused.focus, focused.focus_trials) == ("encoder", 6)
    assert _focus_on_bottleneck(space(), baseline(), 12).focus is None  # no step figures
    assert _focus_on_bottleneck(space(), None, 12).focus is None  # another worker's baseline
    assert _focus_on_bottleneck(space(), baseline(step("encoder", 1, 1)), 2).focus_trials == 3


def test_the_focus_outlasts_the_bottlenecks_precisions_and_splits_where_the_budget_allows():
    # 4 precisions at 1 x 2, then 2 x 1: 5 trials of the encoder alone, one left to the rest
    joint = PipelineSpace.of({"tokenizer": TOKENIZER, "encoder": cpu_space(2)})
    measured = baseline(step("tokenizer", 0.1, 0.2), step("encoder", 1, 9))
    assert FirstTrials.of(cpu_space(2)).essential() == 5
    focus = {n: _focus_on_bottleneck(joint, measured, n).focus_trials for n in (4, 6, 8, 12, 20)}
    assert focus == {4: 3, 6: 5, 8: 5, 12: 6, 20: 10}


def test_step_figures_survive_the_study():
    point = baseline(step("tokenizer", 0.5, 1.25), step("encoder", 3.0, 12.5))
    again = OperatingPoint.from_dict(point.to_dict())
    assert again.steps == point.steps
    assert "steps" not in baseline().to_dict()  # a single model's point is unchanged


def test_composing_batch_sizes_stay_at_or_above_the_ensembles(tmp_path):
    from tests.pipelines import PIPELINE, write_pipeline
    from tritontune.config.pipeline import load_pipeline
    from tritontune.config.validate import TargetCapabilities

    repository = write_pipeline(tmp_path)
    config = repository / PIPELINE / "config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size: 8", "max_batch_size: 4"))
    for model in ("scale", "shift"):
        path = repository / model / "config.pbtxt"
        path.write_text(path.read_text().replace("max_batch_size: 8", "max_batch_size: 16"))
    pipeline = load_pipeline(repository, PIPELINE)
    target = TargetCapabilities(gpu_count=0, response_cache=False, backends=frozenset({"python"}))
    s = default_pipeline_space(pipeline, target, slo_p99_s=0.1, batch_dims_dynamic={})
    assert s.models == ("scale", "shift")
    for model in s.models:
        assert s.part(model).dimensions["max_batch_size"] == Choice((4, 8, 16))
        assert "precision" not in s.part(model).dimensions


def test_simplicity_of_a_pipeline_adds_its_models_instances_and_delays():
    from tritontune.config.model_config import ModelConfig
    from tritontune.config.variant import apply_variant

    base = ModelConfig(name="m", max_batch_size=8)
    one = apply_variant(base, Variant(instance_count=2, max_queue_delay_us=100))
    two = apply_variant(base, Variant(instance_count=1, max_batch_size=16, max_queue_delay_us=50))
    assert simplicity([one, two]) == (3.0, 16.0, 150.0)
    assert simplicity([one]) == (2.0, 8.0, 100.0)
