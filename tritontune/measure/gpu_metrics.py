"""GPU figures of a load level, read from Triton's Prometheus metrics endpoint.

Triton publishes per-GPU gauges (label ``gpu_uuid``): ``nv_gpu_utilization`` (0.0-1.0),
``nv_gpu_memory_used_bytes``, ``nv_gpu_memory_total_bytes`` and ``nv_gpu_power_usage`` (watts),
refreshed every ``--metrics-interval-ms`` (2 s by default). A gauge is an instant, so a level's
figures come from several samples: the endpoint is scraped at every window edge of the
measurement (one HTTP GET, in a worker thread, never on the load generator's hot path), and the
samples within the reported windows are summarized per GPU as *mean* utilization, *max* memory
used (what has to fit) and *mean* power. A server with no GPUs publishes none of these gauges:
that is said (:data:`NO_GPUS`), never shown as zeros.
"""

from __future__ import annotations

import statistics
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

UTILIZATION = "nv_gpu_utilization"
MEMORY_USED = "nv_gpu_memory_used_bytes"
MEMORY_TOTAL = "nv_gpu_memory_total_bytes"
POWER = "nv_gpu_power_usage"
_GAUGES = (UTILIZATION, MEMORY_USED, MEMORY_TOTAL, POWER)

#: What results, the report and the tuning record say where the server has no GPUs.
NO_GPUS = "no GPU metrics: the server reports no GPUs"


@dataclass(frozen=True)
class GpuReading:
    """One GPU's gauges in one scrape (None: the server did not publish that gauge)."""

    uuid: str
    utilization: float | None
    memory_used_bytes: float | None
    memory_total_bytes: float | None
    power_w: float | None


def parse_gpu_metrics(text: str) -> tuple[GpuReading, ...]:
    """The per-GPU gauges of a Prometheus metrics text, by GPU (empty: the server has no GPUs)."""
    values: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name not in _GAUGES:
            continue
        for sample in family.samples:
            uuid = sample.labels.get("gpu_uuid")
            if uuid:
                values.setdefault(uuid, {})[family.name] = float(sample.value)
    return tuple(
        GpuReading(
            uuid=uuid,
            utilization=gauges.get(UTILIZATION),
            memory_used_bytes=gauges.get(MEMORY_USED),
            memory_total_bytes=gauges.get(MEMORY_TOTAL),
            power_w=gauges.get(POWER),
        )
        for uuid, gauges in sorted(values.items())
    )


def scrape_gpu_metrics(metrics_url: str, timeout_s: float = 2.0) -> tuple[GpuReading, ...] | None:
    """One scrape of ``metrics_url``; None when it could not be read (that sample is skipped)."""
    try:
        with urllib.request.urlopen(metrics_url, timeout=timeout_s) as reply:
            text = reply.read().decode("utf-8", errors="replace")
        return parse_gpu_metrics(text)
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class GpuFigures:
    """One GPU over one load level's reported windows."""

    uuid: str
    samples: int
    utilization_mean: float | None
    """0.0-1.0, the mean over the samples."""
    memory_used_max_bytes: float | None
    memory_total_bytes: float | None
    power_mean_w: float | None

    def to_dict(self) -> dict:
        return {
            "gpu_uuid": self.uuid,
            "samples": self.samples,
            "utilization_mean": _round(self.utilization_mean, 4),
            "memory_used_max_bytes": _round(self.memory_used_max_bytes, 0),
            "memory_total_bytes": _round(self.memory_total_bytes, 0),
            "power_mean_w": _round(self.power_mean_w, 2),
        }

    @classmethod
    def from_dict(cls, data: dict) -> GpuFigures:
        return cls(
            uuid=str(data["gpu_uuid"]),
            samples=int(data.get("samples", 0)),
            utilization_mean=data.get("utilization_mean"),
            memory_used_max_bytes=data.get("memory_used_max_bytes"),
            memory_total_bytes=data.get("memory_total_bytes"),
            power_mean_w=data.get("power_mean_w"),
        )


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def summarize(scrapes: Iterable[tuple[GpuReading, ...]]) -> tuple[GpuFigures, ...]:
    """Per-GPU figures of a level from its scrapes: mean utilization, max memory, mean power."""
    by_gpu: dict[str, list[GpuReading]] = {}
    for scrape in scrapes:
        for reading in scrape:
            by_gpu.setdefault(reading.uuid, []).append(reading)
    figures = []
    for uuid, readings in sorted(by_gpu.items()):
        util = [r.utilization for r in readings if r.utilization is not None]
        used = [r.memory_used_bytes for r in readings if r.memory_used_bytes is not None]
        total = [r.memory_total_bytes for r in readings if r.memory_total_bytes is not None]
        power = [r.power_w for r in readings if r.power_w is not None]
        figures.append(
            GpuFigures(
                uuid=uuid,
                samples=len(readings),
                utilization_mean=statistics.fmean(util) if util else None,
                memory_used_max_bytes=max(used) if used else None,
                memory_total_bytes=max(total) if total else None,
                power_mean_w=statistics.fmean(power) if power else None,
            )
        )
    return tuple(figures)


