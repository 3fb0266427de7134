"""The workload file: the classes of traffic a model serves at once, and what each one needs.

Each class is an open-loop stream of its own (so a slow class can't slow another's arrivals)
with a share of the total rate (or a rate of its own, scaled together), a batch size, a priority
and an objective: a class with ``slo_p99`` is *interactive* (its p99 within the SLO, at most
:data:`MAX_ERROR_RATE` of its requests lost unless it may be shed); one without is *best effort*
(served, within ``completion_p99`` when given), and either may carry a floor of work served
(``min_served``). Classes may each name the model they call (:attr:`Traffic.routed`). A
workload's capacity is the rate scaling of that shape. The file format, with an example of every
field: ``docs/concepts/workloads.md``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritontune.config.variant import QueuePolicy, Variant
from tritontune.enums import TextEnum
from tritontune.errors import InputError
from tritontune.measure.arrivals import Arrival, ArrivalTrace, read_arrival_trace
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.request_shape import RequestShape
from tritontune.units import format_duration, parse_duration
from tritontune.yamlfile import read_yaml

CLASS_KEYS = (
    "name",
    "model",
    "share",
    "rate",
    "batch_size",
    "input_data",
    "priority",
    "timeout",
    "slo_p99",
    "completion_p99",
    "may_shed",
    "min_served",
    "arrival",
    "arrival_cv",
    "trace",
)


class Layout(TextEnum):
    """How a model serves a workload's classes."""

    SHARED = "shared"
    """One model for every class, told apart by priority level."""
    ENDPOINTS = "endpoints"
    """One model per class (``NAME_<class>``, each with its own config), the client routing each
    class to its own."""


class ClassObjective(TextEnum):
    """What a class of traffic asks of the server."""

    LATENCY = "latency"
    """Interactive: p99 within an SLO."""
    THROUGHPUT = "throughput"
    """Best effort: served, optionally within a completion-time bound."""


@dataclass(frozen=True)
class ServedFloor:
    """The least work a class must have served (``min_served``): a share of its arrivals, or
    inferences per second (a request of batch 8 is 8 inferences)."""

    share: float | None = None
    infer_per_s: float | None = None

    def shortfall(self, served_share: float, inferences: float) -> str | None:
        """Why a class that served ``served_share`` of its arrivals (0..1), ``inferences`` per
        second, falls short (one line), or None."""
        if self.share is not None:
            if served_share < self.share:
                return f"served {served_share:.0%} of its arrivals < min_served {self.share:.0%}"
            return None
        assert self.infer_per_s is not None
        if inferences < self.infer_per_s:
            return f"served {inferences:,.1f} infer/s < min_served {self.infer_per_s:g}/s"
        return None

    def to_text(self) -> str:
        """As a workload file says it."""
        if self.share is not None:
            return f"{self.share * 100:.12g}%"
        return f"{self.infer_per_s:.12g}/s"


@dataclass(frozen=True)
class TrafficClass:
    """One class of requests: its part of the load, its requests, and its objective."""

    name: str
    weight: float
    """Its share of the requests, or its own rate in req/s (see :attr:`Traffic.by_rate`)."""
    request: RequestShape
    slo_p99_s: float | None = None
    completion_p99_s: float | None = None
    may_shed: bool = False
    min_served: ServedFloor | None = None
    arrival: Arrival = Arrival.POISSON
    arrival_cv: float | None = None
    """The gaps' coefficient of variation (``arrival: gamma`` only)."""
    trace: ArrivalTrace | None = None
    """The recorded arrivals replayed (``arrival: trace`` only)."""
    model: str | None = None
    """The model this class calls (``model:``; None: the one model searched)."""

    def shape_keys(self) -> dict[str, Any]:
        """The served floor and arrival shape, as both a workload file and a study say them."""
        keys: dict[str, Any] = {}
        if self.min_served is not None:
            keys["min_served"] = self.min_served.to_text()
        if self.arrival != Arrival.POISSON:
            keys["arrival"] = str(self.arrival)
        if self.arrival_cv is not None:
            keys["arrival_cv"] = self.arrival_cv
        if self.trace is not None:
            keys["trace"] = str(self.trace.source)
        return keys

    def load(self, rate: float) -> LoadSpec:
        """This class's open-loop stream at ``rate`` req/s."""
        return LoadSpec.rate(rate, self.arrival, self.arrival_cv, self.trace)

    @property
    def objective(self) -> ClassObjective:
        return ClassObjective.LATENCY if self.slo_p99_s is not None else ClassObjective.THROUGHPUT

    @property
    def latency_bound_s(self) -> float | None:
        """The p99 this class must stay within, if any."""
        return self.slo_p99_s if self.slo_p99_s is not None else self.completion_p99_s

    def describe(self) -> str:
        parts = [
            self.name + (f" -> {self.model}" if self.model else ""),
            f"batch {self.request.batch_size}",
        ]
        if self.request.priority:
            parts.append(f"priority {self.request.priority}")
        if self.slo_p99_s is not None:
            parts.append(f"p99 <= {format_duration(self.slo_p99_s)}")
        else:
            bound = self.completion_p99_s
            parts.append("best effort" + (f", p99 <= {format_duration(bound)}" if bound else ""))
        if self.request.timeout_us:
            parts.append(f"queue timeout {format_duration(self.request.timeout_us / 1e6)}")
        if self.may_shed:
            parts.append("may be shed")
        if self.min_served is not None:
            parts.append(f"min served {self.min_served.to_text()}")
        if self.arrival == Arrival.GAMMA:
            parts.append(f"gamma arrivals (cv {self.arrival_cv:g})")
        elif self.trace is not None:
            parts.append(f"trace arrivals ({self.trace.describe()})")
        elif self.arrival != Arrival.POISSON:
            parts.append(f"{self.arrival} arrivals")
        return ", ".join(parts)


