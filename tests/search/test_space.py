from pathlib import Path

import optuna
import pytest

from tritontune.config.model_config import read_config
from tritontune.config.validate import TargetCapabilities
from tritontune.errors import InputError
from tritontune.search.space import (
    Choice,
    IntRange,
    SearchSpace,
    SpaceSource,
    apply_space,
    default_space,
    effective_point,
)


def load_space_file(path: Path, defaults: SearchSpace) -> SearchSpace:
    return apply_space(SpaceSource.file(path), defaults)


@pytest.fixture
def base(example_repository: Path):
    return read_config(example_repository / "mlp" / "config.pbtxt")


def test_default_space_from_model_and_server(base):
    space = default_space(
        base, TargetCapabilities(gpu_count=0), slo_p99_s=0.05, batch_dim_dynamic=True, cpu_count=2
    )
    dims = space.dimensions
    assert dims["max_batch_size"] == Choice((1, 2, 4, 8, 16, 32, 64, 128))
    assert dims["dynamic_batching"] == Choice((False, True))  # batching is not assumed to help
    assert dims["max_queue_delay"] == IntRange(20, 25_000, log=True)  # up to half the SLO
    assert dims["instance_kind"] == Choice(("cpu",))
    assert dims["instance_count"] == IntRange(1, 2)
    assert dims["intra_op_thread_count"] == IntRange(1, 2)
    assert "response_cache" not in dims
    gpu = default_space(base, TargetCapabilities(gpu_count=2), slo_p99_s=0.05, batch_dim_dynamic=False)
    assert gpu.dimensions["instance_kind"] == Choice(("gpu",))
    assert gpu.dimensions["max_batch_size"].values[-1] == 64  # the config's limit


def test_batching_knobs_only_when_batching_is_on():
    space = SearchSpace(
        {
            "max_batch_size": Choice((8, 16)),
            "dynamic_batching": Choice((False, True)),
            "max_queue_delay": IntRange(100, 1000, log=True),
            "preferred_batch_size": Choice(("none", "max")),
        }
    )
    off = space.suggest(optuna.trial.FixedTrial({"max_batch_size": 8, "dynamic_batching": False}))
    assert off == {"max_batch_size": 8, "dynamic_batching": False}
    variant = space.to_variant(off)
    assert variant.dynamic_batching is False and variant.max_queue_delay_us is None

    point = {
        "max_batch_size": 16,
        "dynamic_batching": True,
        "max_queue_delay": 500,
        "preferred_batch_size": "max",
    }
    assert space.suggest(optuna.trial.FixedTrial(point)) == point
    variant = space.to_variant(point)
    assert variant.preferred_batch_sizes == (16,)
    assert variant.max_queue_delay_us == 500
    none = space.to_variant({**point, "preferred_batch_size": "none"})
    assert none.preferred_batch_sizes == ()


def test_a_max_batch_size_without_the_batcher_is_one_config():
    """Triton's default scheduler runs each request as it came: without the dynamic batcher,
    every size above 0 serves alike, and the search must measure that config once."""
    off = {"max_batch_size": 1, "dynamic_batching": False, "instance_count": 2}
    assert effective_point(off) == effective_point({**off, "max_batch_size": 128})
    assert effective_point(off) != effective_point({**off, "instance_count": 1})
    # with the batcher, the size bounds its batches; 0 means no batch dimension at all
    on = {"max_batch_size": 8, "dynamic_batching": True, "max_queue_delay": 100}
    assert effective_point(on) != effective_point({**on, "max_batch_size": 16})
    assert effective_point({**off, "max_batch_size": 0}) != effective_point(off)
    # a pipeline's knobs, model by model: only the step without its batcher is made equal
    steps = {"a/max_batch_size": 4, "a/dynamic_batching": False, "b/max_batch_size": 4,
             "b/dynamic_batching": True, "b/max_queue_delay": 100}  # fmt: skip
    same = effective_point({**steps, "a/max_batch_size": 32})
    assert same == effective_point(steps)
    assert effective_point({**steps, "b/max_batch_size": 32}) != effective_point(steps)
    assert effective_point(off) is not off and off["max_batch_size"] == 1  # a copy, not a change


