"""A search space on a grid: the points the prediction ranks
(:class:`~tritontune.predict.ranking.RankedSpace`).

An ordered range is predicted on a few of its values: a delay range on :data:`DELAY_GRID_POINTS`
log-spaced values, an integer range with more than :data:`MAX_INT_VALUES` values on that many.
The points follow the sampler's rules (batching knobs only when batching is on; threads that fit
the cores).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from typing import Any

from tritontune.predict.calibration import EXECUTION_KNOBS
from tritontune.search.space import DIMENSIONS, Choice, IntRange, SearchSpace

#: Values of a delay range predicted (log-spaced over the range).
DELAY_GRID_POINTS = 8
#: An integer range with more values than this is predicted on a log-spaced subset.
MAX_INT_VALUES = 12


def dimension_values(name: str, dim: Choice | IntRange) -> tuple[Any, ...]:
    """The values of a dimension the ranking predicts (a delay range on a grid)."""
    if isinstance(dim, Choice):
        return dim.values
    count = dim.high - dim.low + 1
    if name != "max_queue_delay" and count <= MAX_INT_VALUES:
        return tuple(range(dim.low, dim.high + 1))
    points = DELAY_GRID_POINTS if name == "max_queue_delay" else MAX_INT_VALUES
    low, high = math.log(max(dim.low, 1)), math.log(max(dim.high, 1))
    grid = {int(round(math.exp(low + (high - low) * i / (points - 1)))) for i in range(points)}
    return tuple(sorted(min(max(v, dim.low), dim.high) for v in grid))


def execution_values(space: SearchSpace) -> dict[str, tuple[Any, ...]]:
    """Each execution knob the space varies or fixes, with its values."""
    return {
        name: dimension_values(name, space.dimensions[name])
        for name in EXECUTION_KNOBS
        if name in space.dimensions
    }


def reference_setting(space: SearchSpace) -> dict[str, Any]:
    """The setting others are composed from: each knob's first value (the fewest instances and
    threads; the first precision and graph level the space lists)."""
    return {name: values[0] for name, values in execution_values(space).items()}


def scheduler_points(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every scheduler part of a point (batch size, batching, delay, preferred size), following
    :meth:`SearchSpace.suggest`'s rules (batching knobs only when batching is on). With batches
    of one (``max_batch_size`` 1) the batching knobs change nothing the model sees (a batch is
    full as soon as it has a request), so only one of those points is predicted: batching off
    where the space allows it (on MiniLM, three of a search's six proposals were the same batch
    of one with batching on and off and another delay)."""
    dims = space.dimensions
    sizes = (
        dimension_values("max_batch_size", dims["max_batch_size"])
        if "max_batch_size" in dims
        else (None,)
    )
    for size in sizes:
        base = {} if size is None else {"max_batch_size": size}
        batching_values: tuple[Any, ...] = (None,)
        if "dynamic_batching" in dims:
            batching_values = (
                (False,) if size == 0 else dimension_values("dynamic_batching", dims["dynamic_batching"])
            )
            if size == 1:
                batching_values = (False,) if False in batching_values else batching_values[:1]
        for batching in batching_values:
            point = dict(base)
            if batching is not None:
                point["dynamic_batching"] = batching
            if batching is False:
                yield point
                continue
            delays = (
                dimension_values("max_queue_delay", dims["max_queue_delay"])
                if "max_queue_delay" in dims
                else (None,)
            )
            preferred = (
                dimension_values("preferred_batch_size", dims["preferred_batch_size"])
                if "preferred_batch_size" in dims
                else (None,)
            )
            if size == 1:
                delays, preferred = delays[:1], preferred[:1]
            for delay, prefer in itertools.product(delays, preferred):
                full = dict(point)
                if delay is not None:
                    full["max_queue_delay"] = delay
                if prefer is not None:
                    full["preferred_batch_size"] = prefer
                yield full


def all_points(space: SearchSpace) -> Iterator[dict[str, Any]]:
    """Every point the ranking predicts: scheduler points x execution settings, knobs in the
    space's order."""
    knobs = execution_values(space)
    names = list(knobs)
    for scheduler in scheduler_points(space):
        for values in itertools.product(*(knobs[n] for n in names)):
            merged = {**scheduler, **dict(zip(names, values, strict=True))}
            for name, dim in space.dimensions.items():
                conditional = name in ("max_queue_delay", "preferred_batch_size")
                if conditional or name in merged:
                    continue
                # fixed (the sampler proposes it too), or a knob the model doesn't predict
                # (inter-op threads, the response cache): its first value
                merged[name] = dim.values[0] if isinstance(dim, Choice) else dim.low
            if space.fits_threads(merged):
                yield {name: merged[name] for name in DIMENSIONS if name in merged}
