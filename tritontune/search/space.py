"""The tuning space: which knobs a search varies, over which values, and how a point becomes a
:class:`~tritontune.config.variant.Variant`.

Defaults come from the model and the server (:func:`default_space`); a YAML file can fix, narrow or
widen any dimension (:func:`apply_space`; its format: ``docs/reference/space.md``). Every point the
space can produce is a valid config for the model (batching knobs only when batching is on,
preferred sizes derived from ``max_batch_size``), so nothing invalid is sent to Triton;
:meth:`TuningSession.build_config` still validates each one.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna

from tritontune.config.model_config import ModelConfig, backend_of
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import TENSORRT_PRECISIONS, GraphOptimization, Variant
from tritontune.errors import InputError
from tritontune.precision.accuracy import OutputKind, parse_output_kinds
from tritontune.precision.convert import DEFAULT_PRECISIONS, PRECISIONS
from tritontune.units import format_duration, parse_duration, to_microseconds
from tritontune.yamlfile import read_yaml

#: Parameters of the onnxruntime backend that tritontune tunes (the Python-backend template
#: honours them too, so a value means the same on both).
ONNX_THREAD_PARAMETERS = ("intra_op_thread_count", "inter_op_thread_count")
PREFERRED_STRATEGIES = ("none", "max")
#: Upper bound of the default max_batch_size choices when the model's batch dim is dynamic.
DEFAULT_MAX_BATCH_CAP = 128


@dataclass(frozen=True)
class Choice:
    """Pick one of ``values``.

    Three or more numbers (batch sizes, delays) are an *ordered* choice: Optuna samples a float
    over their range, log-scaled when they are all positive, and it is snapped to the nearest
    value. TPE then learns that neighbours behave alike ("bigger batches did better"), which a
    categorical choice hides from it: on the example, categorical TPE picked batch 16 or 32 after
    10 trials where 64 is clearly best. The point recorded is always one of ``values``.
    """

    values: tuple[Any, ...]

    @property
    def ordered(self) -> bool:
        numbers = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in self.values)
        return numbers and len(self.values) >= 3

    def suggest(self, trial: optuna.Trial, name: str) -> Any:
        if len(self.values) == 1:
            return self.values[0]
        if not self.ordered:
            return trial.suggest_categorical(name, list(self.values))
        low, high, log = self._float_range()
        return self.snap(trial.suggest_float(name, low, high, log=log))

    def _scale(self) -> tuple[list[float], bool]:
        ordered = sorted(float(v) for v in self.values)
        log = ordered[0] > 0
        return ([math.log(v) for v in ordered] if log else ordered), log

    def _float_range(self) -> tuple[float, float, bool]:
        """The values' span widened by half a gap at each end, so the end values get as much of
        the range as the ones between."""
        scaled, log = self._scale()
        low = scaled[0] - (scaled[1] - scaled[0]) / 2
        high = scaled[-1] + (scaled[-1] - scaled[-2]) / 2
        return (math.exp(low), math.exp(high), True) if log else (low, high, False)

    def snap(self, x: float) -> Any:
        """The value nearest to ``x`` (on the log scale where the values are positive)."""
        scaled, log = self._scale()
        position = math.log(x) if log and x > 0 else x
        ordered = sorted(self.values)
        return min(zip(scaled, ordered, strict=True), key=lambda sv: abs(sv[0] - position))[1]

    def describe(self, unit: str = "") -> str:
        shown = [format_duration(v / 1e6) if unit == "us" else str(v) for v in self.values]
        return shown[0] if len(shown) == 1 else "{" + ", ".join(shown) + "}"


@dataclass(frozen=True)
class IntRange:
    """An integer in ``[low, high]``, on a log scale when ``log``."""

    low: int
    high: int
    log: bool = False

    def suggest(self, trial: optuna.Trial, name: str) -> int:
        if self.low == self.high:
            return self.low
        return trial.suggest_int(name, self.low, self.high, log=self.log)

    def describe(self, unit: str = "") -> str:
        if unit == "us":
            low, high = format_duration(self.low / 1e6), format_duration(self.high / 1e6)
        else:
            low, high = str(self.low), str(self.high)
        return f"{low}..{high}" + (" (log)" if self.log else "")


Dimension = Choice | IntRange


def is_fixed(dimension: Dimension) -> bool:
    """Whether ``dimension`` has one value (a space file fixed it, or the model allows one)."""
    if isinstance(dimension, IntRange):
        return dimension.low == dimension.high
    return len(dimension.values) == 1


#: onnxruntime graph optimization levels searched by default ("disabled" is never faster).
DEFAULT_GRAPH_OPTIMIZATIONS = (
    GraphOptimization.ALL.value,
    GraphOptimization.EXTENDED.value,
    GraphOptimization.BASIC.value,
)

#: The dimensions a space may have, in the order they are suggested, with their units.
DIMENSIONS: dict[str, str] = {
    "max_batch_size": "",
    "dynamic_batching": "",
    "max_queue_delay": "us",
    "preferred_batch_size": "",
    "instance_count": "",
    "instance_kind": "",
    "intra_op_thread_count": "",
    "inter_op_thread_count": "",
    "response_cache": "",
    "precision": "",
    "tensorrt_precision": "",
    "graph_optimization": "",
}


#: What :func:`effective_point` puts for a ``max_batch_size`` that changes nothing.
ANY_BATCH_SIZE = "any"


#: onnxruntime's graph optimization level: a knob whose effect is a ratio of a config's speed (it
#: changes the graph each execution runs, not how the cores are shared).
GRAPH_LEVEL = "graph_optimization"


#: Between a model's name and its knob in a pipeline's or group's point (a Triton model name never
#: holds one: it is a directory's name).
SEPARATOR = "/"


def bare_knob(name: str) -> str:
    """A point's knob name without a pipeline's or group's ``MODEL/`` prefix."""
    return name.rpartition(SEPARATOR)[2]


