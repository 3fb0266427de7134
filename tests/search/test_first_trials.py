"""The first trials of a default search: every accepted precision, then every way to use the
host's compute at the best precision, then the splits with the most instances with small
batches, before TPE (tritontune/search/first_trials.py)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import optuna
import pytest

from tests.fakes import FakeSession
from tests.studies import point as operating_point
from tritontune.config.repository import load_model_source
from tritontune.measure.loadgen import LoadMode
from tritontune.search.first_trials import (
    REFINE_TRIALS,
    SMALL_BATCH,
    FirstTrials,
    compute_settings,
    small_batch,
    use_first_trials,
)
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.pipeline_space import PipelineSpace
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.study.figures import LevelResult, OperatingPoint
from tritontune.study.handle import TuningStudy
from tritontune.study.records import StudyIdentity, TrialResult

PRECISIONS = ("fp32", "fp16", "int8_dynamic", "int8_static")


def cpu_space(cores: int, precisions: tuple[str, ...] = PRECISIONS) -> SearchSpace:
    """The default space's shape for an onnxruntime model on ``cores`` CPU cores."""
    return SearchSpace(
        {
            "max_batch_size": Choice((1, 2, 4, 8, 16, 32, 64, 128)),
            "dynamic_batching": Choice((False, True)),
            "max_queue_delay": IntRange(20, 50_000, log=True),
            "preferred_batch_size": Choice(("none", "max")),
            "instance_kind": Choice(("cpu",)),
            "instance_count": IntRange(1, max(2, cores)),
            "intra_op_thread_count": IntRange(1, cores),
            "inter_op_thread_count": IntRange(1, cores),
            "graph_optimization": Choice(("all", "extended", "basic")),
            "precision": Choice(precisions),
        }
    )


def splits(space: SearchSpace) -> list[tuple[int, int | None]]:
    return [(s["instance_count"], s.get("intra_op_thread_count")) for s in compute_settings(space)]


def test_the_compute_settings_split_the_cores_the_balanced_one_first():
    """Of two equally balanced splits, the fewer instances first: on MiniLM at p99 <= 100 ms,
    2 x 1 with batches of 16 served FP32 and FP16 alike (27-29), 1 x 2 apart (58, 51)."""
    assert splits(cpu_space(2)) == [(1, 2), (2, 1)]
    assert splits(cpu_space(8)) == [(2, 4), (4, 2), (1, 8), (8, 1)]
    assert splits(cpu_space(16)) == [(4, 4), (2, 8), (8, 2), (1, 16), (16, 1)]
    gpu = SearchSpace({"instance_kind": Choice(("gpu",)), "instance_count": IntRange(1, 4)})
    assert splits(gpu) == [(2, None), (1, None), (4, None)]
    assert compute_settings(SearchSpace({"max_batch_size": Choice((8, 16))})) == [{}]  # the model's own


def test_a_space_file_that_fixes_the_threads_keeps_them_fixed():
    space = cpu_space(4).replace("intra_op_thread_count", IntRange(1, 1))
    assert sorted(splits(space)) == [(1, 1)]


def test_every_first_point_is_one_whole_config_with_sensible_knobs():
    first = FirstTrials.of(cpu_space(2))
    points = first.step_one()
    assert [p["precision"] for p in points] == list(PRECISIONS)
    for p in points:
        assert set(p) == set(cpu_space(2).dimensions)  # nothing left to chance
        assert p["dynamic_batching"] is True and p["max_batch_size"] == 16
        assert p["max_queue_delay"] == 1000 and p["preferred_batch_size"] == "none"
        assert p["graph_optimization"] == "all" and p["inter_op_thread_count"] == 1
    # four precisions, the other split, both splits with small batches, two other graph levels
    assert first.count() == 9


def test_the_splits_with_the_most_instances_are_measured_again_with_small_batches():
    first = FirstTrials.of(cpu_space(16))
    small = first.step_three("int8_dynamic")
    assert [(p["instance_count"], p["intra_op_thread_count"]) for p in small] == [(16, 1), (8, 2)]
    for p in small:
        assert p["max_batch_size"] == 4 and p["dynamic_batching"] is True
        assert p["precision"] == "int8_dynamic" and p["max_queue_delay"] == 1000
    assert "again 16 x 1 threads, 8 x 2 threads, with batches up to 4" in first.describe()


