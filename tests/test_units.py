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
        ("2min", 120.0),
        ("1.5h", 5400.0),
        (" 20 ms ", 0.02),
        (".5s", 0.5),
        ("0", 0.0),
        (0, 0.0),
    ],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["50m", "2m", "0.5 m"])
def test_m_alone_is_refused_as_ambiguous(text):
    number = text.removesuffix("m").strip()
    with pytest.raises(InputError) as error:
        parse_duration(text, what="--slo-p99")
    message = str(error.value)
    assert message.startswith(f"--slo-p99: {text!r} is ambiguous")
    assert f"{number}ms" in message and f"{number}min" in message
    assert "\n" not in message


@pytest.mark.parametrize("text", ["50", "1.5", 200, 0.5])
def test_bare_number_is_refused(text):
    # No caller has a default unit: a bare 50 is 50 ms to one user and 50 s to another.
    with pytest.raises(InputError, match=r"--window: .* has no unit; expected one of us, ms, s, min, h"):
        parse_duration(text, what="--window")


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("fast", "is not a duration"),
        ("50 ms ms", "is not a duration"),
        ("ms", "is not a duration"),
        ("", "is not a duration"),
        ("-5ms", "is negative"),
        ("5 parsecs", "unknown unit 'parsecs'"),
        ("5sec", "unknown unit 'sec'"),
        (True, "is not a duration"),
    ],
)
def test_bad_duration_names_the_option(text, reason):
    with pytest.raises(InputError, match=f"^--slo-p99: .*{reason}"):
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