def test_fixed_dimensions_are_not_asked_for():
    space = SearchSpace({"instance_count": IntRange(2, 2), "intra_op_thread_count": Choice((1,))})
    point = space.suggest(optuna.trial.FixedTrial({}))
    assert point == {"instance_count": 2, "intra_op_thread_count": 1}
    variant = space.to_variant(point)
    assert variant.backend_parameters == {"intra_op_thread_count": "1"}
    assert space.size() == 1


def test_space_file_fixes_narrows_widens(tmp_path: Path, base):
    defaults = default_space(base, TargetCapabilities(), slo_p99_s=0.05, batch_dim_dynamic=True)
    path = tmp_path / "space.yaml"
    path.write_text(
        "max_batch_size: [8, 16, 32, 64]\n"
        "max_queue_delay: {min: 100us, max: 10ms}\n"
        "instance_count: {min: 1, max: 6}\n"
        "intra_op_thread_count: 1\n"
        "response_cache: [false]\n"
        "preferred_batch_size: [none, max]\n"
    )
    space = load_space_file(path, defaults)
    assert space.dimensions["max_batch_size"] == Choice((8, 16, 32, 64))
    assert space.dimensions["max_queue_delay"] == IntRange(100, 10_000, log=True)
    assert space.dimensions["instance_count"] == IntRange(1, 6)
    assert space.dimensions["intra_op_thread_count"] == Choice((1,))
    assert space.dimensions["dynamic_batching"] == defaults.dimensions["dynamic_batching"]
    assert space.describe()["max_queue_delay"] == "100us..10ms (log)"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("max_batch_sise: [8]\n", "unknown dimension(s) max_batch_sise"),
        ("instance_count: {min: 4, max: 2}\n", "empty range (min 4 > max 2)"),
        ("max_batch_size: []\n", "empty list"),
        ("max_batch_size: [8, big]\n", "'big' is not a whole number >= 0"),
        ("max_queue_delay: [soon]\n", "'soon' is not a duration"),
        ("max_queue_delay: [500]\n", "max_queue_delay: 500 has no unit; expected one of us, ms"),
        ("max_queue_delay: {min: 100, max: 2ms}\n", "100 has no unit"),
        ("max_queue_delay: [2m]\n", "'2m' is ambiguous ('m'); write 2ms for milliseconds"),
        ("dynamic_batching: {min: 1, max: 2}\n", "takes a list of values, not a range"),
        ("instance_count: {min: 1}\n", "a range is {min: ..., max: ...}"),
        ("preferred_batch_size: [all]\n", "'all' is not one of none, max"),
        ("- just\n- a list\n", "expected a mapping"),
        ("max_batch_size: [8\n", "not valid YAML"),
    ],
)
def test_bad_space_files(tmp_path: Path, text: str, message: str):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(InputError) as err:
        load_space_file(path, SearchSpace({}))
    assert message in str(err.value)
    assert str(err.value).startswith(str(path))


def test_missing_space_file(tmp_path: Path):
    with pytest.raises(InputError, match="cannot read the space file"):
        load_space_file(tmp_path / "absent.yaml", SearchSpace({}))


def test_numeric_choices_are_ordered_for_the_sampler():
    batch = Choice((8, 16, 32, 64))
    assert batch.ordered and not Choice((1, 2)).ordered and not Choice((False, True)).ordered
    assert [batch.snap(x) for x in (5.0, 11.0, 12.0, 30.0, 46.0, 90.0)] == [8, 8, 16, 32, 64, 64]
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    picks = []
    for _ in range(400):
        trial = study.ask()
        picks.append(batch.suggest(trial, "max_batch_size"))
        study.tell(trial, 0.0)
    # Optuna sees an ordered (log-scaled float) dimension, not categories ...
    dist = study.trials[0].distributions["max_batch_size"]
    assert isinstance(dist, optuna.distributions.FloatDistribution) and dist.log
    # ... and every value gets its fair share of it, the end values included.
    shares = [picks.count(v) / len(picks) for v in batch.values]
    assert all(0.17 < share < 0.33 for share in shares), shares


