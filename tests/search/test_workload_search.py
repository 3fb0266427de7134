"""``search --workload``'s loop, driven through the fake session on a modelled server.

The modelled server (tests/fakes.py) computes 100 x max_batch_size samples/s; priorities keep the
interactive class's p99 low until saturation, and a bounded queue rejects the batch class's
surplus instead of letting it pile up. The loop should find that, keep it in the study, and
re-measure its best configs against the baseline.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import optuna
import pytest

from tests.fakes import FakeSession
from tests.studies import final_rounds_claimed_elsewhere
from tritontune.config.repository import load_model_source
from tritontune.errors import InputError
from tritontune.measure.traffic import Layout, parse_traffic
from tritontune.search.endpoint_layout import (
    EndpointChoices,
    EndpointKnobs,
    EndpointSplit,
    describe_endpoint_knobs,
    endpoint_variants,
    point_variant,
)
from tritontune.search.instance_budget import split_by_demand
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.search.traffic_capacity import NEAR_STEP
from tritontune.search.workload_search import (
    WorkloadSearchProgress,
    WorkloadSearchSettings,
    run_workload_search,
    workload_space,
)

TRAFFIC = parse_traffic(
    {
        "classes": [
            {"name": "interactive", "share": 0.3, "priority": 1, "slo_p99": "20ms"},
            {"name": "batch", "share": 0.7, "batch_size": 8, "priority": 2, "may_shed": True},
        ]
    },
    where="test",
)
SPACE = SearchSpace(
    {
        "max_batch_size": Choice((4, 16, 64)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
    }
)


@pytest.fixture
def session(example_repository: Path) -> FakeSession:
    return FakeSession(load_model_source(example_repository, "mlp"))


def settings(**overrides) -> WorkloadSearchSettings:
    """Trials in the shared layout (the searched layout has its own tests, with layouts=None)."""
    values = dict(
        trials=12, seed=1, storage=optuna.storages.InMemoryStorage(), study_name="w", rounds=2,
        layouts=(Layout.SHARED,),
    )  # fmt: skip
    values.update(overrides)
    return WorkloadSearchSettings(**values)


def test_batch_sizes_below_a_class_request_leave_the_space():
    narrowed = workload_space(SPACE, TRAFFIC)
    assert narrowed.dimensions["max_batch_size"] == Choice((16, 64))


def test_a_point_carries_the_scheduler_knobs():
    point = {"max_batch_size": 64, "dynamic_batching": True, "priorities": True, "admission": 16}
    variant = point_variant(SPACE, TRAFFIC, point)
    assert variant.priority_levels == 2 and variant.default_priority_level == 2
    assert dict(variant.priority_queue_policies)[2].max_queue_size == 16
    fifo = point_variant(SPACE, TRAFFIC, {**point, "priorities": False, "admission": "none"})
    assert fifo.priority_levels == 0 and fifo.max_queue_size is None
    # Without the dynamic batcher there is no scheduler queue to set up (Triton refuses one).
    timed = parse_traffic(
        {"classes": [{"name": "a", "share": 1, "timeout": "1s", "slo_p99": "20ms"}]}, where="t"
    )
    plain = point_variant(SPACE, timed, {"max_batch_size": 16, "dynamic_batching": False})
    assert plain.queue_timeout_us is None and plain.priority_levels is None


def test_the_search_finds_priorities_and_admission_control_and_beats_the_baseline(session):
    result = run_workload_search(session, SPACE, TRAFFIC, settings())
    best = result.trials[0]
    assert best.params["max_batch_size"] == 64
    assert best.params["priorities"] is True
    tied = [t for t in result.trials if t.value == best.value]  # the best served, some bounded
    assert any(t.params["admission"] != "none" for t in tied)
    assert best.capacity is not None and best.capacity.feasible
    # Every finalist measured once per round; the baseline is the model's own config.
    assert [len(f.rates) for f in result.finalists] == [2] * len(result.finalists)
    assert result.baseline is not None and result.baseline.trial is None
    winner = result.winner
    assert winner is not None and winner.trial is not None
    assert winner.median > result.baseline.median
    written = result.to_dict()
    assert written["gain_over_baseline"] > 1
    assert list(written["phase_seconds"]) == ["precision checks", "trials", "final rounds"]
    # what each class was held to, per round and at the winner's capacity: its work and tail
    for finalist in written["finalists"]:
        assert len(finalist["classes_by_round"]) == 2
        for by_class in finalist["classes_by_round"]:
            assert set(by_class) == {"interactive", "batch"}
            assert by_class["interactive"]["p99_ms"] <= 20.0  # its SLO, met at capacity
            assert by_class["batch"]["served_infer_per_s"] > 0
    at_capacity = written["winner_at_capacity"]["by_class"]
    assert 0 < at_capacity["interactive"]["p50_ms"] <= at_capacity["interactive"]["p99_ms"] <= 20.0
    measured = [t for t in result.trials if t.total_rate is not None]
    assert len(measured) == len(result.trials) <= 12  # re-proposals are not measured again


def test_the_study_is_kept_and_resumed_for_the_same_workload_only(session):
    session.capacity_scale = 1 / 3  # figures with more digits than the study keeps
    storage = optuna.storages.InMemoryStorage()
    first = run_workload_search(session, SPACE, TRAFFIC, settings(storage=storage, trials=3, rounds=1))
    loads = len(session.loads)
    again = run_workload_search(session, SPACE, TRAFFIC, settings(storage=storage, trials=3, rounds=1))
    assert [t.number for t in again.trials] == [t.number for t in first.trials]
    # the budget was spent and the finalists are the same: the study's final rounds stand
    assert len(session.loads) == loads and again.final_rounds_reused
    assert not first.final_rounds_reused and first.winner is not None
    assert again.winner is not None and again.winner.served == first.winner.served
    study = optuna.load_study(study_name="w", storage=storage)
    assert study.user_attrs["workload_final"]["winner"] is not None
    from tests.studies import read_study

    with pytest.raises(InputError, match="is a workload study"):
        read_study(study)  # status and report say so rather than misread it
    other = parse_traffic({"classes": [{"name": "only", "share": 1, "slo_p99": "5ms"}]}, where="t")
    with pytest.raises(InputError, match="another model or workload"):
        run_workload_search(session, SPACE, other, settings(storage=storage, trials=3))
    # the same classes, one field changed: the refusal names it, the study's value first
    looser = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "share": 0.3, "priority": 1, "slo_p99": "40ms"},
                {"name": "batch", "share": 0.7, "batch_size": 8, "priority": 2, "may_shed": True},
            ]
        },
        where="test",
    )
    with pytest.raises(InputError) as refused:
        run_workload_search(session, SPACE, looser, settings(storage=storage, trials=3))
    assert "(the study's, then yours: class 'interactive' slo_p99_ms: 20.0, 40.0)" in str(
        refused.value
    ), refused.value


def test_final_rounds_another_worker_claimed_are_left_to_it(session, tmp_path: Path):
    """Two workers of one study: the one that finds the final rounds over its finalists claimed
    measures none of them (the other's output and the study have the winner)."""
    storage = f"sqlite:///{tmp_path / 's.db'}"
    chosen = settings(storage=storage, trials=3, rounds=1)
    # the budget is spent: the other worker claims the rounds first
    trial_done = final_rounds_claimed_elsewhere(storage, "w", 3, chosen.top)

    loads: list[int] = []
    progress = WorkloadSearchProgress(
        on_trial_done=trial_done, on_final_round=lambda *a: loads.append(1)
    )
    result = run_workload_search(session, SPACE, TRAFFIC, chosen, progress)
    assert result.final_rounds_reused and result.final.finalists == () and loads == []
    assert result.to_dict()["final_rounds_reused"] is True


def test_the_endpoint_layout_splits_the_instances_by_demand_and_drops_priorities():
    base = point_variant(SPACE, TRAFFIC, {"max_batch_size": 64, "priorities": True, "admission": 16})
    split = endpoint_variants(TRAFFIC, base, instances=4, admission=16)
    # demand: interactive 0.3 x 1, batch 0.7 x 8: the batch endpoint gets nearly every instance
    assert split["interactive"].instance_count == 1 and split["batch"].instance_count == 4
    assert all(v.priority_levels == 0 and v.priority_queue_policies == () for v in split.values())
    assert split["batch"].max_queue_size == 16  # may be shed: admission control kept
    assert split["interactive"].max_queue_size is None
    assert (
        endpoint_variants(TRAFFIC, base, instances=1, admission=None)["interactive"].instance_count == 1
    )


def test_the_endpoint_layout_shares_the_compute_threads_instead_of_multiplying_them():
    """MiniLM on 2 cores: one instance of 2 threads becomes two endpoints of 1 thread each (each
    taking 2 oversubscribed the cores and broke the interactive tail)."""
    base = point_variant(SPACE, TRAFFIC, {"max_batch_size": 64, "priorities": True, "admission": 16})
    split = endpoint_variants(TRAFFIC, base, instances=1, admission=16, threads=2)
    assert {c: v.backend_parameters["intra_op_thread_count"] for c, v in split.items()} == {
        "interactive": "1",
        "batch": "1",
    }
    # 4 instances x 2 threads = 8: interactive 1 instance x 1, batch 4 instances x 7 // 4
    wide = endpoint_variants(TRAFFIC, base, instances=4, admission=16, threads=2)
    assert wide["interactive"].backend_parameters["intra_op_thread_count"] == "1"
    assert wide["batch"].backend_parameters["intra_op_thread_count"] == "1"
    assert (
        "intra_op_thread_count"
        not in endpoint_variants(TRAFFIC, base, 1, 16)["batch"].backend_parameters
    )


def test_units_are_split_by_demand_at_least_one_each():
    assert split_by_demand(2, {"i": 0.3, "b": 5.6}) == {"i": 1, "b": 1}
    assert split_by_demand(6, {"i": 0.3, "b": 5.6}) == {"i": 1, "b": 5}
    assert split_by_demand(5, {"a": 1, "b": 1, "c": 1}) == {"a": 2, "b": 2, "c": 1}
    assert split_by_demand(1, {"a": 1, "b": 1}) == {"a": 1, "b": 1}  # fewer units than names


def test_the_final_rounds_measure_the_best_config_as_endpoints_too(session):
    result = run_workload_search(session, SPACE, TRAFFIC, settings())
    endpoints = result.best_of(Layout.ENDPOINTS)
    assert endpoints is not None and endpoints.trial == result.trials[0].number
    assert endpoints.routes == {"interactive": "mlp_interactive", "batch": "mlp_batch"}
    assert set(endpoints.models) == {"mlp_interactive", "mlp_batch"}
    assert 'name: "mlp_batch"' in endpoints.models["mlp_batch"]
    assert len(endpoints.rates) == 2
    # On the modelled server each endpoint has half the machine and no priorities to lean on:
    # the shared model with priorities wins.
    assert result.layout_ratio is not None and result.layout_ratio > 1
    assert result.to_dict()["shared_over_endpoints"] == result.layout_ratio
    # The report's figures are the winner's own (each finalist's last round kept by its label).
    assert set(result.last_capacity) == {f.label for f in result.finalists}
    assert result.winner_capacity() is result.last_capacity[result.winner.label]
    shared = result.best_of(Layout.SHARED)
    assert shared is not None and set(shared.routes.values()) == {"mlp"}
    assert 'name: "mlp"' in shared.models["mlp"]


def test_a_remote_server_measures_no_endpoints(session):
    session.owns_server = False
    result = run_workload_search(session, SPACE, TRAFFIC, settings(trials=3, rounds=1))
    assert result.best_of(Layout.ENDPOINTS) is None and result.layout_ratio is None


def test_a_best_config_without_dynamic_batching_is_split_into_endpoints_that_build(session):
    """``search --workload`` on the example lost its six trials when the best one had no dynamic
    batcher: its endpoint split set priority levels, which Triton refuses without the batcher.
    Such a config's endpoints only split the instances, and the search finishes with them."""
    plain = point_variant(SPACE, TRAFFIC, {"max_batch_size": 64, "dynamic_batching": False})
    split = endpoint_variants(TRAFFIC, plain, instances=2, admission=16)
    for variant in split.values():
        assert variant.priority_levels is None and variant.max_queue_size is None
        session.build(variant)  # Triton's rules (tritontune's validation): no ConfigError
    no_batcher = SearchSpace({"max_batch_size": Choice((64,)), "dynamic_batching": Choice((False,))})
    result = run_workload_search(session, no_batcher, TRAFFIC, settings(trials=2, rounds=1))
    endpoints = result.best_of(Layout.ENDPOINTS)
    assert endpoints is not None and len(endpoints.rates) == 1
    assert result.winner is not None


def test_a_dead_server_in_a_workload_trial_is_restarted_and_the_config_measured_again(
    example_repository: Path,
):
    """The one loop's fault policy: a server that dies once under a config is restarted and the
    config measured again; one that dies twice fails that trial only, with the reason."""
    source = load_model_source(example_repository, "mlp")
    one = SearchSpace({**SPACE.dimensions, "max_batch_size": Choice((16,))})
    once = FakeSession(source, kill_traffic={16: 1})
    (trial,) = run_workload_search(once, one, TRAFFIC, settings(trials=1, rounds=1)).trials
    assert trial.server_restarts == 1 and trial.capacity is not None and trial.error is None
    assert once.restarts == 1
    twice = FakeSession(source, kill_traffic={16: 2})
    result = run_workload_search(twice, one, TRAFFIC, settings(trials=1, rounds=1))
    (trial,) = result.trials
    assert trial.capacity is None and trial.error.startswith("brought the server down 2 times")
    assert trial.server_restarts == 2 and twice.restarts == 2
    assert result.baseline is not None  # the search went on to its final rounds


def test_the_search_honours_its_deadline(session):
    """``--timeout``: no trial starts after the deadline (the workload search ignored it)."""
    result = run_workload_search(session, SPACE, TRAFFIC, settings(trials=None, timeout_s=1e-9))
    assert result.trials == [] and result.trials_this_run == 0


#: Without a class to shed, a config's capacity is bounded (the modelled server's own).
UNSHED = parse_traffic(
    {
        "classes": [
            {"name": "interactive", "share": 0.3, "priority": 1, "slo_p99": "20ms"},
            {"name": "batch", "share": 0.7, "batch_size": 8, "priority": 2, "slo_p99": "200ms"},
        ]
    },
    where="test",
)


def test_a_finalists_rounds_start_at_its_capacity_in_the_search(session):
    """The rounds re-find a capacity the search measured once: their ramps start at it (the
    best shared trial split into endpoints: at its trial's), and the baseline's at the lowest
    capacity a trial held, not at the start rate (from which MiniLM's baseline halved down
    through three misses)."""
    result = run_workload_search(session, SPACE, UNSHED, settings(trials=3, rounds=1))
    by_trial = {t.number: t for t in result.trials}
    lowest = min(t.total_rate for t in result.trials if t.feasible)
    assert lowest != pytest.approx(20.0)
    for finalist in result.finalists:
        rates = [level.total_rate for level in result.last_capacity[finalist.label].levels]
        start = lowest if finalist.trial is None else by_trial[finalist.trial].total_rate
        assert any(r == pytest.approx(start) for r in rates), (finalist.label, rates)


def test_final_rounds_measure_a_finalist_once_per_round_where_it_held(session):
    """As the playoff: after the first round (a trial's at its capacity in the search; the
    baseline's and the endpoints' a ramp), each round is one level at the capacity it held."""
    result = run_workload_search(session, SPACE, UNSHED, settings(trials=3, rounds=3))
    by_trial = {t.number: t for t in result.trials}
    for finalist in result.finalists:
        last = result.last_capacity[finalist.label]
        # three rounds, or as many as it took to settle its place (behind the leader)
        assert len(finalist.rates) == result.settled_after.get(finalist.label, 3)
        assert last.feasible and (len(last.levels) == 1 or len(finalist.rates) == 1), finalist.label
        if finalist.trial is not None and finalist.layout is Layout.SHARED:
            assert finalist.rates[0] == pytest.approx(by_trial[finalist.trial].total_rate)
        assert len(set(finalist.rates)) == 1  # the modelled server holds where it held


@pytest.mark.parametrize(("others", "after"), [(0.7, 2), (1 / 3, 1)])
def test_final_rounds_stop_early_once_every_place_is_settled(session, others, after):
    """A finalist behind the leader in every round (at most 90 % of its work over two rounds, or
    at most half of it from the first) sits out the rest, and once every place is settled the
    rounds stop, the leader's after two rounds: the machine is made to give every config but one
    (the largest batches, with priority levels) ``others`` of its capacity."""

    def kind(config) -> float:
        favoured = config.max_batch_size == 64 and config.dynamic_batching.priority_levels > 0
        return 1.0 if favoured else others

    session.capacity_scale_of = kind
    result = run_workload_search(
        session, SPACE, UNSHED, settings(trials=4, rounds=5, top=2, endpoints=False)
    )
    served = {f.label: f.served for f in result.finalists}
    assert len(served) == 3 and "baseline" in served  # the top two and the model's own config
    top = max(served, key=lambda label: statistics.median(served[label]))
    counts = {label: len(v) for label, v in served.items()}
    # not 5; the model's own config may be further behind than the others (settled at once)
    assert counts["baseline"] <= after
    expected = {label: 2 if label == top else after for label in served} | {
        "baseline": counts["baseline"]
    }
    assert counts == expected, served
    assert result.settled_after == expected
    assert result.to_dict()["final_rounds_settled_after"] == expected
    assert result.winner is not None and result.winner.label == top


def test_final_rounds_go_on_while_a_finalist_is_close_to_the_leader(session):
    """Without a finalist behind the leader by over 10 % every round is measured (the settled
    rule never cuts a close race short): the machine is made to give every config the same
    capacity, and the classes share one priority (with two, configs with priority levels keep
    the interactive tail at higher rates, serving more)."""
    session.capacity_scale_of = lambda config: 1 / (config.max_batch_size or 1)
    even = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "share": 0.3, "slo_p99": "20ms"},
                {"name": "batch", "share": 0.7, "batch_size": 8, "slo_p99": "200ms"},
            ]
        },
        where="test",
    )
    result = run_workload_search(
        session, SPACE, even, settings(trials=4, rounds=4, top=2, endpoints=False)
    )
    tuned = [f for f in result.finalists if f.trial is not None]
    assert len(tuned) == 2 and not set(result.settled_after) & {f.label for f in tuned}
    assert all(len(f.served) == 4 for f in tuned)


