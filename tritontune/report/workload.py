"""What a mixed workload's measurements mean for planning: per-class curves, cliffs, a capacity
plan per class, and what the interactive SLO costs the batch class.

All from one config's :class:`~tritontune.search.traffic_capacity.TrafficCapacity` (every total
rate measured, each class's figures at each):

* **curves**: each class's p99 (and served rate) against the total rate offered;
* **cliff**: the lowest total rate at which a latency class's p99 passed its bound;
* **plan per class** (Little's law per class, L = lambda x W): at the capacity, each class's rate,
  its mean latency, and the requests it keeps in flight; at ``headroom`` of the capacity, the rate
  to plan for;
* **SLO cost**: for each interactive p99 seen among the levels where every other class met its
  objective, the most batch inferences/s measured with the interactive p99 within it: read along
  it, each millisecond of interactive SLO buys (or costs) that many batch inferences/s.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape
from pathlib import Path

import plotly.graph_objects as go
from jinja2.utils import htmlsafe_json_dumps
from plotly.offline import get_plotlyjs

from tritontune.measure.traffic import ClassObjective
from tritontune.report.capacity import DEFAULT_HEADROOM
from tritontune.search.traffic_capacity import TrafficCapacity


@dataclass(frozen=True)
class ClassPlan:
    name: str
    rate: float
    """Req/s of this class at the capacity."""
    mean_latency_s: float
    in_flight: float
    """Requests of this class in flight at the capacity (Little's law)."""
    planned_rate: float
    """Req/s to plan for: ``headroom`` of the capacity's."""

    def line(self) -> str:
        return (
            f"{self.name}: {self.rate:,.1f} req/s at capacity, mean "
            f"{self.mean_latency_s * 1e3:.2f} ms, about {self.in_flight:.1f} in flight "
            f"(Little's law); plan for {self.planned_rate:,.1f} req/s"
        )


def class_plans(capacity: TrafficCapacity, headroom: float = DEFAULT_HEADROOM) -> list[ClassPlan]:
    """Each class's plan at the capacity (empty when no rate met every objective)."""
    best = capacity.best
    if best is None:
        return []
    plans = []
    for figures in best.classes:
        mean = figures.latency.mean if figures.latency.count else 0.0
        plans.append(
            ClassPlan(
                figures.name,
                figures.request_rate,
                mean,
                figures.request_rate * mean,
                figures.request_rate * headroom,
            )
        )
    return plans


@dataclass(frozen=True)
class SloCost:
    """Batch inferences/s measured with the interactive class's p99 within ``p99_s``."""

    p99_s: float
    batch_throughput: float


def slo_cost(capacity: TrafficCapacity, interactive: str) -> list[SloCost]:
    """The trade-off between the interactive class's p99 and the others' throughput, from the
    levels where every class but ``interactive`` met its objective; ascending p99, each step
    a better batch throughput (a staircase: what each SLO buys)."""
    traffic = capacity.traffic
    rows = []
    for level in capacity.levels:
        others = [v for v in level.verdicts(traffic) if v.name != interactive]
        figures = level.figures(interactive)
        if not all(v.met for v in others) or figures.latency.count == 0:
            continue
        batch = sum(f.throughput for f in level.classes if f.name != interactive)
        rows.append(SloCost(figures.latency.p99, batch))
    stairs: list[SloCost] = []
    for row in sorted(rows, key=lambda r: r.p99_s):
        if not stairs or row.batch_throughput > stairs[-1].batch_throughput:
            stairs.append(row)
    return stairs


def slo_cost_per_ms(stairs: list[SloCost], slo_s: float) -> float | None:
    """Batch inferences/s per millisecond of interactive SLO around ``slo_s``: the slope between
    the best step within the SLO and the step before it (None with fewer than two steps)."""
    within = [s for s in stairs if s.p99_s <= slo_s]
    if len(within) < 2:
        return None
    low, high = within[-2], within[-1]
    span_ms = (high.p99_s - low.p99_s) * 1e3
    return (high.batch_throughput - low.batch_throughput) / span_ms if span_ms > 0 else None


def model_lines(capacity: TrafficCapacity) -> list[str]:
    """For a workload whose classes name their models: each model's work at the capacity, by
    the classes it serves, and Triton's own statistics of that model over the same span."""
    best = capacity.best
    if best is None or not capacity.traffic.routed:
        return []
    served = capacity.served_by_class()
    lines = []
    for model in capacity.traffic.models:
        classes = [c.name for c in capacity.traffic.classes if c.model == model]
        line = f"{model} (serving {', '.join(classes)}): {sum(served[c] for c in classes):,.0f} infer/s"
        split = best.server.get(model)
        if split is not None:
            line += (
                f"; Triton: {split.requests / best.span_s:,.0f} req/s, avg batch "
                f"{split.avg_batch_size:.1f}, queue {split.avg_queue_s * 1e3:.2f} ms, compute "
                f"{split.avg_compute_s * 1e3:.2f} ms per request"
            )
        lines.append(line)
    return lines


def summary_lines(capacity: TrafficCapacity, headroom: float = DEFAULT_HEADROOM) -> list[str]:
    """The plan in a few sentences (printed by ``profile --workload``, shown in the report)."""
    lines = []
    if capacity.best is not None:
        by_class = ", ".join(f"{name} {v:,.0f}" for name, v in capacity.served_by_class().items())
        lines.append(
            f"served at capacity: {capacity.served:,.0f} infer/s in all ({by_class}) at "
            f"{capacity.total_rate:,.0f} req/s offered"
        )
        lines += model_lines(capacity)
    if capacity.client_bound_at is not None:  # as a single-class operating point says it
        lines.append(
            f"at least: client-bound from {capacity.client_bound_at:,.0f} req/s (the load "
            "generator, not the config, limited that level, so the walk stopped there; add load "
            "processes: --load-processes)"
        )
    for c in capacity.traffic.classes:
        if c.objective != ClassObjective.LATENCY:
            continue
        cliff = capacity.cliff(c.name)
        lines.append(
            f"{c.name}'s cliff starts at {cliff:,.0f} req/s in all"
            if cliff is not None
            else f"{c.name}'s p99 stayed within its SLO at every rate measured"
        )
        assert c.slo_p99_s is not None
        stairs = slo_cost(capacity, c.name)
        per_ms = slo_cost_per_ms(stairs, c.slo_p99_s)
        if per_ms is not None:
            lines.append(
                f"each ms of {c.name} SLO near {c.slo_p99_s * 1e3:g} ms is worth about "
                f"{per_ms:,.0f} batch infer/s (measured levels)"
            )
    lines += [p.line() for p in class_plans(capacity, headroom)]
    return lines


def curves_figure(capacity: TrafficCapacity) -> go.Figure:
    """Each class's p99 against the total rate offered, its bound drawn, the capacity marked."""
    figure = go.Figure()
    rates = [level.total_rate for level in capacity.levels]
    for c in capacity.traffic.classes:
        p99 = [level.figures(c.name).latency.p99 * 1e3 for level in capacity.levels]
        figure.add_trace(go.Scatter(x=rates, y=p99, mode="lines+markers", name=f"{c.name} p99"))
        if c.latency_bound_s is not None:
            figure.add_hline(
                y=c.latency_bound_s * 1e3,
                line_dash="dot",
                annotation_text=f"{c.name} bound",
            )
    if capacity.best is not None:
        figure.add_vline(x=capacity.total_rate, line_dash="dash", annotation_text="capacity")
    figure.update_layout(
        title="p99 per class against the total rate",
        xaxis_title="total req/s offered",
        yaxis_title="p99 ms",
        yaxis_type="log",
        template="plotly_white",
    )
    return figure


def served_figure(capacity: TrafficCapacity) -> go.Figure:
    figure = go.Figure()
    rates = [level.total_rate for level in capacity.levels]
    for c in capacity.traffic.classes:
        served = [level.figures(c.name).throughput for level in capacity.levels]
        figure.add_trace(go.Scatter(x=rates, y=served, mode="lines+markers", name=c.name))
    figure.update_layout(
        title="inferences/s served per class",
        xaxis_title="total req/s offered",
        yaxis_title="infer/s",
        template="plotly_white",
    )
    return figure


def write_workload_report(
    capacity: TrafficCapacity, out: Path, *, title: str, headroom: float = DEFAULT_HEADROOM
) -> Path:
    """One self-contained HTML page (plotly.js inlined) with the curves and the plan, and the
    figures as JSON for machines."""
    lines = summary_lines(capacity, headroom)
    body = "".join(
        figure.to_html(full_html=False, include_plotlyjs=False)
        for figure in (curves_figure(capacity), served_figure(capacity))
    )
    items = "".join(f"<li>{escape(line)}</li>" for line in lines)
    data = htmlsafe_json_dumps(capacity.to_dict())  # no text can end the <script> it is in
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{escape(title)}</title><script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{escape(title)}</h1><p>{escape(capacity.traffic.describe())}</p><ul>{items}</ul>"
        f"{body}<script type='application/json' id='tritontune-workload'>{data}</script>"
        "</body></html>"
    )
    out = Path(out)
    out.write_text(page, encoding="utf-8")
    return out