def effective_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """``point`` with the knobs that change nothing in the config it stands for made equal, so
    that two points of one config are measured once (the loop's and the prediction's "known
    config" checks compare these).

    That knob is ``max_batch_size`` above 0 while the dynamic batcher is off: Triton's default
    scheduler then runs each request as it came, so every size that admits the requests serves
    the same (the space holds no size smaller than the requests' batch). On MiniLM every search
    spent one or two of its 12 trials on such a twin of its best config (trial 9: the
    best's ``max_batch_size`` 1 as 128), and their single measurements differed by up to 25 %.
    A size of 0 (no batch dimension) stays apart. A pipeline's or group's knobs (``MODEL/...``)
    are taken model by model. The batching knobs themselves are absent when batching is off
    (:meth:`SearchSpace.suggest`)."""
    out = dict(point)
    for name, value in point.items():
        if bare_knob(name) != "dynamic_batching" or value is not False:
            continue
        size = name.removesuffix("dynamic_batching") + "max_batch_size"
        if isinstance(out.get(size), int) and out[size] > 0:
            out[size] = ANY_BATCH_SIZE
    return out


#: On a CPU host, the default space leaves out configs whose instances x intra-op threads ask
#: more than this many threads per core: they time-slice the cores, and onnxruntime's spinning
#: threads make that slower than either knob alone (a space file's ``max_threads`` puts them back).
DEFAULT_THREADS_PER_CORE = 2