def test_a_trials_ramp_starts_at_the_best_capacity_so_far(session):
    """The first trial walks up from the start rate; each later one starts at the best capacity
    a trial held before it (the answer is near there)."""
    result = run_workload_search(session, SPACE, UNSHED, settings(trials=6, rounds=1))
    best = None
    for trial in sorted(result.trials, key=lambda t: t.number):
        if trial.capacity is None:
            continue
        levels = trial.capacity.detail["levels"]
        rates = [level["total_rate_per_s"] for level in levels]
        expected = 20.0 if best is None else best
        assert any(r == pytest.approx(expected, abs=0.01) for r in rates), (trial.number, rates)
        if trial.feasible and trial.total_rate:
            best = max(best or 0.0, trial.total_rate)
    assert best is not None


def test_a_trial_that_cannot_be_a_finalist_is_not_bisected(session):
    """Once the final rounds' places are taken (``top`` trials held a rate), a trial that misses
    at or below the lowest of them keeps the highest rate it held, with no bisection after it:
    its figure only ranks it for the sampler. Trials above the bar are bisected as before."""
    result = run_workload_search(
        session, SPACE, UNSHED, settings(trials=8, rounds=1, top=2, endpoints=False)
    )
    earlier: list = []
    coarse = 0
    for trial in sorted(result.trials, key=lambda t: t.number):
        held = sorted((t for t in earlier if t.total_rate), key=lambda t: -t.served)[:2]
        bar = min(t.total_rate for t in held) if len(held) == 2 else None
        earlier.append(trial)
        if bar is None or not trial.feasible:
            continue
        levels = trial.capacity.detail["levels"]
        missed = [lv["total_rate_per_s"] for lv in levels if not lv["meets_objectives"]]
        above = [r for r in missed if r > trial.total_rate]
        if above and min(above) <= bar * 1.001:
            coarse += 1
            assert min(above) >= trial.total_rate * NEAR_STEP * 0.99, (trial.number, levels)
    assert coarse, "no trial fell under the finalists' bar: the test measured nothing"


