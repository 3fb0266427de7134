"""Open-loop arrival shapes (tritontune.measure.arrivals): every shape has the stream's mean gap,
and its spread is the one asked for; a recorded trace replays its own gaps, scaled to the rate.
20,000 gaps: the sample mean is within ~1 % of the
true one (Poisson: its standard error is 0.7 %), the sample CV within a few %; the margins below
are several times that."""

from __future__ import annotations

import itertools
import random
import statistics
from pathlib import Path

import pytest

from tritontune.errors import InputError
from tritontune.measure.arrivals import Arrival, arrival_gaps, next_gap, read_arrival_trace
from tritontune.measure.loadgen import LoadSpec

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


# --- replayed traces -------------------------------------------------------------------------


def trace_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "trace.csv"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_trace_replays_its_gaps_scaled_to_the_rate_and_starts_over(tmp_path):
    # out of order, as an access log written on completion is: gaps 1, 2, 1 s over 4 s
    path = trace_file(tmp_path, "# gateway\n10\n13\n11\n14\n")
    trace = read_arrival_trace(path, where="t")
    assert (trace.arrivals, trace.natural_rate) == (4, pytest.approx(0.75))
    assert statistics.fmean(trace.unit_gaps) == pytest.approx(1.0)
    # at 3 req/s (four times faster than recorded): 0.25, 0.5, 0.25 s, then the same again
    played = list(itertools.islice(arrival_gaps(Arrival.TRACE, 3.0, random.Random(0), trace=trace), 6))
    assert played == pytest.approx([0.25, 0.5, 0.25] * 2)
    assert trace.speedup(3.0) == pytest.approx(4.0)


def test_a_trace_keeps_its_bursts_at_any_rate(tmp_path):
    """The shape is the trace's: its gaps' CV is the same whatever the rate."""
    rng = random.Random(3)
    stamps, t = [], 0.0
    for _ in range(2000):  # bursts: ten quick arrivals, then a lull
        t += rng.choice([0.001] * 9 + [0.5])
        stamps.append(t)
    trace = read_arrival_trace(trace_file(tmp_path, "\n".join(map(str, stamps))), where="t")
    for rate in (10.0, 1000.0):
        played = list(itertools.islice(arrival_gaps(Arrival.TRACE, rate, rng, trace=trace), 1999))
        assert statistics.fmean(played) == pytest.approx(1 / rate)
        assert cv_of(played) == pytest.approx(cv_of([b - a for a, b in itertools.pairwise(stamps)]))


def test_a_trace_reads_iso_times_a_header_and_a_class_column(tmp_path):
    text = (
        "timestamp class\n"
        "2026-11-24T10:00:00Z interactive\n"
        "2026-11-24T10:00:00.500Z batch\n"
        "2026-11-24T10:00:02Z interactive\n"
    )
    path = trace_file(tmp_path, text)
    assert read_arrival_trace(path, "interactive", where="t").natural_rate == pytest.approx(0.5)
    assert read_arrival_trace(path, None, where="t").arrivals == 3  # no class: every line


@pytest.mark.parametrize(
    ("text", "message"),
    [("1.0\n", "has 1 arrival(s): a trace needs at least 2"),
     ("5\n5\n", "every arrival has the same timestamp"),
     ("1.0\nnoon\n", "trace.csv line 2: expected a timestamp"),
     ("1.0\nnan\n", "trace.csv line 2: expected a timestamp")],
)  # fmt: skip
def test_bad_traces_are_one_line(tmp_path, text, message):
    with pytest.raises(InputError) as caught:
        read_arrival_trace(trace_file(tmp_path, text), where="w.yaml: classes[0] (a): trace")
    assert message in str(caught.value) and "\n" not in str(caught.value)


def test_a_binary_file_is_not_a_trace(tmp_path):
    path = tmp_path / "trace.csv"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(InputError, match="not a text file of timestamps"):
        read_arrival_trace(path, where="t")
