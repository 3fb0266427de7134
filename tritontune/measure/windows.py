"""The windows of one load level: one controller for every kind of traffic, a policy per kind.

While a level's load runs, the controller takes an *edge* at the end of every window (each
stream's replies, each model's Triton statistics, the client's lag samples), samples what else
the machine did (:mod:`interference`) and what the load generator cost (:mod:`client_cost`), and
asks the policy whether the level is measured: one class of traffic
(:class:`~tritontune.measure.measurement.StableWindows`, until the last windows agree and none
was disturbed) or a workload's classes (:class:`~tritontune.measure.mixed.ObjectiveSpan`).
perf_analyzer, whose windows are its own output lines, applies the same stable-windows rule.
"""

from __future__ import annotations

import asyncio
import bisect
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from tritontune.measure.client_cost import ClientProbe, ClientWindow
from tritontune.measure.gpu_metrics import GpuReading, scrape_gpu_metrics
from tritontune.measure.interference import InterferenceProbe, WindowLoad
from tritontune.measure.load_processes import load_generator
from tritontune.measure.loadgen import LoadGenerator, LoadMode, LoadTransport, Stream
from tritontune.server.client import ModelStatsSnapshot
from tritontune.server.endpoint import Endpoint


@dataclass
class Edge:
    """A window edge: when, each stream's replies by then (its log's index), each model's
    statistics read then, and where each stream's client lag samples stood."""

    at: float
    counts: dict[str, int]
    stats: dict[str, ModelStatsSnapshot | None]
    lags: dict[str, int] = field(default_factory=dict)


@dataclass
class Windows:
    """What the controller saw of a level: its edges, and per window (between two edges) the
    machine's load and the client's cost; ``span`` is the edge the reported span starts at."""

    edges: list[Edge] = field(default_factory=list)
    loads: list[WindowLoad] = field(default_factory=list)
    client: list[ClientWindow] = field(default_factory=list)
    gpu_scrapes: list[tuple[float, tuple[GpuReading, ...]]] = field(default_factory=list)
    span: int = 0
    processes: int = 1
    """The processes that generated the load."""


class WindowSettings(Protocol):
    """What the controller reads of :class:`~tritontune.measure.measurement.MeasureSettings`."""

    @property
    def warmup_s(self) -> float: ...
    @property
    def detect_interference(self) -> bool: ...
    @property
    def request_timeout_s(self) -> float: ...
    @property
    def max_in_flight(self) -> int: ...
    @property
    def max_requests(self) -> int: ...


class WindowPolicy(Protocol):
    """When a level's windows start, when each ends, and when the level is measured."""

    async def first_edge(self, streams: Sequence[Stream]) -> None:
        """Wait, after the warm-up, until the first edge may be taken."""

    async def window_end(self, windows: Windows, streams: Sequence[Stream]) -> None:
        """Wait until the current window (from ``windows.edges[-1]``) may end."""

    def measured(self, windows: Windows, streams: Sequence[Stream]) -> bool:
        """After each window: is the level measured?"""
        ...


def lag_samples(stream: Stream, generator: LoadGenerator) -> list[float]:
    """The client's lag samples of ``stream``: how late it sent (open loop), or the generator's
    turnarounds between a reply and the next request (closed loop)."""
    return generator.turnaround if stream.load.mode == LoadMode.CONCURRENCY else stream.log.send_lag


async def measure_windows(
    endpoint: Endpoint | str,
    streams: Sequence[Stream],
    settings: WindowSettings,
    policy: WindowPolicy,
    *,
    models: Sequence[str],
    seed: int | None,
    processes: int,
    metrics_url: str | None = None,
) -> Windows:
    """Send every stream at once from ``processes`` processes while :func:`watch_windows`
    takes the windows; the load stops when ``policy`` says the level is measured."""
    generator = load_generator(
        endpoint,
        streams[0].requests,
        request_timeout=settings.request_timeout_s,
        max_in_flight=settings.max_in_flight,
        seed=seed,
        processes=processes,
    )
    seen = Windows(processes=generator.processes)

    async def controller(running: list[Stream], transport: LoadTransport) -> None:
        await watch_windows(generator, running, transport, seen, settings, policy, models, metrics_url)

    await generator.run_streams(list(streams), controller, max_requests=settings.max_requests)
    return seen


async def watch_windows(
    generator: LoadGenerator,
    streams: Sequence[Stream],
    transport: LoadTransport,
    windows: Windows,
    settings: WindowSettings,
    policy: WindowPolicy,
    models: Sequence[str],
    metrics_url: str | None = None,
) -> None:
    """The controller of :meth:`LoadGenerator.run_streams`: windows into ``windows`` until
    ``policy`` says the level is measured (the load stops when this returns). ``models``: whose
    statistics each edge reads; ``metrics_url``: Triton's metrics, scraped for GPU gauges at
    every edge."""

    async def edge() -> Edge:
        at = time.perf_counter()
        await generator.settle(at)
        counts = {s.name: bisect.bisect_right(s.log.done_at, at) for s in streams}
        lags = {s.name: len(lag_samples(s, generator)) for s in streams}
        stats = {model: await transport.statistics(model) for model in models}
        return Edge(at, counts, stats, lags)

    async def scrape_gpus() -> None:
        # In a worker thread: a GET and a parse, off the event loop that sends the requests.
        if metrics_url is not None:
            at = time.perf_counter()
            readings = await asyncio.to_thread(scrape_gpu_metrics, metrics_url)
            if readings is not None:
                windows.gpu_scrapes.append((at, readings))

    await asyncio.sleep(settings.warmup_s)
    await policy.first_edge(streams)
    threads = generator.load_threads()  # this loop's thread, or each load worker's
    probe = await asyncio.to_thread(InterferenceProbe, threads) if settings.detect_interference else None
    client_probe = ClientProbe(threads)
    windows.edges.append(await edge())
    await scrape_gpus()
    while True:
        await policy.window_end(windows, streams)
        windows.edges.append(await edge())
        a, b = windows.edges[-2:]
        answered = sum(b.counts[s.name] - a.counts[s.name] for s in streams)
        lagged = [
            lag for s in streams for lag in lag_samples(s, generator)[a.lags[s.name] : b.lags[s.name]]
        ]
        windows.client.append(client_probe.sample(answered, lagged))
        await scrape_gpus()
        if probe is not None:
            windows.loads.append(await asyncio.to_thread(probe.sample))
        if policy.measured(windows, streams):
            return