def alone(number: int, params: dict, latency_s: float, served: float = 50.0) -> TrialResult:
    """A measured trial under a 100 ms p99 SLO whose ramp began with one request in flight,
    answered in ``latency_s``, and served ``served`` at 4."""
    first = LevelResult(1, 1 / latency_s, latency_s, latency_s, latency_s, 0, True, True)
    higher = LevelResult(4, served, 3 * latency_s, 4 * latency_s, 4 * latency_s, 0, True, True)
    point = OperatingPoint(
        slo_p99_s=0.100, load_mode=LoadMode.CONCURRENCY, feasible=True, load=4,
        throughput=served, p50_s=higher.p50_s, p99_s=higher.p99_s, p99_deviation=0.05,
        throughput_deviation=0.03, avg_batch_size=2.0, levels=[first, higher],
    )  # fmt: skip
    return TrialResult(number, params, {}, point, "", 1.0)


@pytest.mark.parametrize(
    ("latency_ms", "batch"),
    [(36, 1), (20, 2), (13, 2), (12, 4), (2, 4)],  # 2 x batch x latency within the 100 ms SLO
)
def test_the_small_batches_leave_room_for_a_request_to_wait_for_one_batch(latency_ms, batch):
    """MiniLM on a core without int8 dot products: one request alone took 36 ms on 2 x 1, and
    batches of 4 there missed a 100 ms p99 (a request waits for the batch running, then runs
    in the next one); 2 x 1 without batching served most."""
    first = FirstTrials.of(cpu_space(2))
    served = {"int8_dynamic": 80.0}  # the best precision
    results = [
        alone(i, p, latency_ms / 1e3, served.get(p["precision"], 40.0))
        for i, p in enumerate(first.step_one())
    ] + [alone(4, p, latency_ms / 1e3) for p in first.step_two(["int8_dynamic"])]
    small = first.step_three("int8_dynamic", results)
    assert [(p["instance_count"], p["intra_op_thread_count"]) for p in small] == [(2, 1), (1, 2)]
    for p in small:
        assert p["max_batch_size"] == batch and p["dynamic_batching"] is (batch > 1)
        assert ("max_queue_delay" in p) is (batch > 1)
    taken = [r.params for r in results]
    assert first.next_point(results, taken) == small[0]


@pytest.mark.parametrize(("sizes", "batching"), [((32, 64), False), ((8, 16), True)])
def test_where_the_space_has_no_batches_that_small_the_nearer_of_none_and_its_smallest(sizes, batching):
    """A pipeline's model batches at least as much as its ensemble (32 for MiniLM's): batches of
    4 are 3 doublings from 32 and 2 from one request alone, so none. On a host with int8 dot
    products (a request fast enough for batches of 2-4) the MiniLM pipeline's step 3 was
    otherwise its step 2's 2 x 1 point again, and was left out. Without them (a request too slow
    for any batch) 2 x 1 without batching had won: 73 sentences/s, 70 batching up to 32."""
    first = FirstTrials.of(cpu_space(2).replace("max_batch_size", Choice(sizes)))
    results = [alone(i, p, 0.002) for i, p in enumerate(first.step_one())]
    small = first.step_three(first.precisions[0], results)
    assert [(p["max_batch_size"], p["dynamic_batching"]) for p in small] == [(sizes[0], batching)] * 2
    said = "without batching" if not batching else f"with batches up to {sizes[0]}"
    assert f"then again 2 x 1 threads, 1 x 2 threads, {said}" in first.describe()


def test_without_a_figure_at_one_request_in_flight_the_small_batches_are_4():
    measured = alone(0, {}, 0.036)
    assert small_batch(measured) == 1
    assert small_batch(None) == SMALL_BATCH == 4
    assert measured.operating_point is not None
    from_two = replace(measured.operating_point, levels=measured.operating_point.levels[1:])
    assert small_batch(replace(measured, operating_point=from_two)) == 4  # the ramp began at 4
    rate = replace(measured.operating_point, load_mode=LoadMode.RATE)
    assert small_batch(replace(measured, operating_point=rate)) == 4  # an open loop's rates


def test_a_space_without_batch_sizes_measures_nothing_twice():
    space = SearchSpace({"instance_count": IntRange(1, 4), "precision": Choice(("fp32", "fp16"))})
    first = FirstTrials.of(space)
    assert first.step_three("fp32") == []
    assert first.count() == 2 + 2  # precisions at 2 instances, then 1 and 4


def result(number: int, params: dict, throughput: float, feasible: bool = True) -> TrialResult:
    return TrialResult(
        number=number,
        params=params,
        knobs={},
        operating_point=operating_point(throughput, 0.04, feasible=feasible),
        config_pbtxt="",
        duration_s=1.0,
    )


