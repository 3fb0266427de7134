"""The report as one self-contained HTML file (plotly.js inlined: it opens with no network).

Figures are plotly's, Optuna's own visualization functions among them (search history, parameter
importances); the page is a Jinja2 template. The report's figures are also embedded as JSON
(``<script type="application/json" id="tritontune-report">``) for machines.
"""

from __future__ import annotations

import warnings
from importlib import resources
from pathlib import Path
from typing import Any

import jinja2
import optuna
import plotly.graph_objects as go
from jinja2.utils import htmlsafe_json_dumps
from plotly.offline import get_plotlyjs

from tritontune import __version__
from tritontune.config.variant import knobs_summary
from tritontune.precision.accuracy import AccuracyFigures
from tritontune.report.data import ReportData, collect, p95_at
from tritontune.study.figures import OperatingPoint
from tritontune.study.handle import TuningStudy
from tritontune.units import format_duration

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(resources.files("tritontune.report"))),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    undefined=jinja2.StrictUndefined,
)
#: Below this, Optuna's importances are all equal (it says so): not worth a chart.
MIN_TRIALS_FOR_IMPORTANCES = 4
_LAYOUT = {"template": "plotly_white", "height": 420, "margin": {"l": 60, "r": 20, "t": 50, "b": 50}}


def _figure_html(figure: go.Figure, element_id: str) -> str:
    figure.update_layout(**_LAYOUT)
    return figure.to_html(full_html=False, include_plotlyjs=False, div_id=element_id)


def frontier_figure(data: ReportData) -> go.Figure:
    """Throughput against p99 for every measured level; the Pareto frontier and the SLO drawn."""
    figure = go.Figure()
    for meets, name, color in ((True, "meets the SLO", "#2a9d8f"), (False, "misses it", "#bbbbbb")):
        chosen = [p for p in data.points if p.meets_slo == meets]
        figure.add_trace(
            go.Scatter(
                x=[p.p99_s * 1e3 for p in chosen],
                y=[p.throughput for p in chosen],
                mode="markers",
                name=name,
                marker={"color": color, "size": 7},
                text=["baseline" if p.trial is None else f"trial {p.trial}" for p in chosen],
                customdata=[p.load for p in chosen],
                hovertemplate="%{text}, load %{customdata}<br>p99 %{x:.2f} ms, "
                "%{y:,.0f} infer/s<extra></extra>",
            )
        )
    front = sorted((p for p in data.points if p.on_frontier), key=lambda p: p.p99_s)
    figure.add_trace(
        go.Scatter(
            x=[p.p99_s * 1e3 for p in front],
            y=[p.throughput for p in front],
            mode="lines+markers",
            name="Pareto frontier",
            line={"color": "#e76f51", "width": 2},
            marker={"size": 9, "symbol": "diamond"},
        )
    )
    figure.add_vline(
        x=data.slo_p99_s * 1e3,
        line={"dash": "dash", "color": "#d62828"},
        annotation_text=f"SLO p99 {format_duration(data.slo_p99_s)}",
    )
    figure.update_layout(
        title="Throughput against p99, every measured load level",
        xaxis_title="p99 latency (ms)",
        yaxis_title="throughput (infer/s)",
    )
    return figure


def latency_figure(data: ReportData) -> go.Figure:
    """Latency percentiles against load for the best config and the baseline: where the cliff is."""
    figure = go.Figure()
    curves: list[tuple[str, OperatingPoint | None, str]] = [
        ("best", data.best.operating_point if data.best else None, "#264653"),
        ("baseline", data.baseline, "#e9c46a"),
    ]
    for label, op, color in curves:
        if op is None:
            continue
        levels = sorted(op.levels, key=lambda lv: lv.load)
        for name, dash, pick in (
            ("p50", "dot", lambda lv: lv.p50_s),
            ("p95", "dash", lambda lv: lv.p95_s),
            ("p99", "solid", lambda lv: lv.p99_s),
        ):
            figure.add_trace(
                go.Scatter(
                    x=[lv.load for lv in levels],
                    y=[pick(lv) * 1e3 for lv in levels],
                    mode="lines+markers",
                    name=f"{label} {name}",
                    line={"color": color, "dash": dash},
                )
            )
    figure.add_hline(
        y=data.slo_p99_s * 1e3,
        line={"dash": "dash", "color": "#d62828"},
        annotation_text="SLO",
    )
    unit = "concurrency" if data.load_mode == "concurrency" else "arrival rate (req/s)"
    figure.update_layout(
        title="Latency against load: the best config and the baseline",
        xaxis={"title": unit, "type": "log"},
        yaxis_title="latency (ms)",
    )
    return figure