def combine(levels: Iterable[tuple[GpuFigures, ...] | None]) -> tuple[GpuFigures, ...] | None:
    """One figure per GPU over several measurements of the same load (the playoff's rounds):
    utilization and power averaged by samples, memory the max. None when none has GPU figures."""
    by_gpu: dict[str, list[GpuFigures]] = {}
    for level in levels:
        for figure in level or ():
            by_gpu.setdefault(figure.uuid, []).append(figure)
    if not by_gpu:
        return None

    def weighted(values: list[tuple[float | None, int]]) -> float | None:
        known = [(v, max(n, 1)) for v, n in values if v is not None]
        total = sum(n for _, n in known)
        return sum(v * n for v, n in known) / total if known else None

    def highest(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return max(known) if known else None

    return tuple(
        GpuFigures(
            uuid=uuid,
            samples=sum(f.samples for f in figures),
            utilization_mean=weighted([(f.utilization_mean, f.samples) for f in figures]),
            memory_used_max_bytes=highest([f.memory_used_max_bytes for f in figures]),
            memory_total_bytes=highest([f.memory_total_bytes for f in figures]),
            power_mean_w=weighted([(f.power_mean_w, f.samples) for f in figures]),
        )
        for uuid, figures in sorted(by_gpu.items())
    )


def gpu_to_list(gpus: tuple[GpuFigures, ...] | None) -> list[dict] | None:
    """The JSON form of a level's GPU figures (None: no GPU metrics for it)."""
    return None if gpus is None else [g.to_dict() for g in gpus]


def gpu_from_list(data: list[dict] | None) -> tuple[GpuFigures, ...] | None:
    return None if not data else tuple(GpuFigures.from_dict(g) for g in data)


def gpu_summary(gpus: tuple[GpuFigures, ...] | None) -> str:
    """``GPU 0: 71% util, 5.2/80.0 GiB, 245 W; GPU 1: ...``, or :data:`NO_GPUS`."""
    if not gpus:
        return NO_GPUS
    parts = []
    for index, g in enumerate(gpus):
        bits = []
        if g.utilization_mean is not None:
            bits.append(f"{g.utilization_mean:.0%} util")
        if g.memory_used_max_bytes is not None:
            total = f"/{g.memory_total_bytes / 2**30:.1f}" if g.memory_total_bytes else ""
            bits.append(f"{g.memory_used_max_bytes / 2**30:.1f}{total} GiB")
        if g.power_mean_w is not None:
            bits.append(f"{g.power_mean_w:.0f} W")
        parts.append(f"GPU {index} ({g.uuid[:12]}): " + ", ".join(bits))
    return "; ".join(parts)