def test_ordered_choice_accepts_its_own_values_back():
    # resuming enqueues the recorded values; a grid enqueues exact values too
    delays = Choice((100, 500, 2000, 8000))
    for value in delays.values:
        assert delays.suggest(optuna.trial.FixedTrial({"d": value}), "d") == value


def test_graph_optimization_is_searched_for_onnxruntime_models(base, tmp_path: Path):
    space = default_space(
        base, TargetCapabilities(gpu_count=0), slo_p99_s=0.05, batch_dim_dynamic=True, cpu_count=2
    )
    assert space.dimensions["graph_optimization"] == Choice(("all", "extended", "basic"))
    assert space.to_variant({"graph_optimization": "basic"}).graph_optimization == "basic"
    path = tmp_path / "space.yaml"
    path.write_text("graph_optimization: [extended, disabled]\n")
    assert load_space_file(path, space).dimensions["graph_optimization"] == Choice(
        ("extended", "disabled")
    )
    path.write_text("graph_optimization: [fast]\n")
    with pytest.raises(InputError, match="'fast' is not one of all, extended, basic, disabled"):
        load_space_file(path, space)


def test_a_space_file_may_declare_output_kinds(tmp_path: Path):
    from tritontune.precision.accuracy import OutputKind
    from tritontune.search.space import space_file_output_kinds

    path = tmp_path / "space.yaml"
    path.write_text("precision: [fp32, int8_dynamic]\naccuracy_kind: {sentence_embedding: embedding}\n")
    kinds = space_file_output_kinds(SpaceSource.file(path))
    assert kinds == {"sentence_embedding": OutputKind.EMBEDDING}
    assert load_space_file(path, SearchSpace({})).dimensions == {
        "precision": Choice(("fp32", "int8_dynamic"))
    }
    path.write_text("accuracy_kind: classifier\n")
    assert space_file_output_kinds(SpaceSource.file(path)) == {"*": OutputKind.CLASSIFIER}
    path.write_text("accuracy_kind: [embedding]\n")
    with pytest.raises(InputError, match="accuracy_kind: expected a kind"):
        space_file_output_kinds(SpaceSource.file(path))
    path.write_text("accuracy_kind: vector\n")
    with pytest.raises(InputError, match="accuracy_kind: 'vector' is not an output kind"):
        space_file_output_kinds(SpaceSource.file(path))


def test_a_config_files_space_mapping_is_read_like_a_space_file():
    source = SpaceSource("tritontune.yaml: search.space", inline={"max_batch_size": [8, 16]})
    assert apply_space(source, SearchSpace({})).dimensions == {"max_batch_size": Choice((8, 16))}
    bad = SpaceSource("tritontune.yaml: search.space", inline={"max_queue_delay": [500]})
    with pytest.raises(InputError, match=r"^tritontune.yaml: search.space: max_queue_delay: 500 has no"):
        apply_space(bad, SearchSpace({}))