@dataclass(frozen=True)
class Traffic:
    """The classes of a workload file, in the file's order."""

    classes: tuple[TrafficClass, ...]
    by_rate: bool = False
    """True when the classes gave their own ``rate`` (req/s); False for ``share``."""
    source: Path | None = None

    def fractions(self) -> dict[str, float]:
        """Each class's part of the total request rate."""
        total = sum(c.weight for c in self.classes)
        return {c.name: c.weight / total for c in self.classes}

    def rates(self, total_rate: float) -> dict[str, float]:
        """Each class's request rate (req/s) at a total of ``total_rate``."""
        return {name: total_rate * f for name, f in self.fractions().items()}

    @property
    def nominal_rate(self) -> float | None:
        """The total rate the file names (its classes' rates), or None for shares."""
        return sum(c.weight for c in self.classes) if self.by_rate else None

    @property
    def routed(self) -> bool:
        """Each class names the model it calls (``model:``): several models on one server."""
        return any(c.model is not None for c in self.classes)

    @property
    def models(self) -> tuple[str, ...]:
        """The models the classes name, each once, in the file's order (empty: not routed)."""
        return tuple(dict.fromkeys(c.model for c in self.classes if c.model is not None))

    def routes(self, model: str) -> dict[str, str]:
        """Class -> the model its requests go to: each class's own, or ``model`` for all."""
        return {c.name: c.model or model for c in self.classes}

    def served_by(self, model: str) -> Traffic:
        """The classes that call ``model``, as a workload of their own (their shares of the
        whole kept as weights): what that model's batch sizes and scheduler are sized for."""
        classes = tuple(c for c in self.classes if c.model == model)
        if not classes:
            raise KeyError(model)
        return dataclasses.replace(self, classes=classes)

    @property
    def priority_levels(self) -> int:
        """The priority levels the classes use (0: none names a priority)."""
        return max((c.request.priority for c in self.classes), default=0)

    def scheduled(
        self, variant: Variant, *, priorities: bool = True, admission: int | None = None
    ) -> Variant:
        """``variant`` with the scheduler set up for this workload.

        With ``priorities`` (and classes that name them): Triton's priority levels are the
        classes' (1 first), a request naming none gets the lowest, and each class with a
        ``timeout`` gets it as its level's queue timeout (REJECT; requests may override it with a
        shorter one). ``admission`` bounds the queue of the lowest level (admission control: past
        it Triton rejects at once instead of queueing into the cliff); without priorities it
        bounds the one queue, whose timeout is then the longest class timeout (the others apply
        theirs per request).
        """
        levels = self.priority_levels if priorities else 0
        if not levels:  # one queue: the longest class timeout, shorter ones per request
            timeouts = [c.request.timeout_us for c in self.classes if c.request.timeout_us]
            one_queue = dataclasses.replace(
                variant,
                priority_levels=0 if self.priority_levels else variant.priority_levels,
                max_queue_size=admission if admission is not None else variant.max_queue_size,
            )
            if not timeouts:
                return one_queue
            return dataclasses.replace(
                one_queue,
                queue_timeout_us=max(timeouts),
                timeout_action="reject",
                allow_timeout_override=True,
            )
        policies: dict[int, QueuePolicy] = {}
        for c in self.classes:
            if c.request.timeout_us and c.request.priority:
                policies[c.request.priority] = QueuePolicy(
                    timeout_us=c.request.timeout_us,
                    timeout_action="reject",
                    allow_timeout_override=True,
                )
        if admission is not None:
            lowest = policies.get(levels, QueuePolicy())
            policies[levels] = dataclasses.replace(lowest, max_queue_size=admission)
        return dataclasses.replace(
            variant,
            priority_levels=levels,
            default_priority_level=levels,
            priority_queue_policies=tuple(sorted(policies.items())),
        )

    def get(self, name: str) -> TrafficClass:
        for traffic_class in self.classes:
            if traffic_class.name == name:
                return traffic_class
        raise KeyError(name)

    def describe(self) -> str:
        fractions = self.fractions()
        return "; ".join(f"{c.describe()} ({fractions[c.name]:.0%})" for c in self.classes)

    def to_dict(self) -> dict:
        """JSON-ready, in the file's own terms (for results and records)."""
        out = []
        for c in self.classes:
            entry: dict[str, Any] = {
                "name": c.name,
                "rate" if self.by_rate else "share": c.weight,
                "batch_size": c.request.batch_size,
                "objective": str(c.objective),
                "may_shed": c.may_shed,
            }
            if c.model is not None:
                entry["model"] = c.model
            if c.request.priority:
                entry["priority"] = c.request.priority
            if c.request.timeout_us:
                entry["timeout_us"] = c.request.timeout_us
            if c.slo_p99_s is not None:
                entry["slo_p99_ms"] = c.slo_p99_s * 1e3
            if c.completion_p99_s is not None:
                entry["completion_p99_ms"] = c.completion_p99_s * 1e3
            if c.request.input_data is not None:
                entry["input_data"] = str(c.request.input_data)
            entry.update(c.shape_keys())
            out.append(entry)
        return {"classes": out}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str) -> Traffic:
        """The traffic :meth:`to_dict` wrote (a study's, a results file's)."""
        classes = []
        for entry in data.get("classes") or []:
            file_entry = {k: v for k, v in entry.items() if k in CLASS_KEYS and k not in ("slo_p99",)}
            for key in ("slo_p99", "completion_p99"):
                if entry.get(f"{key}_ms") is not None:
                    file_entry[key] = f"{float(entry[f'{key}_ms']) * 1e3:.12g}us"
            if entry.get("timeout_us"):
                file_entry["timeout"] = f"{int(entry['timeout_us'])}us"
            classes.append(file_entry)
        return parse_traffic({"classes": classes}, where=where)

    def to_file(
        self, input_data: Mapping[str, str] | None = None, traces: Mapping[str, str] | None = None
    ) -> dict:
        """The workload as a workload file says it (:func:`parse_traffic` reads it back to the
        same traffic): what an export writes beside the tuned model. ``input_data`` and ``traces``
        map a class to the file name its requests' data and its trace are written under (else the
        paths they were read from)."""
        out = []
        for c in self.classes:
            entry: dict[str, Any] = {
                "name": c.name,
                ("rate" if self.by_rate else "share"): c.weight,
                "batch_size": c.request.batch_size,
            }
            if c.model is not None:
                entry["model"] = c.model
            if c.request.priority:
                entry["priority"] = c.request.priority
            if c.request.timeout_us:
                entry["timeout"] = f"{c.request.timeout_us}us"
            if c.slo_p99_s is not None:
                entry["slo_p99"] = f"{c.slo_p99_s * 1e6:.12g}us"
            if c.completion_p99_s is not None:
                entry["completion_p99"] = f"{c.completion_p99_s * 1e6:.12g}us"
            if c.may_shed:
                entry["may_shed"] = True
            if c.request.input_data is not None:
                entry["input_data"] = (input_data or {}).get(c.name, str(c.request.input_data))
            entry.update(c.shape_keys())
            if c.name in (traces or {}):
                entry["trace"] = (traces or {})[c.name]
            out.append(entry)
        return {"classes": out}


