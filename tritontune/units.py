"""Parsing of the human units on the command line and in space files: durations, rates, lists.

Durations are kept as float seconds inside tritontune; Triton's config wants microseconds, which
:func:`to_microseconds` gives.
"""

from __future__ import annotations

import re

from tritontune.errors import InputError

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([^\d\s.]*)\s*$")
#: The units a duration may carry, in seconds. ``µs`` is ``us`` typed with the micro sign; ``h`` is
#: for long search budgets (``--timeout 8h``). ``m`` is refused: ``50m`` reads as minutes to a
#: parser and as milliseconds to a person setting a latency SLO.
_SCALE = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_UNITS = "us, ms, s, min, h"


def parse_duration(text: str | float | int, *, what: str = "duration") -> float:
    """Parse ``50ms``, ``0.05s``, ``500us``, ``20min``, ``2h`` into seconds.

    Every duration carries its unit: a bare number other than ``0`` (which is zero in every unit)
    is refused, and so is ``m`` alone (``50m``: say ``50ms`` or ``50min``). A number given as a
    number (``500`` in a YAML file) is a bare number too.
    """
    shown = f"{text!r}" if isinstance(text, str) else str(text)
    if isinstance(text, bool):
        raise InputError(f"{what}: {shown} is not a duration; expected a number with a unit, e.g. 50ms")
    match = _DURATION.match(str(text))
    if not match:
        if str(text).strip().startswith("-"):
            raise InputError(f"{what}: {shown} is negative; expected a duration >= 0, e.g. 50ms")
        raise InputError(
            f"{what}: {shown} is not a duration; expected a number with a unit ({_UNITS}), "
            "e.g. 50ms, 0.05s, 500us, 20min"
        )
    number, suffix = match.group(1), match.group(2)
    value = float(number)
    if suffix == "m":
        raise InputError(
            f"{what}: {shown} is ambiguous ('m'); write {number}ms for milliseconds "
            f"or {number}min for minutes"
        )
    if not suffix:
        if value == 0:
            return 0.0
        raise InputError(
            f"{what}: {shown} has no unit; expected one of {_UNITS}, e.g. {number}ms or {number}s"
        )
    if suffix not in _SCALE:
        raise InputError(f"{what}: {shown} has an unknown unit {suffix!r}; expected one of {_UNITS}")
    return value * _SCALE[suffix]


def to_microseconds(seconds: float) -> int:
    """Seconds to whole microseconds, as Triton's ``max_queue_delay_microseconds`` wants."""
    return int(round(seconds * 1e6))


def format_duration(seconds: float) -> str:
    """The shortest readable form: ``500us``, ``2ms``, ``1.5s``."""
    if seconds == 0:
        return "0"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f}us"
    if seconds < 1:
        return f"{seconds * 1e3:.3g}ms"
    return f"{seconds:.3g}s"


def parse_rate(text: str | float, *, what: str = "request rate") -> float:
    """Parse a request rate (``400``, ``400/s``, ``1.5k``) into requests per second (> 0)."""
    raw = str(text).strip().lower().removesuffix("/s").removesuffix("rps").strip()
    scale = 1.0
    if raw.endswith("k"):
        raw, scale = raw[:-1], 1000.0
    try:
        value = float(raw) * scale
    except ValueError:
        raise InputError(
            f"{what}: {text!r} is not a rate; expected requests per second, e.g. 400 or 1.5k"
        ) from None
    if not value > 0 or value == float("inf"):
        raise InputError(f"{what}: {text!r} must be a positive, finite number of requests/s")
    return value


def parse_int_list(text: str, *, what: str, minimum: int = 1) -> list[int]:
    """Parse ``1,4,16`` into ``[1, 4, 16]``; every value must be an integer >= ``minimum``."""
    values: list[int] = []
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = int(part)
        except ValueError:
            raise InputError(f"{what}: {part!r} is not a whole number (expected e.g. 1,4,16)") from None
        if value < minimum:
            raise InputError(f"{what}: {value} is below the minimum of {minimum}")
        values.append(value)
    if not values:
        raise InputError(f"{what}: expected at least one value, e.g. 1,4,16")
    return values


def parse_rate_list(text: str, *, what: str = "--request-rate") -> list[float]:
    """Parse ``100,400,1k`` into request rates."""
    parts = [p for p in str(text).split(",") if p.strip()]
    if not parts:
        raise InputError(f"{what}: expected at least one rate, e.g. 100,400")
    return [parse_rate(p, what=what) for p in parts]


def parse_fraction(text: str | float, *, what: str) -> float:
    """Parse ``10%`` or ``0.1`` into 0.1; must lie in [0, 1)."""
    raw = str(text).strip()
    percent = raw.endswith("%")
    try:
        value = float(raw.removesuffix("%").strip())
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a fraction; expected e.g. 10% or 0.1") from None
    if percent:
        value /= 100
    if not 0 <= value < 1:
        raise InputError(f"{what}: {text!r} must be at least 0 % and below 100 %")
    return value
