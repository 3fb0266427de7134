"""A capacity plan from an operating point: how hard to drive a server, and how many to run.

The operating point is the most a server sustains under the SLO; running it there leaves nothing
for bursts, and queueing latency grows as 1 / (1 - utilization) near the cliff. So the plan
recommends a fraction of it (``headroom``, 70 % by default, the usual 60-80 % planning range),
gives the requests in flight at that rate by Little's law (L = lambda x W, with W the mean latency
measured at the operating point: an upper bound, latency only falls with load), and, for a peak
rate, the replicas that peak needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tritontune.study.figures import OperatingPoint

DEFAULT_HEADROOM = 0.70


@dataclass(frozen=True)
class CapacityPlan:
    max_throughput: float
    """Inferences/s at the operating point (the most one server sustains under the SLO)."""
    max_load: float
    load_mode: str
    headroom: float
    recommended_throughput: float
    mean_latency_s: float
    in_flight: float
    """Requests in flight at the recommended rate (Little's law)."""
    peak: float | None = None
    replicas: int | None = None

    def to_dict(self) -> dict:
        return {
            "max_throughput": round(self.max_throughput, 3),
            "max_load": self.max_load,
            "load_mode": self.load_mode,
            "headroom": self.headroom,
            "recommended_throughput": round(self.recommended_throughput, 3),
            "mean_latency_ms": round(self.mean_latency_s * 1e3, 4),
            "in_flight": round(self.in_flight, 2),
            "peak": self.peak,
            "replicas": self.replicas,
        }

    def lines(self) -> list[str]:
        """The plan in a few sentences (printed by ``search``, shown in the report)."""
        load = (
            f"concurrency {self.max_load:g}"
            if self.load_mode == "concurrency"
            else f"{self.max_load:,.0f} req/s"
        )
        text = [
            f"one server sustains {self.max_throughput:,.0f} infer/s under the SLO ({load})",
            f"plan for {self.recommended_throughput:,.0f} infer/s per server "
            f"({self.headroom:.0%} of it, headroom for bursts)",
            f"requests in flight at that rate: about {self.in_flight:.1f} "
            f"(Little's law, mean latency {self.mean_latency_s * 1e3:.2f} ms)",
        ]
        if self.peak is not None and self.replicas is not None:
            text.append(f"a peak of {self.peak:,.0f} infer/s needs {self.replicas} server(s)")
        return text


def plan_capacity(
    op: OperatingPoint, *, headroom: float = DEFAULT_HEADROOM, peak: float | None = None
) -> CapacityPlan | None:
    """The plan for ``op`` (None when it met the SLO nowhere)."""
    if not op.feasible or op.throughput <= 0:
        return None
    if not 0 < headroom <= 1:
        raise ValueError(f"headroom {headroom} is not in (0, 1]")
    recommended = op.throughput * headroom
    mean = op.mean_s if op.mean_s is not None else op.p50_s
    return CapacityPlan(
        max_throughput=op.throughput,
        max_load=op.load,
        load_mode=op.load_mode,
        headroom=headroom,
        recommended_throughput=recommended,
        mean_latency_s=mean,
        in_flight=recommended * mean,
        peak=peak,
        replicas=math.ceil(peak / recommended) if peak else None,
    )