def read_traffic(path: Path, *, dynamic_dim: int = 16, seed: int = 0) -> Traffic:
    """Read a workload file; every mistake is one line naming the file, the class and the field."""
    path = Path(path)
    data = read_yaml(path, "workload file")
    traffic = parse_traffic(
        data, where=str(path), base_dir=path.parent, dynamic_dim=dynamic_dim, seed=seed
    )
    return dataclasses.replace(traffic, source=path)


def parse_traffic(
    data: Any,
    *,
    where: str,
    base_dir: Path | None = None,
    dynamic_dim: int = 16,
    seed: int = 0,
) -> Traffic:
    """A workload from its parsed YAML (``where`` names it in errors; relative ``input_data``
    paths are read from ``base_dir``)."""
    if not isinstance(data, Mapping) or "classes" not in data:
        raise InputError(f"{where}: expected a mapping with `classes:`, a list of traffic classes")
    unknown = sorted(set(data) - {"classes"})
    if unknown:
        raise InputError(f"{where}: unknown key {unknown[0]!r} (expected `classes:`)")
    entries = data["classes"]
    if not isinstance(entries, list) or not entries:
        raise InputError(f"{where}: classes: expected a non-empty list of traffic classes")
    parsed = [
        _parse_class(entry, f"{where}: classes[{i}]", base_dir, dynamic_dim, seed + i)
        for i, entry in enumerate(entries)
    ]
    classes = [traffic_class for traffic_class, _ in parsed]
    names = [c.name for c in classes]
    for name in names:
        if names.count(name) > 1:
            raise InputError(f"{where}: classes: the name {name!r} is used twice")
    _check_models(classes, where)
    by_rate = {class_by_rate for _, class_by_rate in parsed}
    if len(by_rate) > 1:
        raise InputError(
            f"{where}: classes: give every class a `share` or every class a `rate` (a trace's own, "
            "without either), not a mix"
        )
    return Traffic(tuple(classes), by_rate=by_rate.pop())