@dataclass(frozen=True)
class SearchSpace:
    """Named dimensions; a dimension that is absent keeps the base config's value."""

    dimensions: dict[str, Dimension] = field(default_factory=dict)
    max_threads: int | None = None
    """At most this many intra-op threads in all (instances x ``intra_op_thread_count``); a
    point asking more gets fewer threads per instance. None: no limit."""

    def suggest(self, trial: optuna.Trial, prefix: str = "") -> dict[str, Any]:
        """Ask ``trial`` for a point; batching knobs are only asked for when batching is on.
        ``prefix`` goes before each name the trial is asked for (a pipeline's ``MODEL/``); the
        point's own names are the dimensions'."""
        point: dict[str, Any] = {}
        dims = self.dimensions
        for name in DIMENSIONS:
            if name not in dims:
                continue
            if name in ("max_queue_delay", "preferred_batch_size") and not point.get(
                "dynamic_batching", True
            ):
                continue
            if name == "dynamic_batching" and point.get("max_batch_size", 1) == 0:
                point[name] = False
                continue
            point[name] = dims[name].suggest(trial, prefix + name)
        return self.within_threads(point)

    def within_threads(self, point: dict[str, Any]) -> dict[str, Any]:
        """``point`` with its intra-op threads lowered until instances x threads fit
        :attr:`max_threads` (clamped, not pruned: the trial measures the nearest config that
        fits, and its point records it)."""
        instances = point.get("instance_count")
        threads = point.get("intra_op_thread_count")
        if self.max_threads is None or not instances or not threads:
            return point
        if instances * threads <= self.max_threads:
            return point
        return {**point, "intra_op_thread_count": max(1, self.max_threads // instances)}

    def fits_threads(self, point: Mapping[str, Any]) -> bool:
        """Whether ``point``'s instances x intra-op threads are within :attr:`max_threads`."""
        return self.within_threads(dict(point)) == dict(point)

    def to_variant(self, point: dict[str, Any]) -> Variant:
        """The :class:`Variant` a point stands for."""
        batching = point.get("dynamic_batching")
        preferred = None
        if batching is not False and "preferred_batch_size" in point:
            mbs = point.get("max_batch_size")
            strategy = point["preferred_batch_size"]
            preferred = (mbs,) if strategy == "max" and mbs else ()
        delay = point.get("max_queue_delay") if batching is not False else None
        parameters = {k: str(point[k]) for k in ONNX_THREAD_PARAMETERS if k in point}
        return Variant(
            max_batch_size=point.get("max_batch_size"),
            dynamic_batching=batching,
            max_queue_delay_us=delay,
            preferred_batch_sizes=preferred,
            instance_count=point.get("instance_count"),
            instance_kind=point.get("instance_kind"),
            response_cache=point.get("response_cache"),
            backend_parameters=parameters,
            precision=point.get("precision"),
            tensorrt_precision=point.get("tensorrt_precision"),
            graph_optimization=point.get("graph_optimization"),
        )

    def replace(self, name: str, dimension: Dimension | None) -> SearchSpace:
        """This space with ``name`` set to ``dimension`` (removed when ``None``)."""
        dims = {k: v for k, v in self.dimensions.items() if k != name}
        if dimension is not None:
            dims[name] = dimension
        return SearchSpace(dims, self.max_threads)

    def size(self) -> int | None:
        """How many distinct points there are (``None`` if a dimension is too large to count)."""
        total = 1
        for dim in self.dimensions.values():
            total *= len(dim.values) if isinstance(dim, Choice) else dim.high - dim.low + 1
        return total

    def describe(self) -> dict[str, str]:
        return {name: dim.describe(DIMENSIONS[name]) for name, dim in self.dimensions.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SearchSpace:
        """The space :meth:`to_dict` wrote (a study keeps its space so)."""
        dims: dict[str, Dimension] = {}
        for name, value in data.items():
            if name == MAX_THREADS:
                continue
            if isinstance(value, Mapping):
                dims[name] = IntRange(int(value["min"]), int(value["max"]), bool(value.get("log")))
            else:
                dims[name] = Choice(tuple(value))
        limit = data.get(MAX_THREADS)
        return cls(dims, int(limit) if limit is not None else None)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, dim in self.dimensions.items():
            if isinstance(dim, Choice):
                out[name] = list(dim.values)
            else:
                out[name] = {"min": dim.low, "max": dim.high, "log": dim.log}
        if self.max_threads is not None:
            out[MAX_THREADS] = self.max_threads
        return out


def _powers_of_two(limit: int) -> tuple[int, ...]:
    values, size = [], 1
    while size <= limit:
        values.append(size)
        size *= 2
    return tuple(values)


def default_space(
    base: ModelConfig,
    target: TargetCapabilities,
    *,
    slo_p99_s: float,
    batch_dim_dynamic: bool,
    cpu_count: int | None = None,
    precision_variants: bool = False,
) -> SearchSpace:
    """The space a serving engineer would start from for this model on this server.

    Batching is not assumed to help: ``dynamic_batching`` is searched on and off. The response
    cache is left out: with synthesized inputs repeating, it would report cache hits as speed.
    ``precision_variants`` (an ONNX model on a server tritontune launched) adds the precision
    dimension (FP32, FP16, INT8 dynamic and static; each gated on accuracy before the search);
    on a GPU with the native onnxruntime backend, TensorRT's precision mode is searched too.
    onnxruntime models also search the backend's graph optimization level (all, extended, basic).
    """
    cpus = cpu_count or os.cpu_count() or 1
    dims: dict[str, Dimension] = {}
    if base.max_batch_size > 0:
        cap = (
            max(base.max_batch_size, DEFAULT_MAX_BATCH_CAP) if batch_dim_dynamic else base.max_batch_size
        )
        dims["max_batch_size"] = Choice(_powers_of_two(cap))
        dims["dynamic_batching"] = Choice((False, True))
        longest = max(100, min(50_000, to_microseconds(slo_p99_s / 2)))
        dims["max_queue_delay"] = IntRange(20, longest, log=True)
        dims["preferred_batch_size"] = Choice(PREFERRED_STRATEGIES)
    if target.gpu_count > 0:
        dims["instance_kind"] = Choice(("gpu",))
        dims["instance_count"] = IntRange(1, 4)
    else:
        dims["instance_kind"] = Choice(("cpu",))
        dims["instance_count"] = IntRange(1, max(2, cpus))
    max_threads = None
    if backend_of(base) == "onnxruntime":
        dims["intra_op_thread_count"] = IntRange(1, max(1, cpus))
        dims["inter_op_thread_count"] = IntRange(1, max(1, cpus))
        dims["graph_optimization"] = Choice(DEFAULT_GRAPH_OPTIMIZATIONS)
        if precision_variants:
            dims["precision"] = Choice(DEFAULT_PRECISIONS)
        if target.gpu_count > 0 and "onnxruntime" in target.backends:
            dims["tensorrt_precision"] = Choice(TENSORRT_PRECISIONS)
        else:
            # Set only where it leaves a config out (not on 2 cores: 2 x 2 threads is 2 per core).
            limit = DEFAULT_THREADS_PER_CORE * cpus
            if max(2, cpus) * max(1, cpus) > limit:
                max_threads = limit
    return SearchSpace(dims, max_threads)


@dataclass(frozen=True)
class SpaceSource:
    """Where a space's changes come from: a space file (``--space``), or the ``space:`` mapping
    of a config file (``-f``). Errors name ``where`` (the file, or the file and its key)."""

    where: str
    path: Path | None = None
    inline: Mapping[str, Any] | None = None

    @classmethod
    def file(cls, path: Path) -> SpaceSource:
        return cls(str(path), path=path)

    def read(self) -> Any:
        """The YAML data: the file's (read now), or the config file's mapping."""
        return read_yaml(self.path, "space file") if self.path is not None else self.inline


def apply_space(source: SpaceSource, defaults: SearchSpace) -> SearchSpace:
    """``defaults`` with the dimensions ``source`` names replaced (fixed, narrowed or widened)."""
    data = source.read()
    return defaults if data is None else apply_space_mapping(source.where, data, defaults)


def apply_space_mapping(where: str, data: Any, defaults: SearchSpace) -> SearchSpace:
    """``defaults`` with the dimensions ``data`` (a space file's mapping: one model's) names
    replaced; its settings (:data:`SETTING_KEYS`) are left to their readers. Errors name
    ``where`` (the file, and for a pipeline's model the model: ``space.yaml: minilm``)."""
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a mapping of dimension names to values")
    unknown = sorted(set(data) - set(DIMENSIONS) - set(SETTING_KEYS) - {MAX_THREADS})
    if unknown:
        raise InputError(
            f"{where}: unknown dimension(s) {', '.join(map(str, unknown))}; known: "
            f"{', '.join([*DIMENSIONS, *SETTING_KEYS, MAX_THREADS])}"
        )
    dims = dict(defaults.dimensions)
    max_threads = defaults.max_threads
    for name, value in data.items():
        if name == MAX_THREADS:
            max_threads = _parse_max_threads(where, value)
        elif name not in SETTING_KEYS:
            dims[name] = _parse_dimension(where, name, value)
    return SearchSpace(dims, max_threads)


#: The space file's key for :attr:`SearchSpace.max_threads` (``none``: no limit).
MAX_THREADS = "max_threads"
#: Keys of a space file that are settings of how the space is judged, not dimensions.
SETTING_KEYS = ("accuracy_kind",)


def _parse_max_threads(where: str, value: Any) -> int | None:
    if value is None or str(value).lower() == "none":
        return None
    return _int_at_least(1)(f"{where}: {MAX_THREADS}", value)


def space_file_output_kinds(source: SpaceSource) -> dict[str, OutputKind]:
    """The space's ``accuracy_kind``: one kind for every output, or a mapping by output
    (``{logits: classifier, pooled: embedding}``); empty when the space has none."""
    data = source.read()
    if not isinstance(data, dict) or data.get("accuracy_kind") is None:
        return {}
    value = data["accuracy_kind"]
    if not isinstance(value, (str, dict)):
        raise InputError(
            f"{source.where}: accuracy_kind: expected a kind (embedding, classifier, regression) "
            "or a mapping of output names to kinds"
        )
    return parse_output_kinds(value, what=f"{source.where}: accuracy_kind")


def parse_knob(where: str, name: str, value: Any) -> Any:
    """One value of knob ``name`` (as a space file gives it: ``2ms``, ``32``, ``true``)."""
    if name not in _VALUE_PARSERS:
        raise InputError(f"{where}: unknown knob {name!r}; known: {', '.join(_VALUE_PARSERS)}")
    return _VALUE_PARSERS[name](where, value)


def _parse_dimension(source: str, name: str, value: Any) -> Dimension:
    where = f"{source}: {name}"
    parse = _VALUE_PARSERS[name]
    if isinstance(value, dict):
        if name not in _RANGE_DIMENSIONS:
            raise InputError(f"{where}: takes a list of values, not a range")
        extra = sorted(set(value) - {"min", "max", "log"})
        if extra or "min" not in value or "max" not in value:
            raise InputError(f"{where}: a range is {{min: ..., max: ...}} (optional log: true)")
        low, high = parse(where, value["min"]), parse(where, value["max"])
        assert isinstance(low, int) and isinstance(high, int)  # only integer knobs take ranges
        if low > high:
            raise InputError(f"{where}: empty range (min {value['min']} > max {value['max']})")
        log = bool(value.get("log", name == "max_queue_delay"))
        if log and low <= 0:
            raise InputError(f"{where}: a log range must start above 0")
        return IntRange(low, high, log)
    values = value if isinstance(value, list) else [value]
    if not values:
        raise InputError(f"{where}: empty list; give at least one value")
    parsed = tuple(dict.fromkeys(parse(where, v) for v in values))
    return Choice(parsed)


def _int_at_least(minimum: int) -> Callable[[str, Any], int]:
    def parse(where: str, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InputError(f"{where}: {value!r} is not a whole number >= {minimum}")
        return value

    return parse


def _bool(where: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{where}: {value!r} is not true or false")
    return value


def _delay(where: str, value: Any) -> int:
    return to_microseconds(parse_duration(value, what=where))


def _one_of(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(where: str, value: Any) -> str:
        if str(value).lower() not in options:
            raise InputError(f"{where}: {value!r} is not one of {', '.join(options)}")
        return str(value).lower()

    return parse


def _upper_one_of(options: tuple[str, ...]) -> Callable[[str, Any], str]:
    def parse(where: str, value: Any) -> str:
        if str(value).upper() not in options:
            raise InputError(f"{where}: {value!r} is not one of {', '.join(options)}")
        return str(value).upper()

    return parse


_VALUE_PARSERS = {
    "max_batch_size": _int_at_least(0),
    "dynamic_batching": _bool,
    "max_queue_delay": _delay,
    "preferred_batch_size": _one_of(PREFERRED_STRATEGIES),
    "instance_count": _int_at_least(1),
    "instance_kind": _one_of(("cpu", "gpu")),
    "intra_op_thread_count": _int_at_least(0),
    "inter_op_thread_count": _int_at_least(0),
    "response_cache": _bool,
    "precision": _one_of(PRECISIONS),
    "tensorrt_precision": _upper_one_of(TENSORRT_PRECISIONS),
    "graph_optimization": _one_of(tuple(g.value for g in GraphOptimization)),
}
_RANGE_DIMENSIONS = {
    "max_queue_delay",
    "instance_count",
    "intra_op_thread_count",
    "inter_op_thread_count",
}
