"""A search space on a grid: the points the prediction ranks (tritontune.search.grid)."""

from __future__ import annotations

from tritontune.search.grid import all_points, dimension_values
from tritontune.search.space import Choice, IntRange, SearchSpace

SPACE = SearchSpace(
    {
        "max_batch_size": Choice((1, 4, 16, 64)),
        "dynamic_batching": Choice((False, True)),
        "max_queue_delay": Choice((100, 3000)),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1, 2)),
    }
)


def test_the_space_is_enumerated_as_the_sampler_proposes_it():
    points = list(all_points(SPACE))
    # batching off: 4 sizes x 2 instances; on: 3 sizes x 2 delays x 2 instances (with batches
    # of one, batching on is batching off: predicted once)
    assert len(points) == 8 + 12
    assert all(not p["dynamic_batching"] for p in points if p["max_batch_size"] == 1)
    assert all("max_queue_delay" not in p for p in points if not p["dynamic_batching"])
    assert dimension_values("max_queue_delay", IntRange(20, 25_000, log=True))[::7] == (20, 25_000)