def _check_models(classes: list[TrafficClass], where: str) -> None:
    """``model:`` on every class or on none: a class without one would have no model to call."""
    named = [c for c in classes if c.model is not None]
    if named and len(named) < len(classes):
        i, missing = next((i, c) for i, c in enumerate(classes) if c.model is None)
        raise InputError(
            f"{where}: classes[{i}] ({missing.name}): model: missing; when a class names its "
            f"model, every class must ({named[0].name} calls {named[0].model!r})"
        )


def check_models(traffic: Traffic, present: Iterable[str], repository: Path) -> None:
    """Every model a class names is one of ``present`` (the models of ``repository``); else
    one line naming the workload file, the class and the models there."""
    models = sorted(present)
    where = str(traffic.source) if traffic.source else "workload"
    for i, c in enumerate(traffic.classes):
        if c.model is not None and c.model not in models:
            raise InputError(
                f"{where}: classes[{i}] ({c.name}): model: {c.model!r} is not a model of "
                f"{repository} (models there: {', '.join(models) or 'none'})"
            )


def _parse_class(
    entry: Any, where: str, base_dir: Path | None, dynamic_dim: int, seed: int
) -> tuple[TrafficClass, bool]:
    """The class, and whether it gave a rate (True) or a share."""
    if not isinstance(entry, Mapping):
        raise InputError(f"{where}: expected a mapping (name, share or rate, slo_p99, ...)")
    name = entry.get("name")
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise InputError(f"{where}: name: expected letters, digits, - or _ (got {name!r})")
    where = f"{where} ({name})"
    unknown = sorted(set(entry) - set(CLASS_KEYS))
    if unknown:
        raise InputError(f"{where}: unknown field {unknown[0]!r} (expected {', '.join(CLASS_KEYS)})")
    arrival, cv, trace = _arrival(entry, where, name, base_dir)
    if "share" in entry and "rate" in entry:
        raise InputError(f"{where}: give exactly one of `share` (a fraction) or `rate` (req/s)")
    if "share" in entry:
        weight = _positive(entry["share"], f"{where}: share")
    elif "rate" in entry:
        weight = _rate(entry["rate"], f"{where}: rate")
    elif trace is not None:
        weight = trace.natural_rate
    else:
        raise InputError(f"{where}: give exactly one of `share` (a fraction) or `rate` (req/s)")
    slo = _duration(entry, "slo_p99", where)
    completion = _duration(entry, "completion_p99", where)
    if slo is not None and completion is not None:
        raise InputError(
            f"{where}: slo_p99 makes the class interactive and completion_p99 bounds a best-effort "
            "class: give one of them"
        )
    timeout = _duration(entry, "timeout", where)
    may_shed = entry.get("may_shed", False)
    if not isinstance(may_shed, bool):
        raise InputError(f"{where}: may_shed: expected true or false (got {may_shed!r})")
    input_data = entry.get("input_data")
    if input_data is not None:
        input_data = Path(str(input_data))
        if base_dir is not None and not input_data.is_absolute():
            input_data = base_dir / input_data
        if not input_data.is_file():
            raise InputError(f"{where}: input_data: {input_data} is not a file")
        input_data = input_data.resolve()  # studies and exports outlive the working directory
    request = RequestShape(
        batch_size=_whole(entry.get("batch_size", 1), f"{where}: batch_size", low=1),
        input_data=input_data,
        dynamic_dim=dynamic_dim,
        seed=seed,
        priority=_whole(entry.get("priority", 0), f"{where}: priority", low=0),
        timeout_us=round(timeout * 1e6) if timeout else 0,
    )
    min_served = _served_floor(entry.get("min_served"), f"{where}: min_served")
    model = entry.get("model")
    if model is not None and (not isinstance(model, str) or Path(model).name != model or not model):
        raise InputError(f"{where}: model: expected a model's name in the repository (got {model!r})")
    traffic_class = TrafficClass(
        name, weight, request, slo, completion, may_shed, min_served, arrival, cv, trace, model
    )
    return traffic_class, "share" not in entry


