"""The endpoint layout of a traffic mix: one model per class, split from one config.

A workload point (the space's knobs, the scheduler's, ``layout``, and each endpoint's own knobs,
``endpoint.<class>.<knob>``) stands for a config served either as one shared model or as one
endpoint per class (:func:`point_variant`). This module is that encoding, both ways: what a point
loads, and how a config is split (:func:`endpoint_variants`: instances and compute threads shared
by demand, each endpoint with its class's queue policy). The search's objective
(:mod:`tritontune.search.traffic_objective`) suggests points; the final rounds
(:mod:`tritontune.search.traffic_finals`) and the benchmarks load them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import optuna

from tritontune.config.model_config import ModelConfig
from tritontune.config.pipeline import PipelineVariant
from tritontune.config.variant import Variant
from tritontune.measure.traffic import Layout, Traffic
from tritontune.search.instance_budget import instances_of, split_by_demand
from tritontune.search.pipeline_space import PipelineSpace
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.serving.bench import Bench

#: A workload point's own keys, besides the space's knobs.
_SCHEDULER_KEYS = ("priorities", "admission", "layout")
#: An endpoint's own knobs in a point: ``endpoint.<class>.max_batch_size`` and
#: ``endpoint.<class>.instances``.
ENDPOINT_KEY_PREFIX = "endpoint."


@dataclass(frozen=True)
class EndpointKnobs:
    """One endpoint's own knobs, searched for it alone in the endpoint layout (None: what the
    split of the point's config gives it). An interactive endpoint may want small executions
    (a batch-8 execution is never preempted) while the batch endpoint wants big ones: one
    config split in two cannot say both."""

    max_batch_size: int | None = None
    instances: int | None = None

    @staticmethod
    def key(class_name: str, knob: str) -> str:
        return f"{ENDPOINT_KEY_PREFIX}{class_name}.{knob}"


def endpoint_knobs(point: Mapping[str, Any]) -> dict[str, EndpointKnobs]:
    """Each class's own endpoint knobs in ``point`` (classes without any are left out)."""
    found: dict[str, dict[str, int]] = {}
    for key, value in point.items():
        if key.startswith(ENDPOINT_KEY_PREFIX):
            name, _, knob = key[len(ENDPOINT_KEY_PREFIX) :].rpartition(".")
            found.setdefault(name, {})[knob] = int(value)
    return {name: EndpointKnobs(**knobs) for name, knobs in found.items()}


def describe_endpoint_knobs(point: Mapping[str, Any]) -> str:
    """``interactive: max_batch_size=4 1 instance; batch: ...`` (empty without any)."""
    parts = []
    for name, own in endpoint_knobs(point).items():
        said = []
        if own.max_batch_size is not None:
            said.append(f"max_batch_size={own.max_batch_size}")
        if own.instances is not None:
            said.append(f"{own.instances} instance" + ("s" if own.instances != 1 else ""))
        parts.append(f"{name}: {' '.join(said)}")
    return "; ".join(parts)


@dataclass(frozen=True)
class EndpointChoices:
    """What each endpoint's own knobs are searched over (from the space before
    :func:`workload_space` narrowed it: an endpoint serves one class, so only that class's
    requests must fit its batch size). An empty tuple: not searched per endpoint."""

    batch_sizes: tuple[int, ...] = ()
    instances: tuple[int, ...] = ()

    @classmethod
    def of(cls, space: SearchSpace) -> EndpointChoices:
        dims = space.dimensions
        sizes = dims.get("max_batch_size")
        batch_sizes = tuple(int(v) for v in sizes.values) if isinstance(sizes, Choice) else ()
        count = dims.get("instance_count")
        if isinstance(count, Choice):
            instances = tuple(int(v) for v in count.values)
        elif isinstance(count, IntRange):
            instances = tuple(range(count.low, count.high + 1))
        else:
            instances = ()
        return cls(batch_sizes if len(batch_sizes) > 1 else (), instances if len(instances) > 1 else ())

    def suggest(self, trial: optuna.Trial, traffic: Traffic) -> dict[str, int]:
        point: dict[str, int] = {}
        for c in traffic.classes:
            fitting = [b for b in self.batch_sizes if b >= c.request.batch_size]
            if len(fitting) > 1:
                key = EndpointKnobs.key(c.name, "max_batch_size")
                point[key] = trial.suggest_categorical(key, fitting)
            if self.instances:
                key = EndpointKnobs.key(c.name, "instances")
                point[key] = trial.suggest_categorical(key, list(self.instances))
        return point


@dataclass(frozen=True)
class EndpointSplit(Variant):
    """A point in the endpoint layout: the config it was split from (its own fields, which the
    trial keeps as its config) and the split, one variant per class (what is loaded)."""

    split: tuple[tuple[str, Variant], ...] = ()


