import pytest

from tritontune.errors import InputError
from tritontune.units import (
    format_duration,
    parse_duration,
    parse_int_list,
    parse_rate,
    parse_rate_list,
    to_microseconds,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("50ms", 0.05),
        ("0.05s", 0.05),
        ("500us", 0.0005),
        ("500µs", 0.0005),
        ("2m", 120.0),
        ("1.5", 1.5),
        (" 20 ms ", 0.02),
        (".5s", 0.5),
        (3, 3.0),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


def test_bare_number_uses_given_unit():
    assert parse_duration("200", unit="ms") == pytest.approx(0.2)


@pytest.mark.parametrize("text", ["fast", "50 ms ms", "ms", "-5ms", "5 parsecs", ""])
def test_bad_duration_names_the_option(text):
    with pytest.raises(InputError, match="--slo-p99"):
        parse_duration(text, what="--slo-p99")


def test_microseconds_and_format():
    assert to_microseconds(parse_duration("2ms")) == 2000
    assert format_duration(0.0005) == "500us"
    assert format_duration(0.002) == "2ms"
    assert format_duration(1.5) == "1.5s"
    assert format_duration(0) == "0"


@pytest.mark.parametrize(("text", "rate"), [("400", 400.0), ("1.5k", 1500.0), ("250/s", 250.0)])
def test_parse_rate(text, rate):
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["0", "-3", "abc", "inf", "nan"])
def test_bad_rate(text):
    with pytest.raises(InputError, match="request rate"):
        parse_rate(text)


def test_int_and_rate_lists():
    assert parse_int_list("1, 4,16", what="--concurrency") == [1, 4, 16]
    assert parse_rate_list("100,1k") == [100.0, 1000.0]
    with pytest.raises(InputError, match="--concurrency: 'x'"):
        parse_int_list("1,x", what="--concurrency")
    with pytest.raises(InputError, match="below the minimum"):
        parse_int_list("0", what="--concurrency")
    with pytest.raises(InputError, match="at least one"):
        parse_int_list(" , ", what="--concurrency")
