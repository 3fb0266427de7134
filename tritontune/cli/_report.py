"""``tritontune report``: a finished study as one self-contained HTML page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tritontune.cli._common import ConfigOption, StorageOption, app, console, err_console, user_errors
from tritontune.errors import InputError
from tritontune.report.capacity import DEFAULT_HEADROOM
from tritontune.report.html import write_report
from tritontune.study.handle import TuningStudy
from tritontune.study.storage import DEFAULT_STORAGE
from tritontune.units import parse_fraction, parse_rate

HeadroomOption = Annotated[
    str, typer.Option(help="Plan for this share of the max sustainable load, e.g. 70%.")
]
PeakOption = Annotated[
    str | None, typer.Option(help="Peak inferences/s to serve: the plan says how many servers.")
]


def parse_plan_options(headroom: str, peak_qps: str | None) -> dict:
    """``--headroom`` and ``--peak-qps`` as :func:`tritontune.report.collect` options."""
    share = parse_fraction(headroom, what="--headroom")
    if share == 0:
        raise InputError("--headroom: must be above 0 %, e.g. 70%")
    return {"headroom": share, "peak": parse_rate(peak_qps, what="--peak-qps") if peak_qps else None}


@app.command()
def report(
    ctx: typer.Context,
    study: Annotated[str, typer.Option(help="The study to report on.")],
    config: ConfigOption = None,
    out: Annotated[Path, typer.Option(help="The HTML file to write.")] = Path("report.html"),
    storage: StorageOption = DEFAULT_STORAGE,
    headroom: HeadroomOption = f"{DEFAULT_HEADROOM:.0%}",
    peak_qps: PeakOption = None,
) -> None:
    """Write an HTML report: top configs, frontier, latency curves, history, capacity plan."""
    with user_errors(ctx):
        options = parse_plan_options(headroom, peak_qps)
        data = write_report(TuningStudy.open_existing(storage, study), out, **options)
        for warning in data.warnings:
            err_console.print(f"[yellow]warning:[/] {warning}")
        if data.capacity:
            console.print("capacity plan: " + "; ".join(data.capacity.lines()))
        console.print(f"report: {out}")
