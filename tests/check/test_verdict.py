"""The check's verdict rules, on figures made up to sit on either side of the limits."""

import pytest

from tritontune.check.verdict import RoundFigures, judge, needs_more_rounds

SLO = 0.050
RECORDED = 1000.0


def rounds(*pairs: tuple[float, float], errors: float = 0.0) -> list[RoundFigures]:
    return [RoundFigures(throughput=t, p99_s=p, error_rate=errors) for t, p in pairs]


def by_name(criteria):
    return {c.name: c for c in criteria}


def test_clean_rounds_pass_with_high_confidence():
    got = by_name(judge(rounds((990, 0.040), (1010, 0.042), (1003, 0.041)),
                        slo_p99_s=SLO, recorded_throughput=RECORDED, tolerance=0.1))  # fmt: skip
    assert all(c.passed for c in got.values())
    assert {c.confidence for c in got.values()} == {"high"}
    assert got["throughput"].limit == pytest.approx(900)
    assert got["p99"].measured == pytest.approx(0.041)


def test_one_noisy_round_does_not_fail_a_clean_model():
    # the middle round met a noisy neighbour: slow and over the SLO
    got = judge(rounds((1000, 0.040), (600, 0.090), (990, 0.041)),
                slo_p99_s=SLO, recorded_throughput=RECORDED, tolerance=0.1)  # fmt: skip
    assert all(c.passed for c in got)
    assert by_name(got)["p99"].agreeing == 2
    assert by_name(got)["p99"].confidence == "medium"
    assert needs_more_rounds(got)  # the caller measures two more before deciding


def test_clear_regression_fails_with_high_confidence():
    got = by_name(judge(rounds((500, 0.080), (520, 0.085), (510, 0.079)),
                        slo_p99_s=SLO, recorded_throughput=RECORDED, tolerance=0.1))  # fmt: skip
    assert not got["p99"].passed and not got["throughput"].passed
    assert got["p99"].confidence == got["throughput"].confidence == "high"
    assert not needs_more_rounds(got.values())


def test_split_vote_has_low_confidence():
    got = by_name(judge(rounds((950, 0.04), (850, 0.04), (880, 0.04), (910, 0.04), (920, 0.04)),
                        slo_p99_s=SLO, recorded_throughput=RECORDED, tolerance=0.1))  # fmt: skip
    assert got["throughput"].passed  # median 910 >= 900
    assert got["throughput"].agreeing == 3
    assert got["throughput"].confidence == "low"


def test_failed_requests_fail_the_model():
    got = by_name(judge(rounds((1000, 0.04), (1000, 0.04), (1000, 0.04), errors=0.05),
                        slo_p99_s=SLO, recorded_throughput=RECORDED, tolerance=0.1))  # fmt: skip
    assert not got["errors"].passed


def test_no_rounds_is_a_bug():
    with pytest.raises(ValueError):
        judge([], slo_p99_s=SLO, recorded_throughput=RECORDED, tolerance=0.1)
