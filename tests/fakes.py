"""A fake bench on a modelled server: the measuring protocol the jobs use, no server.

The search loop's tests drive it (the thing under test is the loop, not the measurement), and
``bench/distributed.py`` uses it as a clearly labelled stand-in of fixed duration. Configs are
real (the example model's config built by tritontune's own variant code); measurements follow a
queueing model whose capacity grows with ``max_batch_size`` (see test_operating_point).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping

from tests.search.test_operating_point import measurement
from tritontune.config.model_config import ModelConfig
from tritontune.config.pipeline import PipelineVariant
from tritontune.config.repository import ModelSource
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import Variant, apply_variant
from tritontune.errors import ModelLoadError, ServerDiedError, ServerError
from tritontune.measure.loadgen import QUEUE_FULL_ERROR, LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings, ServerSplit
from tritontune.measure.mixed import ClassFigures, TrafficMeasurement
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.stats import LatencyStats
from tritontune.measure.traffic import Traffic
from tritontune.predict.batcher import ClosedLoop, OpenLoop, ServiceCurve, simulate
from tritontune.predict.config import batcher_config_of
from tritontune.server.client import BatchCompute
from tritontune.server.launcher import ServerInfo
from tritontune.serving.bench import LoadReceipt
from tritontune.serving.served import Capability, ModelGroup, Served, SingleModel


class FakeSession:
    """The measuring protocol (:class:`tritontune.serving.bench.Bench`) on a modelled server.

    ``kill`` maps a max_batch_size to how many times the server dies while measuring that config
    (as if killed from outside, or crashed by it), ``kill_traffic`` the same for a traffic mix;
    ``refuse`` is a max_batch_size Triton refuses; ``measure_delay_s`` makes each measured level
    take that long (a stand-in for real time).
    """

    def __init__(
        self,
        source: ModelSource,
        kill: dict[int, int] | None = None,
        refuse: int | None = None,
        measure_delay_s: float = 0.0,
        kill_traffic: dict[int, int] | None = None,
    ) -> None:
        self.source = source
        self.name = source.name
        self.serves: Served = SingleModel(source)
        self.request_shape = RequestShape()
        self.lacks: dict[Capability, str] = {}
        self.info = ServerInfo("127.0.0.1:1", None, None, "2.51.0", TargetCapabilities(), "local")
        self.owns_server = True
        self.via_python = False
        self.dead = False
        self.batch_dim_dynamic = True
        self.restarts = 0
        self.kill = dict(kill or {})
        self.kill_traffic = dict(kill_traffic or {})
        self.refuse = refuse
        self.loaded: ModelConfig | None = None
        self.measured: list[int] = []
        self.capacity_scale = 1.0
        self.capacity_scale_of: Callable[[ModelConfig], float] = lambda config: 1.0
        """A further scale by the config measured (a machine unkind to some configs)."""
        """What the modelled server's capacity is multiplied by (a busier machine)."""
        self.loads: list[int] = []
        self.interrupt_after: int | None = None
        self.baseline_measured = False
        self.variants: list[Variant] = []
        self.measure_delay_s = measure_delay_s
        self.settings = MeasureSettings()
        self.endpoints: dict[str, ModelConfig] = {}

    def batch_dim_dynamic_of(self, model: str) -> bool:
        return self.batch_dim_dynamic

    def build(self, variant: Variant) -> ModelConfig:
        return apply_variant(self.source.base_config, variant)

    def configs(self, variant: Variant) -> dict[str, ModelConfig]:
        return {self.source.name: self.build(variant)}

    def load(self, variant: Variant) -> LoadReceipt:
        if self.dead:
            raise ServerDiedError("not running")
        config = self.build(variant)
        self.variants.append(variant)
        self.baseline_measured |= variant == Variant()
        if self.refuse is not None and config.max_batch_size == self.refuse:
            raise ModelLoadError("failed to load 'mlp': refused")
        self.loaded = config
        self.endpoints = {}
        self.loads.append(config.max_batch_size)
        return LoadReceipt({self.name: config}, 0.01)

    def load_endpoints(self, variants: Mapping[str, Variant]) -> LoadReceipt:
        self.endpoints = {role: self.build(v) for role, v in variants.items()}
        self.loaded = None
        return LoadReceipt({f"{self.name}_{role}": c for role, c in self.endpoints.items()}, 0.01)

    def measure(self, load: LoadSpec, settings: MeasureSettings | None = None) -> Measurement:
        assert self.loaded is not None
        batch = self.loaded.max_batch_size or 1
        if self.kill.get(batch, 0) > 0:
            self.kill[batch] -= 1
            self.dead = True
            raise ServerError("inference failed: Socket closed")  # the death shows up later
        time.sleep(self.measure_delay_s)
        self.measured.append(batch)
        if self.interrupt_after is not None and len(self.measured) > self.interrupt_after:
            raise KeyboardInterrupt
        capacity = 1000.0 * batch
        throughput = min(load.value / 0.002, capacity)
        return measurement(load, throughput, p99=1.5 * load.value / throughput)

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement:
        """A mixed workload on the modelled server: it computes ``100 x max_batch_size`` samples
        per second. The first class is interactive (its p99 grows with utilization; priorities
        keep it low until saturation), the others best effort; their surplus past capacity is
        rejected with a bounded queue and piles up (answered late) without one. One endpoint per
        class: each has its own queue and half the machine."""
        if self.endpoints:
            return self._measure_endpoints(traffic, total_rate)
        assert self.loaded is not None
        if self.kill_traffic.get(self.loaded.max_batch_size, 0) > 0:
            self.kill_traffic[self.loaded.max_batch_size] -= 1
            self.dead = True
            raise ServerError("inference failed: Socket closed")  # the death shows up later
        self.measured.append(self.loaded.max_batch_size)
        batching = self.loaded.dynamic_batching
        priorities = batching.priority_levels > 0
        bounded = any(p.max_queue_size for p in batching.priority_queue_policy.values()) or (
            batching.default_queue_policy.max_queue_size > 0
        )
        capacity = (
            100.0
            * (self.loaded.max_batch_size or 1)
            * self.capacity_scale
            * self.capacity_scale_of(self.loaded)
        )
        rates = traffic.rates(total_rate)
        demand = sum(rates[c.name] * c.request.batch_size for c in traffic.classes)
        utilization = min(demand / capacity, 0.999)
        figures = []
        spare = capacity
        for i, c in enumerate(traffic.classes):
            offered = rates[c.name]
            if i == 0:
                p99 = 0.005 * (1 + utilization) if priorities else 0.005 / (1 - utilization)
                if demand > capacity and not priorities:
                    p99 = 1.0
                served = offered
            else:
                p99 = 0.05
                served = min(offered, max(spare, 0.0) / c.request.batch_size)
            spare -= served * c.request.batch_size
            surplus = offered - served
            errors = {QUEUE_FULL_ERROR: int(surplus * 3)} if surplus > 0 and bounded else {}
            answered = served + (surplus if bounded else 0.0)
            count = max(int(served * 3), 1)
            latency = LatencyStats(count, p99 / 2, p99 / 2, p99, p99, p99, p99, p99)
            figures.append(
                ClassFigures(
                    c.name, c.request.batch_size, offered, served, answered, latency, errors, (p99,)
                )
            )
        return TrafficMeasurement(total_rate, tuple(figures), 3.0, 3.0)

    def _measure_endpoints(self, traffic: Traffic, total_rate: float) -> TrafficMeasurement:
        rates = traffic.rates(total_rate)
        figures = []
        for c in traffic.classes:
            config = self.endpoints[c.name]
            # The machine is shared by instances: an endpoint gets its instances' part of it.
            share = _instances(config) / sum(_instances(e) for e in self.endpoints.values())
            capacity = 100.0 * (config.max_batch_size or 1) * share * self.capacity_scale
            offered = rates[c.name]
            served = min(offered, capacity / c.request.batch_size)
            utilization = min(offered * c.request.batch_size / capacity, 0.999)
            p99 = 0.005 / (1 - utilization) if c.slo_p99_s else 0.05
            surplus = offered - served
            bounded = config.dynamic_batching.default_queue_policy.max_queue_size > 0
            errors = {QUEUE_FULL_ERROR: int(surplus * 3)} if surplus > 0 and bounded else {}
            answered = served + (surplus if bounded else 0.0)
            latency = LatencyStats(max(int(served * 3), 1), p99 / 2, p99 / 2, p99, p99, p99, p99, p99)
            figures.append(
                ClassFigures(
                    c.name, c.request.batch_size, offered, served, answered, latency, errors, (p99,)
                )
            )
        return TrafficMeasurement(total_rate, tuple(figures), 3.0, 3.0)

    def prepare_precisions(self, precisions, *, accuracy=None, model=None, input_data=()):
        raise AssertionError("the fake session has no precision variants")

    def fault(self, err: ServerError) -> ServerDiedError | None:
        if isinstance(err, ServerDiedError):
            return err
        if self.dead:
            return ServerDiedError("tritonserver died (exit code -9)", "line 1\nline 2\nSegfault\n")
        return None

    def restart(self, *, reload: bool = False) -> None:
        self.restarts += 1
        self.dead = False
        self.loaded = None