def test_a_finalist_that_misses_its_warm_start_steps_down_from_it(session):
    """A config doing much worse in its rounds than in the search: the warm start misses, and
    the round steps down from it, x1.25 at a time, until a level holds, so the finalist still
    gets its capacity."""
    storage = optuna.storages.InMemoryStorage()
    first = run_workload_search(session, SPACE, UNSHED, settings(trials=3, rounds=1, storage=storage))
    top = next(f for f in first.finalists if f.trial is not None and f.layout is Layout.SHARED)
    screened = next(t for t in first.trials if t.number == top.trial).total_rate
    session.capacity_scale = 0.25  # the machine now gives every config a quarter of its capacity
    # the same study, final rounds of the best config only: those rounds are measured now
    again = run_workload_search(
        session, SPACE, UNSHED, settings(trials=3, rounds=1, storage=storage, top=1)
    )
    assert again.trials_this_run == 0 and not again.final_rounds_reused
    retried = again.last_capacity[top.label]
    assert retried.feasible and retried.stepped_down
    assert retried.levels[-1].total_rate == pytest.approx(screened)  # the warm start, missed
    assert retried.levels[0].total_rate < screened / 2
    # one step (x1.25) lower after another, as the playoff steps down: no ramp, no bisection
    steps = [screened / retried.levels[i].total_rate for i in range(len(retried.levels))]
    assert [round(math.log(s, NEAR_STEP), 6) for s in steps] == list(range(len(steps) - 1, -1, -1))
    assert retried.min_rate == pytest.approx(20.0 / 64)  # the search's floor, not the start's
    assert screened and retried.highest_rate < screened / 2


