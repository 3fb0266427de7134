"""``search --workload``: the printing half (the search is :mod:`tritontune.search.workload_search`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from rich.table import Table

from tritontune.cli._common import console, err_console, kept_log_said, print_server
from tritontune.config.variant import knobs_summary
from tritontune.measure.traffic import Layout, Traffic
from tritontune.report.workload import summary_lines, write_workload_report
from tritontune.search.space import SearchSpace
from tritontune.search.study import WorkloadTrial
from tritontune.search.workload_search import (
    ADMISSION_CHOICES,
    Finalist,
    WorkloadSearchProgress,
    WorkloadSearchResult,
    WorkloadSearchSettings,
    run_workload_search,
    workload_space,
)
from tritontune.session import TuningSession


def search_workload(
    session: TuningSession,
    make_space: Callable[[], SearchSpace],
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    results: Path | None,
    report: Path | None = None,
) -> WorkloadSearchResult:
    console.print(f"workload: {traffic.describe()}", highlight=False)

    def trial_done(count: int, trial: WorkloadTrial) -> None:
        shown = f"{trial.total_rate:,.0f} req/s" if trial.total_rate else f"failed: {trial.error}"
        err_console.print(
            f"  trial {count}/{settings.trials}: {knobs_summary(trial.knobs) if trial.knobs else ''}"
            f" -> {shown}",
            highlight=False,
        )

    def final_round(round_number: int, finalist: Finalist, rate: float) -> None:
        err_console.print(
            f"  final round {round_number}: {finalist.label} {rate:,.0f} req/s", highlight=False
        )

    with kept_log_said(session):
        print_server(session)
        space = make_space()  # the default space needs the running server's capabilities
        searched = workload_space(space, traffic)
        err_console.print(
            "space: "
            + ", ".join(f"{k}={v}" for k, v in searched.describe().items())
            + (", priorities={true, false}" if traffic.priority_levels else "")
            + f", admission={{{', '.join(str(a) for a in ADMISSION_CHOICES)}}}",
            highlight=False,
        )
        result = run_workload_search(
            session,
            space,
            traffic,
            settings,
            WorkloadSearchProgress(on_trial_done=trial_done, on_final_round=final_round),
        )
    console.print(_finalists_table(result))
    winner, baseline = result.winner, result.baseline
    if winner is not None and baseline is not None and baseline.median > 0:
        console.print(
            f"winner: {winner.label} sustains {winner.median:,.0f} req/s in all with every class "
            "meeting its objective, "
            f"{winner.median / baseline.median:.2f}x the model's own config",
            highlight=False,
        )
    ratio = result.layout_ratio
    if ratio is not None:
        console.print(
            f"layouts: one shared model {'wins' if ratio >= 1 else 'loses'} against one endpoint "
            f"per class ({', '.join(f'{session.name}_{c.name}' for c in traffic.classes)}) by "
            f"{ratio:.2f}x (median total req/s, same rounds)",
            highlight=False,
        )
    elif not session.launcher.owns_server:
        console.print(
            "layouts: one endpoint per class was not measured (a remote server's repository is its own)",
            highlight=False,
        )
    capacity = result.winner_capacity()
    if capacity is not None:
        for line in summary_lines(capacity):
            console.print(f"  {line}", highlight=False)
        if report:
            write_workload_report(capacity, report, title=f"{session.name}: {result.study_name}")
            console.print(f"report: {report}", highlight=False)
    out = results or Path(f"{result.study_name}.results.json")
    out.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
    console.print(f"results: {out}", highlight=False)
    return result


def _finalists_table(result: WorkloadSearchResult) -> Table:
    table = Table(title="final rounds (interleaved): total req/s with every objective met")
    for column in ("config", "knobs", "median", "rounds"):
        table.add_column(column, justify="left" if column == "knobs" else "right")
    for f in sorted(result.finalists, key=lambda f: -f.median):
        table.add_row(
            f.label,
            _knobs_text(f),
            f"{f.median:,.0f}",
            ", ".join(f"{r:,.0f}" for r in f.rates),
        )
    return table


def _knobs_text(finalist: Finalist) -> str:
    if finalist.layout == Layout.ENDPOINTS:
        return "; ".join(
            f"{finalist.routes.get(role, role)}: {knobs_summary(knobs)}"
            for role, knobs in finalist.knobs.items()
        )
    return knobs_summary(finalist.knobs)