def _instances(config: ModelConfig) -> int:
    return sum(group.count or 1 for group in config.instance_group) or 1


class SimulatedSession(FakeSession):
    """A bench whose server is Triton's batcher as the simulator models it, with a known service
    curve per instance count (``curves``), or per loaded config (a function of it): the truth a
    prediction-led search must recover. Each level reports Triton-style statistics (executions
    and compute time by batch size)."""

    def __init__(
        self,
        source: ModelSource,
        curves: Mapping[int, ServiceCurve] | Callable[[ModelConfig], ServiceCurve],
        requests: int = 1500,
    ):
        super().__init__(source)
        self.curves = curves if callable(curves) else dict(curves)
        self.requests = requests

    def curve_of(self, config: ModelConfig) -> ServiceCurve:
        if callable(self.curves):
            return self.curves(config)
        return self.curves[batcher_config_of(config).instances]

    def measure(self, load: LoadSpec, settings: MeasureSettings | None = None) -> Measurement:
        assert self.loaded is not None
        self.measured.append(self.loaded.max_batch_size)
        config = batcher_config_of(self.loaded)
        curve = self.curve_of(self.loaded)
        arrivals = (
            ClosedLoop(int(load.value)) if load.mode == LoadMode.CONCURRENCY else OpenLoop(load.value)
        )
        result = simulate(curve, config, arrivals, n_requests=self.requests, seed=len(self.measured))
        batches = tuple(
            BatchCompute(size, count, int(count * curve.mean(size) * 1e9))
            for size, count in sorted(result.batch_sizes.items())
        )
        executions = sum(result.batch_sizes.values())
        latency = LatencyStats(
            result.requests, result.mean_s, result.p50_s, result.p99_s, result.p99_s,
            result.p99_s, result.p99_s, result.p99_s,
        )  # fmt: skip
        compute = sum(b.compute_ns for b in batches) / 1e9 / max(result.requests, 1)
        server = ServerSplit(
            result.requests, executions, result.mean_batch, max(result.mean_s - compute, 0.0),
            compute, 0, batches,
        )  # fmt: skip
        return dataclasses.replace(
            measurement(load, result.throughput_ips, result.p99_s),
            latency=latency,
            request_rate=result.throughput_rps,
            server=server,
        )