def test_a_finalist_that_misses_where_it_held_is_measured_a_step_lower_only(session):
    """As the playoff steps a contender down: a finalist that misses at the capacity it held is
    measured one step (x1.25) lower, and when that holds, that is its capacity: two levels, no
    ramp."""
    storage = optuna.storages.InMemoryStorage()
    first = run_workload_search(session, SPACE, UNSHED, settings(trials=3, rounds=1, storage=storage))
    top = next(f for f in first.finalists if f.trial is not None and f.layout is Layout.SHARED)
    screened = next(t for t in first.trials if t.number == top.trial).total_rate
    session.capacity_scale = 0.85  # below what it held (within 10 % of the true capacity), not 25 %
    again = run_workload_search(
        session, SPACE, UNSHED, settings(trials=3, rounds=1, storage=storage, top=1)
    )
    retried = again.last_capacity[top.label]
    rates = [level.total_rate for level in retried.levels]
    assert rates == pytest.approx([screened / 1.25, screened]), rates
    assert retried.feasible and retried.stepped_down
    assert retried.total_rate == pytest.approx(screened / 1.25)


def test_an_endpoint_point_is_the_split_of_its_knobs():
    point = {"max_batch_size": 64, "dynamic_batching": True, "admission": 16, "layout": "endpoints",
             "instance_count": 1, "intra_op_thread_count": 2}  # fmt: skip
    space = SearchSpace({**SPACE.dimensions, "instance_count": Choice((1,)),
                         "intra_op_thread_count": Choice((2,))})  # fmt: skip
    variant = point_variant(space, TRAFFIC, point)
    assert isinstance(variant, EndpointSplit) and variant.max_batch_size == 64
    split = dict(variant.split)
    assert set(split) == {"interactive", "batch"}
    assert split["batch"].max_queue_size == 16 and split["interactive"].max_queue_size is None
    assert all(v.backend_parameters["intra_op_thread_count"] == "1" for v in split.values())