def _split_point(point: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """A workload point's knobs of the space, and its admission bound (None: unbounded)."""
    knobs = {
        k: v
        for k, v in point.items()
        if k not in _SCHEDULER_KEYS and not k.startswith(ENDPOINT_KEY_PREFIX)
    }
    admission = point.get("admission", "none")
    return knobs, None if admission == "none" else int(admission)


def point_layout(point: Mapping[str, Any]) -> Layout:
    """The serving layout a point was measured in (shared when it does not say)."""
    return Layout(point.get("layout", str(Layout.SHARED)))


def point_variant(space: SearchSpace, traffic: Traffic, point: Mapping[str, Any]) -> Variant:
    """The config a workload point stands for: the space's knobs, then the scheduler's; for the
    endpoint layout, those knobs split into one endpoint per class (an :class:`EndpointSplit`;
    the instance count and intra-op threads split are the point's, else one instance and
    onnxruntime's default threads), each endpoint with its own knobs where the point has them.
    For several models (:func:`group_variant`), a variant per model."""
    if isinstance(space, PipelineSpace) and traffic.routed:
        return group_variant(space, traffic, point)
    knobs, admission = _split_point(point)
    if point_layout(point) == Layout.ENDPOINTS:
        base = space.to_variant(knobs)
        threads = base.backend_parameters.get("intra_op_thread_count", "")
        split = endpoint_variants(
            traffic,
            base,
            base.instance_count or 1,
            admission,
            int(threads) if threads.isdigit() and int(threads) > 0 else None,
            endpoint_knobs(point),
        )
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Variant)}
        return EndpointSplit(**fields, split=tuple(split.items()))
    if point.get("dynamic_batching", True) is False:
        return space.to_variant(knobs)  # no scheduler queue: no priorities, timeouts or bound
    return traffic.scheduled(
        space.to_variant(knobs),
        priorities=bool(point.get("priorities", False)),
        admission=admission,
    )


def group_variant(space: PipelineSpace, traffic: Traffic, point: Mapping[str, Any]) -> PipelineVariant:
    """The configs of a point of several models, each class calling its own: each model's knobs
    (``MODEL/KNOB``) with the scheduler of the classes it serves (``MODEL/priorities``,
    ``MODEL/admission``: :func:`point_variant` on that model's part and classes), the models'
    instances together clamped to the machine's budget (:mod:`.instance_budget`)."""
    knobs = space.knobs_by_model(point)
    return space.within_budget(
        PipelineVariant(
            models=tuple(
                (m, point_variant(space.part(m), traffic.served_by(m), knobs[m])) for m in space.models
            )
        )
    )


def endpoint_variants(
    traffic: Traffic,
    variant: Variant,
    instances: int,
    admission: int | None,
    threads: int | None = None,
    own: Mapping[str, EndpointKnobs] | None = None,
) -> dict[str, Variant]:
    """The other layout of a config: one endpoint per class, each with ``variant``'s knobs and no
    priority levels (it serves one class), the class's queue timeout as its queue's, the
    admission bound on the endpoints of classes that may be shed, and the class's share of the
    ``instances`` by inference demand (rate x batch size), at least one each.

    ``threads`` (onnxruntime's ``intra_op_thread_count`` of the shared config; None or 0: its
    default, left alone) is split too: the shared config ran ``instances x threads`` compute
    threads, and the endpoints share that many by demand, at least one per instance, instead of
    each taking ``threads`` per instance. On 2 cores, MiniLM's interactive endpoint (1 thread)
    beside a batch endpoint of 2 threads had a p99 of 163 ms; beside one of 1 thread, 83-98 ms
    (docs/concepts/workloads.md). A config without the dynamic batcher has no scheduler queue:
    its endpoints only split the instances and threads.

    ``own``: an endpoint's own knobs (:class:`EndpointKnobs`), searched for it alone, in place
    of what the split gives it: its ``max_batch_size`` (a preferred batch size of the shared
    config's largest follows it), its instance count (its share of the compute threads is then
    spread over that many)."""
    own = own or {}
    fractions = traffic.fractions()
    demand = {c.name: fractions[c.name] * c.request.batch_size for c in traffic.classes}
    total = sum(demand.values())
    counts = {c: max(1, round(instances * d / total)) for c, d in demand.items()}
    budget = split_by_demand(instances * threads, demand) if threads else None
    out = {}
    for c in traffic.classes:
        timeout = c.request.timeout_us or None
        knobs = own.get(c.name, EndpointKnobs())
        share = knobs.instances or counts[c.name]
        parameters = dict(variant.backend_parameters)
        if budget is not None:
            parameters["intra_op_thread_count"] = str(max(1, budget[c.name] // share))
        sized = variant
        if knobs.max_batch_size is not None:
            preferred = variant.preferred_batch_sizes
            if preferred and variant.max_batch_size in preferred:
                preferred = (knobs.max_batch_size,)
            sized = dataclasses.replace(
                variant, max_batch_size=knobs.max_batch_size, preferred_batch_sizes=preferred
            )
        if variant.wants_dynamic_batching() is False:
            out[c.name] = dataclasses.replace(sized, instance_count=share, backend_parameters=parameters)
            continue
        out[c.name] = dataclasses.replace(
            sized,
            instance_count=share,
            backend_parameters=parameters,
            priority_levels=0,
            default_priority_level=None,
            priority_queue_policies=(),
            max_queue_size=admission if c.may_shed else None,
            queue_timeout_us=timeout,
            timeout_action="reject" if timeout else None,
            allow_timeout_override=None,
        )
    return out


def shared_split(
    bench: Bench, space: SearchSpace, traffic: Traffic, params: Mapping[str, Any]
) -> dict[str, Variant]:
    """A shared trial's config served as one endpoint per class (:func:`endpoint_variants`,
    split by its built instances and threads): the other layout of the best shared trial."""
    knobs, admission = _split_point(params)
    variant = space.to_variant(knobs)
    built = bench.build(variant)
    return endpoint_variants(traffic, variant, instances_of(built), admission, _threads(built))


def _threads(config: ModelConfig) -> int | None:
    """onnxruntime's intra-op threads per instance in ``config`` (None: its default)."""
    value = (
        config.parameters["intra_op_thread_count"].string_value
        if "intra_op_thread_count" in config.parameters
        else ""
    )
    return int(value) if value.strip().isdigit() and int(value) > 0 else None