class FakeGroupSession(FakeSession):
    """Several models on the modelled server, each class of a workload sent to the model it
    names (a :class:`tritontune.serving.served.ModelGroup` served).

    The machine has ``cores`` cores. A model computes ``100 x max_batch_size`` samples/s per
    instance while the instances of every model together fit the cores; past that they
    time-slice them, each getting ``cores / instances in all`` of its speed. A model's classes
    share its capacity in proportion to their demand; an interactive class's p99 grows with its
    model's utilization; a surplus is rejected by a bounded queue and piles up without one. Each
    level reports Triton's statistics per model (``server``), counted from the classes sent to it.
    """

    def __init__(self, sources: tuple[ModelSource, ...], *, cores: int = 2) -> None:
        first = sources[0]
        name = "+".join(s.name for s in sources)
        super().__init__(dataclasses.replace(first, name=name))
        self.sources = {s.name: s for s in sources}
        self.step_models = tuple(self.sources)
        self.serves = ModelGroup(sources)
        self.lacks = dict(ModelGroup.LACKS)
        self.cores = cores
        self.loaded_configs: dict[str, ModelConfig] = {}
        self.instances_loaded: list[int] = []
        """The instances of every model together, per load."""

    def build(self, variant: Variant) -> ModelConfig:
        raise AssertionError("a group's configs are per model")

    def configs(self, variant: Variant) -> dict[str, ModelConfig]:
        chosen = variant if isinstance(variant, PipelineVariant) else PipelineVariant()
        assert isinstance(variant, PipelineVariant) or variant == Variant()
        return {m: apply_variant(s.base_config, chosen.of(m)) for m, s in self.sources.items()}

    def load(self, variant: Variant) -> LoadReceipt:
        if self.dead:
            raise ServerDiedError("not running")
        self.loaded_configs = self.configs(variant)
        self.variants.append(variant)
        self.baseline_measured |= variant == Variant()
        self.instances_loaded.append(sum(_instances(c) for c in self.loaded_configs.values()))
        return LoadReceipt(dict(self.loaded_configs), 0.01)

    def load_endpoints(self, variants: Mapping[str, Variant]) -> LoadReceipt:
        raise AssertionError("a group has no endpoints to split")

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement:
        assert self.loaded_configs, "no config loaded"
        rates = traffic.rates(total_rate)
        instances = sum(_instances(c) for c in self.loaded_configs.values())
        slicing = min(1.0, self.cores / instances)
        span = 3.0
        figures, server = [], {}
        for model, config in self.loaded_configs.items():
            classes = [c for c in traffic.classes if c.model == model]
            if not classes:
                continue
            capacity = 100.0 * (config.max_batch_size or 1) * _instances(config) * slicing
            demand = sum(rates[c.name] * c.request.batch_size for c in classes)
            utilization = min(demand / capacity, 0.999)
            served_part = min(1.0, capacity / demand) if demand else 1.0
            bounded = config.dynamic_batching.default_queue_policy.max_queue_size > 0 or any(
                p.max_queue_size for p in config.dynamic_batching.priority_queue_policy.values()
            )
            requests = 0
            for c in classes:
                offered = rates[c.name]
                served = offered * served_part
                p99 = 0.005 / (1 - utilization) if c.slo_p99_s else 0.05
                surplus = offered - served
                errors = {QUEUE_FULL_ERROR: int(surplus * span)} if surplus > 0 and bounded else {}
                answered = served + (surplus if bounded else 0.0)
                count = max(int(served * span), 1)
                requests += count
                latency = LatencyStats(count, p99 / 2, p99 / 2, p99, p99, p99, p99, p99)
                figures.append(
                    ClassFigures(
                        c.name, c.request.batch_size, offered, served, answered, latency, errors, (p99,)
                    )
                )
            batch = config.max_batch_size or 1
            executions = max(requests // batch, 1)
            server[model] = ServerSplit(requests, executions, float(batch), 0.001, 0.002, 0)
        order = {c.name: i for i, c in enumerate(traffic.classes)}
        figures.sort(key=lambda f: order[f.name])
        return TrafficMeasurement(total_rate, tuple(figures), span, span, server=server)