def test_the_layout_is_searched_and_an_endpoint_trial_is_measured_as_endpoints(session):
    """With both layouts searched, a trial may be one endpoint per class: it is measured that
    way (two models loaded), it never asks for priorities (an endpoint serves one class), and
    if it is on top it goes to the final rounds as endpoints."""
    result = run_workload_search(session, SPACE, TRAFFIC, settings(layouts=None, trials=8, rounds=1))
    layouts = {t.params.get("layout") for t in result.trials}
    assert layouts == {"shared", "endpoints"}
    for trial in result.trials:
        if trial.params["layout"] == "endpoints":
            assert "priorities" not in trial.params
            assert trial.capacity is not None  # measured, as endpoints
    top = [t for t in result.trials if t.served][0]
    if top.params["layout"] == "endpoints":
        finalist = next(f for f in result.finalists if f.trial == top.number)
        assert finalist.layout == Layout.ENDPOINTS
    assert result.best_of(Layout.ENDPOINTS) is not None


def test_a_remote_server_searches_the_shared_layout_only(session):
    session.owns_server = False
    result = run_workload_search(session, SPACE, TRAFFIC, settings(layouts=None, trials=3, rounds=1))
    assert all("layout" not in t.params for t in result.trials)


def test_the_endpoint_layout_alone_measures_every_trial_as_endpoints(session):
    """``--layout endpoints``: no layout to choose, yet every trial is the split."""
    result = run_workload_search(
        session, SPACE, TRAFFIC, settings(layouts=(Layout.ENDPOINTS,), trials=3, rounds=1)
    )
    assert {t.params["layout"] for t in result.trials} == {"endpoints"}
    assert all(f.layout == Layout.ENDPOINTS for f in result.finalists if f.trial is not None)


