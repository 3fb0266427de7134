"""``tritontune status``: where a search stands, for every worker sharing its study."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from tritontune.cli._common import ConfigOption, StorageOption, app, console, user_errors
from tritontune.search.status import study_status
from tritontune.study.handle import TuningStudy
from tritontune.study.storage import DEFAULT_STORAGE
from tritontune.units import format_duration


@app.command()
def status(
    ctx: typer.Context,
    study: Annotated[str, typer.Option(help="The study (as given to search --study).")],
    config: ConfigOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
) -> None:
    """Workers, trials running/finished/failed, the best so far and the ETA of a search."""
    with user_errors(ctx):
        now = study_status(TuningStudy.open_existing(storage, study).read())
    record = now.study
    counted = now.counted
    budget = f"/{now.budget}" if now.budget is not None else ""
    console.print(
        f"study {record.name}: {len(counted)}{budget} trials done ({len(record.results)} measured, "
        f"{len(record.failed)} failed), {len(record.running)} running, {len(record.lost)} lost "
        "and measured again"
    )
    table = Table(title="workers", title_justify="left")
    for column in ("worker", "last seen", "running trial", "trials done"):
        table.add_column(column)
    for worker in now.workers:
        running = "-" if worker.running is None else str(worker.running)
        table.add_row(worker.label, f"{worker.last_seen:%Y-%m-%d %H:%M:%S}", running, str(worker.trials))
    console.print(table)
    best = record.best
    if best is not None:
        console.print(f"best so far: trial {best.number}, {best.throughput:,.0f} infer/s")
    if now.eta_s is not None:
        console.print(f"ETA for the budget: {format_duration(now.eta_s)}")