def test_precisions_first_then_the_other_settings_at_the_best_precision():
    first = FirstTrials.of(cpu_space(2))
    step_one = first.step_one()
    taken: list[dict] = []
    results: list[TrialResult] = []
    throughput = {"fp32": 100.0, "fp16": 80.0, "int8_dynamic": 190.0, "int8_static": 400.0}
    feasible = {"int8_static": False}  # served most, but missed the SLO: not the best
    for i, expected in enumerate(step_one):
        proposed = first.next_point(results, taken)
        assert proposed == expected
        taken.append(proposed)
        precision = proposed["precision"]
        results.append(result(i, proposed, throughput[precision], feasible.get(precision, True)))
    proposed = first.next_point(results, taken)
    assert proposed is not None and proposed["precision"] == "int8_dynamic"
    assert (proposed["instance_count"], proposed["intra_op_thread_count"]) != (
        step_one[0]["instance_count"],
        step_one[0]["intra_op_thread_count"],
    )
    taken.append(proposed)
    for expected in first.step_three("int8_dynamic"):  # small batches, at the best precision
        proposed = first.next_point(results, taken)
        assert proposed == expected and proposed["max_batch_size"] == 4
        taken.append(proposed)
    for expected in first.step_four(results):  # the best one (int8_dynamic) at other levels
        proposed = first.next_point(results, taken)
        assert proposed == {**step_one[2], "graph_optimization": expected["graph_optimization"]}
        taken.append(proposed)
    assert len(taken) == first.count()
    assert first.next_point(results, taken) is None  # TPE's turn


def test_a_precision_within_the_noise_of_the_best_gets_the_other_settings_too():
    """MiniLM on a busy minute: FP16 served 38 and INT8 dynamic 32 at one setting, and the
    whole search went on in FP16 (half the best known). A figure within 25 % is measured again
    at the other setting, after the small batches at the best one's (on a budget of 6, those came
    first: the MiniLM pipeline's second look at INT8 static served 30, 2 x 1 without batching 73),
    and where the second look serves most of all, its precision gets the small batches too."""
    first = FirstTrials.of(cpu_space(2))
    served = {"fp32": 28.0, "fp16": 38.0, "int8_dynamic": 32.0, "int8_static": 40.0}
    missed = {"int8_static"}  # served most, but missed the SLO
    results = [
        result(i, p, served[p["precision"]], p["precision"] not in missed)
        for i, p in enumerate(first.step_one())
    ]
    taken = [r.params for r in results]

    def measure(figure: float) -> dict:
        point = first.next_point(results, taken)
        assert point is not None
        taken.append(point)
        results.append(result(len(results), point, figure))
        return point

    second = measure(37.0)
    assert (second["instance_count"], second["precision"]) == (2, "fp16")
    small = [measure(36.0), measure(35.0)]
    assert small == first.step_three("fp16", results)  # the best so far: FP16
    look = measure(60.0)
    assert (look["instance_count"], look["precision"]) == (2, "int8_dynamic")  # 32 >= 0.75 x 38
    again = first.next_point(results, taken)
    assert again is not None and again == first.step_three("int8_dynamic", results)[0]
    assert len(first.points(results)) == first.count() + 3 == 12  # one look, its small batches
    assert "then 2 x 1 threads at any precision within 25% of the best" in first.describe()


def disturbed(result: TrialResult) -> TrialResult:
    """``result`` with its levels measured while another process held a core."""
    point = result.operating_point
    assert point is not None
    levels = [replace(level, disturbed=True) for level in point.levels]
    return replace(result, operating_point=replace(point, levels=levels))


def test_a_precision_whose_first_figure_was_not_clean_gets_a_second_look():
    """MiniLM with another process holding a core during step 1: INT8 dynamic served 31, INT8
    static 65, and the search ended on INT8 static at 86 where INT8 dynamic serves 135-141.
    A figure that is not clean orders nothing, however far below the best it is: its precision
    is measured again at the other setting, like one within the noise."""
    first = FirstTrials.of(cpu_space(2))
    served = {"fp32": 48.0, "fp16": 39.0, "int8_dynamic": 31.0, "int8_static": 65.0}
    results = [result(i, p, served[p["precision"]]) for i, p in enumerate(first.step_one())]
    assert first.close_precisions(results, first.step_one()) == ["int8_static"]
    hit = {"fp32", "int8_dynamic", "int8_static"}  # FP16's figure was re-measured until clean
    results = [disturbed(r) if r.params["precision"] in hit else r for r in results]
    assert all(
        r.operating_point and r.operating_point.disturbed
        for r in results
        if r.params["precision"] in hit
    )
    assert first.close_precisions(results, first.step_one()) == ["int8_static", "fp32", "int8_dynamic"]
    looks = first.step_two(["fp32", "int8_dynamic"])
    assert all(look in first.points(results) for look in looks)


