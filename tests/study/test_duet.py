"""Duets: paired per-round ratios, their interval and the decision, and the one verdict rule."""

from __future__ import annotations

import pytest

from tritontune.study.duet import (
    TIE_MARGIN,
    Duet,
    Order,
    decide,
    duet,
    order_of,
    paired_ratios,
    sign_interval,
)


def test_ratios_pair_by_round_and_skip_rounds_one_side_missed():
    assert paired_ratios({1: 110.0, 2: 90.0, 3: 50.0}, {1: 100.0, 2: 100.0, 4: 1.0}) == [1.1, 0.9]
    assert paired_ratios({1: 5.0}, {1: 0.0}) == []


def test_the_interval_is_the_min_max_up_to_five_rounds_then_drops_the_extremes():
    assert sign_interval([1.0, 3.0, 2.0]) == (1.0, 3.0)
    assert sign_interval([5.0, 1.0, 4.0, 2.0, 3.0]) == (1.0, 5.0)
    assert sign_interval([6.0, 1.0, 4.0, 2.0, 3.0, 5.0]) == (2.0, 5.0)  # 78 % coverage
    assert sign_interval([7.0]) == (7.0, 7.0)


def test_a_clear_win_either_way():
    ahead = duet([104 / 95, 97 / 93, 112 / 97])
    assert ahead.order == Order.AHEAD and ahead.rounds == 3
    assert ahead.median == pytest.approx(104 / 95)
    assert ahead.low == pytest.approx(97 / 93) and ahead.high == pytest.approx(112 / 97)
    assert duet([0.9, 0.95, 0.92]).order == Order.BEHIND


def test_within_margin_is_both_ends_inside_three_percent_read_either_way_round():
    assert duet([1.01, 0.99, 1.005]).order == Order.WITHIN_MARGIN
    assert order_of(1 / (1 + TIE_MARGIN), 1 + TIE_MARGIN) == Order.WITHIN_MARGIN
    assert order_of(0.96, 1.0) == Order.UNCERTAIN  # 1/0.96 = 1.042: past the margin
    assert order_of(1.01, 1.05) == Order.AHEAD  # ahead in every round, maybe by more than 3 %


def test_uncertain_when_the_interval_holds_one_and_reaches_past_the_margin():
    assert duet([1.1, 0.95, 1.06]).order == Order.UNCERTAIN
    none = duet([], fallback=1.2)
    assert none.order == Order.UNCERTAIN and none.rounds == 0 and none.median == 1.2


def test_fewer_than_three_ratios_decide_nothing():
    """The min-max of 1 or 2 ratios holds the median ratio 0 % or 50 % of the time: a playoff's
    one shared extra round (x0.99) had declared a tie, which the simpler config then won."""
    assert duet([0.99]).order == Order.UNCERTAIN
    assert duet([1.3, 1.4]).order == Order.UNCERTAIN
    assert duet([1.01, 0.99]).order == Order.UNCERTAIN
    assert duet([1.01, 0.99, 1.0]).order == Order.WITHIN_MARGIN
    one = {"simple": {7: 64.3, 4: 65.7, 5: 55.0, 6: 58.9}, "dear": {7: 63.6, 1: 73.0, 2: 71.4}}
    verdict = decide(one, {"simple": (1.0,), "dear": (2.0,)})
    assert verdict.leader == verdict.winner == "dear" and verdict.uncertain == ("simple",)


def test_round_trip_and_text():
    d = duet([1.1, 0.95, 1.06])
    again = Duet.from_dict(d.to_dict())
    assert again.order == d.order and again.rounds == 3
    assert (again.median, again.low, again.high) == pytest.approx((d.median, d.low, d.high), abs=1e-4)
    assert d.text() == "x1.06 [0.95-1.10] over 3 rounds: uncertain"


def test_decide_simplicity_only_within_margin():
    rounds = {"a": {1: 100.0, 2: 120.0, 3: 110.0}, "b": {1: 101.0, 2: 121.0, 3: 111.0}}
    verdict = decide(rounds, {"a": (1.0,), "b": (2.0,)})
    assert verdict.leader == "b" and verdict.winner == "a"  # within 1 %: the simpler
    assert verdict.tied == ("b", "a") and verdict.uncertain == ()


def test_decide_never_gives_throughput_to_the_simpler_when_uncertain_or_behind():
    clear = {"simple": {1: 93.0, 2: 95.0, 3: 97.0}, "dear": {1: 97.0, 2: 104.0, 3: 112.0}}
    verdict = decide(clear, {"simple": (1.0,), "dear": (4.0,)})
    assert verdict.winner == "dear" and verdict.tied == ()
    assert verdict.duets["simple"].order == Order.BEHIND
    noisy = {"simple": {1: 1000.0, 2: 1000.0, 3: 1000.0}, "dear": {1: 1100.0, 2: 950.0, 3: 1060.0}}
    verdict = decide(noisy, {"simple": (1.0,), "dear": (4.0,)})
    assert verdict.winner == "dear" and verdict.uncertain == ("simple",)


def test_decide_on_nothing():
    assert decide({}).winner is None


def test_the_workload_verdict_is_the_same_rule_and_never_trades_work_for_anything():
    from tritontune.measure.traffic import Layout
    from tritontune.study.codec import workload_final_of
    from tritontune.study.figures import Finalist
    from tritontune.study.verdict import workload_final

    def finalist(trial: int | None, served: tuple[float, ...]) -> Finalist:
        return Finalist(trial, {}, tuple(s / 2 for s in served), Layout.SHARED, served=served)

    clear = finalist(1, (104.0, 97.0, 112.0))
    swinging = finalist(2, (110.0, 90.0, 100.0))
    base = finalist(None, (50.0, 50.0, 50.0))
    final = workload_final((swinging, clear, base))
    assert final.winner == clear
    assert final.duets["trial 2"].order == Order.UNCERTAIN and final.uncertain == ["trial 2"]
    assert final.duets["baseline"].order == Order.BEHIND
    written = final.to_dict()["finalists"]
    assert written[2]["versus_winner"]["order"] == "behind" and "versus_winner" not in written[1]
    assert final.best_of(Layout.SHARED) == clear and final.best_of(Layout.ENDPOINTS) is None
    assert workload_final_of(final.to_dict()) == final  # read back: the same decision


def test_settled_behind_in_every_round_after_two():
    from tritontune.study.duet import settled

    one_round = {"a": {0: 100.0}, "b": {0: 60.0}, "c": {0: 20.0}}
    assert settled(one_round) == {"c"}  # one round settles only the far behind (<= 1/2)
    assert settled({"a": {0: 100.0}, "c": {0: 20.0}}) == {"c"}  # the leader needs two rounds
    two = {"a": {0: 100.0, 1: 90.0}, "b": {0: 20.0, 1: 80.0}, "c": {0: 95.0, 1: 80.0}}
    assert settled(two) == {"b"}  # c is close (0.95): its order is for more rounds to tell
    once_near = {"a": {0: 100.0, 1: 90.0}, "b": {0: 20.0, 1: 82.0}}
    assert settled(once_near) == set()  # 82/90 > 0.9 in one round: not behind enough
    everyone = {"a": {0: 100.0, 1: 90.0}, "b": {0: 20.0, 1: 30.0}, "c": {0: 0.0, 1: 10.0}}
    assert settled(everyone) == {"a", "b", "c"}  # the leader has no one left to be told from
    assert settled({"a": {0: 100.0}}) == set()
    assert settled({"a": {0: 100.0, 1: 90.0}}) == {"a"}
    assert settled({}) == set()