def _arrival(
    entry: Mapping, where: str, name: str, base_dir: Path | None
) -> tuple[Arrival, float | None, ArrivalTrace | None]:
    """``arrival`` (poisson, constant, gamma, trace), for gamma its ``arrival_cv``, for a trace
    the arrivals read from its ``trace`` file (relative to ``base_dir``)."""
    text = entry.get("arrival", str(Arrival.POISSON))
    choices = ", ".join(str(a) for a in Arrival)
    try:
        arrival = Arrival(str(text))
    except ValueError:
        raise InputError(f"{where}: arrival: expected one of {choices} (got {text!r})") from None
    cv, trace_file = entry.get("arrival_cv"), entry.get("trace")
    if arrival != Arrival.GAMMA and cv is not None:
        raise InputError(f"{where}: arrival_cv: only with `arrival: gamma`")
    if arrival != Arrival.TRACE and trace_file is not None:
        raise InputError(f"{where}: trace: only with `arrival: trace`")
    if arrival == Arrival.GAMMA:
        if cv is None:
            raise InputError(
                f"{where}: arrival: gamma needs arrival_cv (e.g. 2: bursty; 1 is Poisson's)"
            )
        return arrival, _positive(cv, f"{where}: arrival_cv"), None
    if arrival == Arrival.TRACE:
        if trace_file is None:
            raise InputError(
                f"{where}: arrival: trace needs `trace:`, a file of timestamps (and class names)"
            )
        path = Path(str(trace_file))
        if base_dir is not None and not path.is_absolute():
            path = base_dir / path
        return arrival, None, read_arrival_trace(path, name, where=f"{where}: trace")
    return arrival, None, None


def _served_floor(value: Any, where: str) -> ServedFloor | None:
    """``50%`` (of the class's arrivals) or ``200/s`` / ``12000/min`` (inferences)."""
    if value is None:
        return None
    text = str(value).strip().replace(" ", "")
    if text.endswith("%"):
        try:
            share = float(text[:-1]) / 100
        except ValueError:
            share = -1.0
        if not 0 < share <= 1:
            raise InputError(f"{where}: expected a share of the arrivals in (0%, 100%] (got {value!r})")
        return ServedFloor(share=share)
    if not any(text.endswith(suffix) for suffix in ("/s", "/min")):
        raise InputError(
            f"{where}: expected a share of the class's arrivals (50%) or inferences per second "
            f"(200/s) (got {value!r})"
        )
    return ServedFloor(infer_per_s=_rate(text, where))


def _duration(entry: Mapping, key: str, where: str) -> float | None:
    if entry.get(key) is None:
        return None
    seconds = parse_duration(entry[key], what=f"{where}: {key}")
    if seconds <= 0:
        raise InputError(f"{where}: {key}: expected a positive duration, e.g. 20ms")
    return seconds


def _positive(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InputError(f"{where}: expected a positive number (got {value!r})")
    if math.isinf(value):
        raise InputError(f"{where}: expected a finite number")
    return float(value)


def _rate(value: Any, where: str) -> float:
    """``40``, ``40/s`` or ``2400/min`` -> req/s."""
    if isinstance(value, str):
        text = value.strip().replace(" ", "")
        try:
            return _positive(float(text), where)
        except ValueError:
            pass
        for suffix, per in (("/s", 1.0), ("/min", 60.0)):
            if text.endswith(suffix):
                try:
                    return _positive(float(text[: -len(suffix)]), where) / per
                except ValueError:
                    break
        raise InputError(f"{where}: expected a request rate, e.g. 40/s or 2400/min (got {value!r})")
    return _positive(value, where)


def _whole(value: Any, where: str, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"{where}: expected a whole number >= {low} (got {value!r})")
    return value