def test_each_endpoint_searches_its_own_batch_sizes_and_instances():
    """From the space before it was narrowed to the largest request: the interactive endpoint
    serves single requests, so it may run batches smaller than the batch class's."""
    space = SearchSpace({**SPACE.dimensions, "instance_count": IntRange(1, 3)})
    choices = EndpointChoices.of(space)
    assert choices == EndpointChoices(batch_sizes=(4, 16, 64), instances=(1, 2, 3))
    point = choices.suggest(
        optuna.trial.FixedTrial(
            {"endpoint.interactive.max_batch_size": 4, "endpoint.interactive.instances": 1,
             "endpoint.batch.max_batch_size": 64, "endpoint.batch.instances": 2}
        ),
        TRAFFIC,
    )  # fmt: skip
    assert point["endpoint.interactive.max_batch_size"] == 4
    with pytest.raises(ValueError):  # a batch of 8 does not fit a batch size of 4
        choices.suggest(
            optuna.trial.FixedTrial(
                {"endpoint.interactive.max_batch_size": 4, "endpoint.interactive.instances": 1,
                 "endpoint.batch.max_batch_size": 4, "endpoint.batch.instances": 1}
            ),
            TRAFFIC,
        )  # fmt: skip
    # One value of a knob is nothing to search.
    assert EndpointChoices.of(SearchSpace({"max_batch_size": Choice((64,))})) == EndpointChoices()