def gpu_figures(data: ReportData) -> tuple[go.Figure, go.Figure] | None:
    """GPU memory against p99, and utilization against load, one trace per GPU over every
    measured level; None when the server reported no GPUs (the report then says so)."""
    points = data.gpu_points
    if not points:
        return None
    memory, utilization = go.Figure(), go.Figure()
    uuids = sorted({g.uuid for p in points for g in p.gpu or ()})
    for index, uuid in enumerate(uuids):
        rows = [(p, g) for p in points for g in p.gpu or () if g.uuid == uuid]
        labels = ["baseline" if p.trial is None else f"trial {p.trial}" for p, _ in rows]
        name = f"GPU {index} ({uuid[:12]})"
        memory.add_trace(
            go.Scatter(
                x=[p.p99_s * 1e3 for p, _ in rows],
                y=[(g.memory_used_max_bytes or 0) / 2**30 for _, g in rows],
                mode="markers", name=name, text=labels,
                hovertemplate="%{text}<br>p99 %{x:.2f} ms, %{y:.2f} GiB<extra></extra>",
            )
        )  # fmt: skip
        utilization.add_trace(
            go.Scatter(
                x=[p.load for p, _ in rows],
                y=[(g.utilization_mean or 0) * 100 for _, g in rows],
                mode="markers", name=name, text=labels,
                hovertemplate="%{text}<br>load %{x}, %{y:.0f} % busy<extra></extra>",
            )
        )  # fmt: skip
    memory.update_layout(
        title="GPU memory used (max over the level) against p99",
        xaxis_title="p99 latency (ms)", yaxis_title="GiB",
    )  # fmt: skip
    utilization.update_layout(
        title="GPU utilization (mean over the level) against load",
        xaxis_title="load (concurrency or req/s)", yaxis_title="% busy", yaxis_range=[0, 105],
    )  # fmt: skip
    return memory, utilization


def prediction_figure(data: ReportData) -> go.Figure | None:
    """Predicted against measured throughput, one point per measured config, with the line where
    they are equal (``--strategy predict`` only)."""
    if not data.predictions:
        return None
    figure = go.Figure(layout=_LAYOUT)
    top = max(max(c.predicted, c.measured) for c in data.predictions) * 1.1
    figure.add_trace(
        go.Scatter(x=[0, top], y=[0, top], mode="lines", name="predicted = measured",
                   line={"dash": "dot", "color": "grey"})
    )  # fmt: skip
    figure.add_trace(
        go.Scatter(
            x=[c.measured for c in data.predictions],
            y=[c.predicted for c in data.predictions],
            error_y={"type": "data", "array": [c.predicted * c.band for c in data.predictions]},
            mode="markers+text",
            text=[str(c.trial) for c in data.predictions],
            textposition="top center",
            name="trial (band)",
        )
    )
    figure.update_layout(
        title="Predicted against measured throughput at the operating point",
        xaxis_title="measured (infer/s)", yaxis_title="predicted (infer/s)",
    )  # fmt: skip
    return figure


def _optuna_figures(study: optuna.Study) -> tuple[str | None, str | None, str | None]:
    """Optuna's history and importances, or why the importances can't be computed."""
    history = importances = note = None
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if complete:
        history = _figure_html(optuna.visualization.plot_optimization_history(study), "fig-history")
    if len(complete) < MIN_TRIALS_FOR_IMPORTANCES:
        note = (
            f"parameter importances need at least {MIN_TRIALS_FOR_IMPORTANCES} completed trials "
            f"(this study has {len(complete)})"
        )
        return history, None, note
    try:
        with warnings.catch_warnings():
            # A few trials leave some parameter values tried once; Optuna warns that their
            # importance "may be inaccurate" on stderr, in the middle of the CLI's output. The
            # chart is shown for what it is worth, and the note below it says how many trials.
            warnings.filterwarnings("ignore", message="Some regimes for parameter")
            figure = optuna.visualization.plot_param_importances(study)
        importances = _figure_html(figure, "fig-importances")
    except (ValueError, RuntimeError) as err:  # e.g. no parameter varied
        note = f"parameter importances could not be computed ({' '.join(str(err).split())})"
    return history, importances, note


def render_report(data: ReportData, study: optuna.Study) -> str:
    history, importances, importance_note = _optuna_figures(study)
    template = _ENV.get_template("report.html.j2")
    return template.render(
        data=data,
        version=__version__,
        plotly_js=get_plotlyjs(),
        frontier=_figure_html(frontier_figure(data), "fig-frontier"),
        latency=_figure_html(latency_figure(data), "fig-latency"),
        gpu=[_figure_html(f, f"fig-gpu-{i}") for i, f in enumerate(gpu_figures(data) or ())],
        prediction=_figure_html(figure, "fig-prediction")
        if (figure := prediction_figure(data)) is not None
        else None,
        history=history,
        importances=importances,
        importance_note=importance_note,
        # <, >, & and ' as \u003c-style escapes: no model's text can end the <script> it is in.
        report_json=htmlsafe_json_dumps(data.to_dict()),
        fmt_duration=format_duration,
        p95_at=p95_at,
        knobs=knobs_summary,
        accuracy=lambda figures: AccuracyFigures.from_dict(figures).summary(),
    )


def write_report(study: TuningStudy, path: Path, **options: Any) -> ReportData:
    """Collect ``study``'s figures (see :func:`collect`) and write the HTML report to ``path``."""
    data = collect(study.read(), **options)
    Path(path).write_text(render_report(data, study.optuna_study), encoding="utf-8")
    return data
