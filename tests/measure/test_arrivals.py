"""Open-loop arrival shapes (tritontune.measure.loadgen.next_gap): every shape has the stream's
mean gap, and its spread is the one asked for. 20,000 gaps: the sample mean is within ~1 % of the
true one (Poisson: its standard error is 0.7 %), the sample CV within a few %; the margins below
are several times that."""

from __future__ import annotations

import random
import statistics

import pytest

from tritontune.measure.loadgen import Arrival, LoadSpec, next_gap

N = 20_000


def gaps(arrival: Arrival, rate: float, cv: float | None = None, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [next_gap(arrival, rate, rng, cv) for _ in range(N)]


def cv_of(values: list[float]) -> float:
    return statistics.pstdev(values) / statistics.fmean(values)


@pytest.mark.parametrize(
    ("arrival", "cv", "expected_cv"),
    [(Arrival.POISSON, None, 1.0), (Arrival.CONSTANT, None, 0.0),
     (Arrival.GAMMA, 2.0, 2.0), (Arrival.GAMMA, 0.5, 0.5), (Arrival.GAMMA, 1.0, 1.0)],
)  # fmt: skip
def test_each_shape_keeps_the_rate_and_has_its_spread(arrival, cv, expected_cv):
    rate = 250.0
    values = gaps(arrival, rate, cv)
    assert all(v >= 0 for v in values)
    assert statistics.fmean(values) == pytest.approx(1 / rate, rel=0.05)
    assert cv_of(values) == pytest.approx(expected_cv, abs=0.1 * max(expected_cv, 1.0))


def test_bursty_arrivals_bunch_up_more_than_poisson_at_the_same_rate():
    """CV 2: more of the arrivals come in quick succession (and longer lulls between)."""
    rate = 100.0
    poisson, bursty = gaps(Arrival.POISSON, rate), gaps(Arrival.GAMMA, rate, 2.0)
    quick = 0.1 / rate  # a tenth of the mean gap
    share = lambda values: sum(v < quick for v in values) / N  # noqa: E731
    assert share(bursty) > 2 * share(poisson)
    assert max(bursty) > max(poisson)


def test_the_label_names_the_shape():
    assert LoadSpec.rate(40, Arrival.GAMMA, 2.0).label() == "40 req/s (gamma, cv 2)"
    assert LoadSpec.rate(40).label() == "40 req/s (poisson)"