def test_an_endpoint_point_with_its_own_knobs_loads_them():
    point = {"max_batch_size": 16, "dynamic_batching": True, "preferred_batch_size": "max",
             "admission": 16, "layout": "endpoints", "instance_count": 1, "intra_op_thread_count": 4,
             "endpoint.interactive.max_batch_size": 4, "endpoint.interactive.instances": 1,
             "endpoint.batch.max_batch_size": 64, "endpoint.batch.instances": 2}  # fmt: skip
    space = SearchSpace({**SPACE.dimensions, "preferred_batch_size": Choice(("none", "max")),
                         "instance_count": Choice((1, 2)),
                         "intra_op_thread_count": Choice((4,))})  # fmt: skip
    variant = point_variant(space, TRAFFIC, point)
    assert isinstance(variant, EndpointSplit) and variant.max_batch_size == 16  # the trial's config
    split = dict(variant.split)
    assert split["interactive"].max_batch_size == 4 and split["interactive"].instance_count == 1
    assert split["batch"].max_batch_size == 64 and split["batch"].instance_count == 2
    assert split["batch"].preferred_batch_sizes == (64,)  # "max" follows the endpoint's own size
    # 4 compute threads by demand (0.3 x 1 : 0.7 x 8): 1 for interactive, 3 for batch's 2 instances
    assert split["interactive"].backend_parameters["intra_op_thread_count"] == "1"
    assert split["batch"].backend_parameters["intra_op_thread_count"] == "1"
    assert describe_endpoint_knobs(point) == (
        "interactive: max_batch_size=4 1 instance; batch: max_batch_size=64 2 instances"
    )
    # Without its own knobs an endpoint is the split of the config, as before.
    plain = {k: v for k, v in point.items() if not k.startswith("endpoint.")}
    assert dict(point_variant(space, TRAFFIC, plain).split)["batch"].max_batch_size == 16
    assert (
        endpoint_variants(TRAFFIC, variant, 1, 16, own={"batch": EndpointKnobs(instances=3)})[
            "batch"
        ].instance_count
        == 3
    )