def test_a_levels_disturbance_survives_the_study():
    level = replace(operating_point(50.0, 0.04).levels[0], disturbed=True)
    kept = OperatingPoint.from_dict(replace(operating_point(50.0, 0.04), levels=[level]).to_dict())
    assert kept.disturbed and kept.levels[0].disturbed
    clean = operating_point(50.0, 0.04).to_dict()
    assert "disturbed" not in clean["levels"][0]  # older studies' shape: read as clean
    assert not OperatingPoint.from_dict(clean).disturbed


def test_the_best_of_the_first_steps_is_measured_at_each_other_graph_level():
    """The graph level's effect carries over to the other knobs: measured once per level, at the
    best config of steps 1-3, whatever a step-4 trial then serves."""
    first = FirstTrials.of(cpu_space(2))
    assert first.step_four([]) == []  # nothing measured yet
    served = {"int8_dynamic": 60.0}
    results = [
        alone(i, p, 0.036, served.get(p["precision"], 40.0)) for i, p in enumerate(first.step_one())
    ]
    results.append(alone(4, first.step_two(["int8_dynamic"])[0], 0.036, 70.0))
    small = first.step_three("int8_dynamic", results)
    results += [alone(5 + i, p, 0.036, 90.0 - 30 * i) for i, p in enumerate(small)]
    levels = first.step_four(results)  # 1 x 2 at 60 at best: not within the noise of 2 x 1's 90
    assert levels == [{**small[0], "graph_optimization": g} for g in ("extended", "basic")]
    assert "max_queue_delay" not in levels[0]  # the best was measured without batching
    results.append(alone(7, levels[0], 0.030, 120.0))  # a level serving more asks for no more
    assert first.step_four(results) == levels
    assert "then the best of them at each other graph level (all, extended, basic)" in (first.describe())
    one_level = FirstTrials.of(cpu_space(2).replace("graph_optimization", Choice(("all",))))
    assert one_level.step_four(results) == [] and one_level.count() == 7
    assert "graph level" not in one_level.describe()


def test_a_point_another_worker_is_measuring_is_left_to_it():
    first = FirstTrials.of(cpu_space(2))
    step_one = first.step_one()
    assert first.next_point([], [step_one[0]]) == step_one[1]


@pytest.fixture
def fake_session(example_repository: Path) -> FakeSession:
    return FakeSession(load_model_source(example_repository, "mlp"))


def test_a_search_measures_its_first_trials_before_tpe(fake_session: FakeSession):
    space = SearchSpace(
        {
            "max_batch_size": Choice((4, 8, 16, 32)),
            "dynamic_batching": Choice((True, False)),
            "max_queue_delay": IntRange(100, 10_000, log=True),
            "preferred_batch_size": Choice(("none", "max")),
            "instance_count": IntRange(1, 4),
        }
    )
    settings = SearchSettings(
        slo_p99_s=0.05,
        trials=5,
        seed=1,
        storage=optuna.storages.InMemoryStorage(),
        study_name="first",
    )
    result = run_search(fake_session, space, settings)
    by_number = sorted(result.study.results, key=lambda r: r.number)
    first = FirstTrials.of(space)
    expected = [first.point(s, None) for s in first.settings]
    assert [r.params for r in by_number[: len(expected)]] == expected
    assert len(by_number) == 5


def test_the_trials_after_the_first_refine_the_best_ones_scheduler(fake_session: FakeSession):
    """The best first trial's execution (here its instances) is kept for the refining trials,
    TPE choosing their batching; then TPE has the whole space."""
    dimensions = cpu_space(2).dimensions
    # the fake's knobs; batching always on (the fake's capacity grows with max_batch_size even
    # without the batcher, where every size is one config, told its result again)
    space = SearchSpace({k: v for k, v in dimensions.items() if k != "precision"}).replace(
        "dynamic_batching", Choice((True,))
    )
    first = FirstTrials.of(space)
    count = first.count()
    settings = SearchSettings(
        slo_p99_s=0.05,
        trials=count + 2 + REFINE_TRIALS,  # step 4 may measure a close split's 2 levels too
        seed=3,
        storage=optuna.storages.InMemoryStorage(),
        study_name="refine",
    )
    result = run_search(fake_session, space, settings)
    by_number = sorted(result.study.results, key=lambda r: r.number)
    planned = len(first.points(by_number))
    measured = [r for r in by_number[:planned] if r.operating_point is not None]
    best = max(measured, key=lambda r: (r.feasible, r.value))
    kept = ("instance_count", "intra_op_thread_count", "inter_op_thread_count")
    # the trials measured after the first ones (a repeat of a known config, or a config that
    # differs only in a knob that changes nothing, takes a number but is not measured)
    refining = [r for r in by_number if planned <= r.number < planned + REFINE_TRIALS]
    assert len(refining) == REFINE_TRIALS
    for trial in refining:
        assert {k: trial.params[k] for k in kept} == {k: best.params[k] for k in kept}
    scheduler = {(t.params["max_batch_size"], t.params.get("max_queue_delay")) for t in refining}
    assert len(scheduler) > 1  # TPE chose them, not one fixed point
    assert first.refinement([]) is None
    assert "then 4 refining the best one's scheduler knobs" in first.describe()
    # with every execution knob fixed, the trials after the first ones are TPE's: not said
    fixed = SearchSpace({"instance_count": Choice((1,)), "max_batch_size": Choice((8, 16))})
    assert not FirstTrials.of(fixed).refines()
    assert "refining" not in FirstTrials.of(fixed).describe()