def test_the_dashboard_shows_each_knobs_real_value():
    """optuna-dashboard shows a trial's params and user attributes: the search's sampler snaps an
    ordered dimension before Optuna stores it, so the param is the value the config used; each
    knob is also kept as ``value:KNOB`` (with its unit)."""
    from tritontune.search.sampler import snapping
    from tritontune.search.space import DIMENSIONS
    from tritontune.study.handle import TuningStudy

    space = SearchSpace(
        {
            "max_batch_size": Choice((4, 8, 16, 32, 64)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((100, 500, 2000, 8000)),
            "instance_count": IntRange(1, 4),
        }
    )
    study = optuna.create_study(
        storage=optuna.storages.InMemoryStorage(),
        sampler=snapping(optuna.samplers.TPESampler(seed=1, n_startup_trials=4), space),
    )
    for _ in range(12):  # past the random start: TPE's own proposals are snapped too
        trial = study.ask()
        point = space.suggest(trial)
        TuningStudy.of(study).save_point(trial, point, DIMENSIONS)
        study.tell(trial, float(point["max_batch_size"]))
    for frozen in study.trials:
        attrs = frozen.user_attrs
        assert frozen.params["max_batch_size"] in (4, 8, 16, 32, 64)
        assert frozen.params["max_queue_delay"] in (100, 500, 2000, 8000)
        assert attrs["value:max_batch_size"] == frozen.params["max_batch_size"]
        assert attrs["value:max_queue_delay_us"] == frozen.params["max_queue_delay"]
        assert attrs["value:dynamic_batching"] is True
        assert attrs["value:instance_count"] == frozen.params["instance_count"]
        assert attrs["value:max_batch_size"] == attrs["point"]["max_batch_size"]
    # Still a (log-scaled) float distribution: TPE learns that neighbours behave alike.
    assert isinstance(
        study.trials[0].distributions["max_batch_size"], optuna.distributions.FloatDistribution
    )


def test_snapping_wraps_the_base_sampler_once():
    from tritontune.search.sampler import SnappingSampler, snapping

    base = optuna.samplers.RandomSampler(seed=0)
    once = snapping(base, SearchSpace({"max_batch_size": Choice((1, 2, 4))}))
    twice = snapping(once, SearchSpace({"max_batch_size": Choice((8, 16, 32))}))
    assert isinstance(twice, SnappingSampler) and twice.base is base
    study = optuna.create_study(sampler=twice)
    trial = study.ask()
    assert trial.suggest_float("max_batch_size", 5.6, 45.3, log=True) in (8, 16, 32)


def test_a_cpu_hosts_default_space_leaves_out_more_than_two_threads_per_core(base, tmp_path: Path):
    """8 instances x 8 threads on 8 cores time-slice them 8 times over: left out by default
    (clamped to the nearest config that fits), put back by a space file's ``max_threads``."""
    target = TargetCapabilities(gpu_count=0)
    wide = default_space(base, target, slo_p99_s=0.05, batch_dim_dynamic=True, cpu_count=8)
    assert wide.max_threads == 16
    assert wide.fits_threads({"instance_count": 2, "intra_op_thread_count": 8})
    assert not wide.fits_threads({"instance_count": 4, "intra_op_thread_count": 8})
    assert wide.within_threads({"instance_count": 4, "intra_op_thread_count": 8}) == {
        "instance_count": 4,
        "intra_op_thread_count": 4,
    }
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=3))
    for _ in range(60):
        point = wide.suggest(study.ask())
        assert point["instance_count"] * point["intra_op_thread_count"] <= 16
    assert SearchSpace.from_dict(wide.to_dict()) == wide  # the study keeps the limit
    # on 2 cores nothing is over 2 per core: no limit, and the space is what it always was
    two = default_space(base, target, slo_p99_s=0.05, batch_dim_dynamic=True, cpu_count=2)
    assert two.max_threads is None and "max_threads" not in two.to_dict()
    path = tmp_path / "space.yaml"
    path.write_text("max_threads: none\n")
    assert load_space_file(path, wide).max_threads is None
    path.write_text("max_threads: 32\ninstance_count: {min: 1, max: 4}\n")
    narrowed = load_space_file(path, wide)
    assert narrowed.max_threads == 32 and narrowed.dimensions["instance_count"] == IntRange(1, 4)
    path.write_text("max_threads: lots\n")
    with pytest.raises(InputError, match="max_threads: 'lots' is not a whole number >= 1"):
        load_space_file(path, wide)