def test_endpoint_trials_search_each_endpoints_knobs_and_the_finals_load_them(session):
    space = SearchSpace({**SPACE.dimensions, "instance_count": Choice((1, 2))})
    result = run_workload_search(
        session, space, TRAFFIC, settings(layouts=(Layout.ENDPOINTS,), trials=6, rounds=1)
    )
    for trial in result.trials:
        assert trial.params["endpoint.batch.max_batch_size"] in (16, 64)  # fits a batch of 8
        assert trial.params["endpoint.interactive.max_batch_size"] in (4, 16, 64)
        assert trial.params["endpoint.interactive.instances"] in (1, 2)
    top = [t for t in result.trials if t.served][0]
    finalist = next(f for f in result.finalists if f.trial == top.number)
    batch_config = finalist.models["mlp_batch"]
    assert f"max_batch_size: {top.params['endpoint.batch.max_batch_size']}" in batch_config
    assert f"count: {top.params['endpoint.batch.instances']}" in batch_config
    # The modelled machine gives the batch endpoint its instances' part: the best trial keeps the
    # largest batch size for it.
    assert top.params["endpoint.batch.max_batch_size"] == 64

    off = run_workload_search(
        session, space, TRAFFIC,
        settings(layouts=(Layout.ENDPOINTS,), trials=2, rounds=1, endpoint_knobs=False,
                 storage=optuna.storages.InMemoryStorage()),
    )  # fmt: skip
    assert not any(k.startswith("endpoint.") for t in off.trials for k in t.params)


def test_workload_identities_name_what_differs():
    from tritontune.study.records import WorkloadIdentity

    a = WorkloadIdentity("m", {"classes": [{"name": "x", "share": 0.5}, {"name": "y"}]})
    b = WorkloadIdentity("n", {"classes": [{"name": "x", "share": 0.7}, {"name": "z"}], "seed": 3})
    assert a.differences(b) == [
        "model: 'm', 'n'",
        "class 'x' share: 0.5, 0.7",
        "class 'y': present, absent",
        "class 'z': absent, present",
        "seed: None, 3",
    ]
    assert a.differences(a) == []