def test_a_close_config_splitting_the_cores_otherwise_is_measured_at_each_level_too():
    """MiniLM, seeds 2 and 3 of stop 56: the levels were measured at the best config of steps
    1-3 (1 x 2, 75), where they served within 4 % of each other; 2 x 1 (70) was never measured at
    basic, where it served most of all. Its levels are measured too; a close config splitting
    the cores as the best does (another precision) gets none."""
    first = FirstTrials.of(cpu_space(2))
    served = {"fp32": 40.0, "fp16": 45.0, "int8_dynamic": 75.0, "int8_static": 71.0}
    results = [alone(i, p, 0.030, served[p["precision"]]) for i, p in enumerate(first.step_one())]
    second = first.step_two(["int8_dynamic", "int8_static"])  # 71 is within 25 % of 75
    results += [alone(4, second[0], 0.030, 66.0), alone(5, second[1], 0.030, 68.0)]
    small = first.step_three("int8_dynamic", results)
    results += [alone(6, small[0], 0.030, 70.0), alone(7, small[1], 0.030, 50.0)]
    best = first.step_one()[2]
    levels = first.step_four(results)
    assert levels == [
        {**p, "graph_optimization": g} for p in (best, small[0]) for g in ("extended", "basic")
    ]
    assert first.points(results)[-4:] == levels
    assert len(first.points(results)) == first.count() + 1 + 2  # int8_static's setting, 2 levels
    slow = [alone(r.number, r.params, 0.030, 40.0) if r.number >= 4 else r for r in results]
    assert first.step_four(slow) == levels[:2]  # 2 x 1 at 40 at best: not within 25 % of 75
    assert "using the compute another way" in first.describe()


def test_a_pipelines_first_trials_are_its_bottleneck_models():
    """The focused model's first trials, its knobs named ``MODEL/KNOB`` in the study's points;
    the other models keep their own configs meanwhile (the focus proposes none of their knobs).
    Read back from the study, its figures pick step 2's precision as for one model."""
    tokenizer = SearchSpace({"max_batch_size": Choice((8, 32)), "instance_count": IntRange(1, 2)})
    space = PipelineSpace.of({"tokenizer": tokenizer, "minilm": cpu_space(2)}).focused_on("minilm", 6)
    identity = StudyIdentity("text_encoder", 0.1, LoadMode.CONCURRENCY)
    study = TuningStudy.create_or_resume(
        optuna.storages.InMemoryStorage(), "p", identity=identity,
        sampler=optuna.samplers.TPESampler(seed=1),
    )  # fmt: skip
    first = use_first_trials(study, space)
    assert first is not None and first.model == "minilm" and "of minilm" in first.describe()
    own = FirstTrials.of(cpu_space(2))
    throughput = {"fp32": 40.0, "fp16": 30.0, "int8_dynamic": 65.0, "int8_static": 50.0}
    points = []
    for _ in range(len(own.step_one()) + 1):
        trial = study.ask()
        point = space.suggest(trial)
        study.save_point(trial, point)
        points.append(point)
        study.tell_measured(trial, operating_point(throughput[point["minilm/precision"]], 0.05))
    expected = [{f"minilm/{k}": v for k, v in p.items()} for p in own.step_one()]
    assert points[: len(expected)] == expected  # every precision, nothing of the tokenizer's
    step_two = points[len(expected)]
    assert step_two["minilm/precision"] == "int8_dynamic"  # the best of step 1
    assert step_two["minilm/instance_count"] != expected[0]["minilm/instance_count"]
    # no focus (another worker measures the baseline): no first trials
    assert use_first_trials(study, PipelineSpace.of({"minilm": cpu_space(2)})) is None
