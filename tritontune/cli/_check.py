"""``tritontune check``: the CI gate on a tuned model repository."""

from __future__ import annotations

import statistics
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from tritontune.check.gate import (
    CHECK_MEASURE,
    CheckReport,
    CheckSettings,
    ModelCheck,
    WorkloadCheck,
    run_check,
)
from tritontune.check.reports import criterion_text, render_summary, write_junit
from tritontune.cli._common import (
    ConfigOption,
    CsvOption,
    app,
    console,
    err_console,
    ms,
    print_kept_log,
    progress_bar,
    user_errors,
)
from tritontune.cli._option_groups import load_options, server_options
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.measurement import Measurement
from tritontune.report.inference_csv import check_rows, write_inference_csv
from tritontune.server.factory import LaunchSettings
from tritontune.study.figures import bottleneck
from tritontune.units import parse_duration, parse_fraction


@app.command()
@server_options
@load_options
def check(
    ctx: typer.Context,
    repository: Annotated[Path, typer.Argument(help="The tuned model repository (from export).")],
    config: ConfigOption = None,
    tolerance: Annotated[
        str, typer.Option(help="How far throughput may fall below its record, e.g. 10%.")
    ] = "10%",
    junit: Annotated[Path | None, typer.Option(help="Write JUnit XML here.")] = None,
    summary: Annotated[
        Path | None, typer.Option(help="Write a Markdown summary here (e.g. $GITHUB_STEP_SUMMARY).")
    ] = None,
    rounds: Annotated[
        int, typer.Option(help="Measurement rounds per model (2 more when they disagree).", min=1)
    ] = 3,
    window: Annotated[str, typer.Option(help="Measurement window length.")] = "1s",
    csv_out: CsvOption = None,
    *,
    server: LaunchSettings,
    load_generator: LoadSettings,
) -> None:
    """Re-measure each tuned model at its recorded load; exit 1 when one regressed."""
    with user_errors(ctx):
        settings = CheckSettings(
            tolerance=parse_fraction(tolerance, what="--tolerance"),
            min_rounds=rounds,
            max_rounds=rounds + 2,
            measure=replace(CHECK_MEASURE, window_s=max(parse_duration(window, what="--window"), 0.05)),
            launch=server,
            load=load_generator,
            failure_log_dir=(junit or Path("junit.xml")).parent,
        )
        report = _check_with_progress(repository, settings)
        _print_report(report)
        checks: list[ModelCheck | WorkloadCheck] = [*report.models, *report.workloads]
        for model in checks:
            print_kept_log(
                model.server_log, model.server_log_reason, what=f"{model.name}: tritonserver log"
            )
        if junit:
            write_junit(report, junit)
            console.print(f"JUnit XML: {junit}")
        if summary:
            with open(summary, "a", encoding="utf-8") as handle:  # CI summaries are appended to
                handle.write(render_summary(report))
            console.print(f"summary: {summary}")
        if csv_out:
            write_inference_csv(check_rows(report), csv_out)
            console.print(f"csv: {csv_out}")
    if not report.passed:
        raise typer.Exit(1)


def _check_with_progress(repository: Path, settings: CheckSettings) -> CheckReport:
    with progress_bar() as bar:
        task = bar.add_task("reading the repository")

        def model_start(name: str) -> None:
            bar.update(task, description=f"{name}: starting the server and loading the config")

        def measured(name: str, n: int, m: Measurement) -> None:  # single-class rounds
            bar.update(task, description=f"{name}: measuring round {n + 1}")
            err_console.print(
                f"  {name} round {n}: {m.throughput:,.1f} infer/s, p99 {ms(m.latency.p99)} ms"
                + ("" if m.stable else " (windows did not settle)")
            )

        return run_check(repository, settings, on_model_start=model_start, on_round=measured)


def _print_report(report: CheckReport) -> None:
    if report.models:
        _print_models(report)
    for workload in report.workloads:
        _print_workload(workload)
    verdict = "passed" if report.passed else "FAILED"
    checks: list[ModelCheck | WorkloadCheck] = [*report.models, *report.workloads]
    console.print(
        f"check {verdict}: {sum(m.passed for m in checks)}/{len(checks)} "
        f"{'models' if not report.workloads else 'checks'} pass"
    )


def _print_workload(check: WorkloadCheck) -> None:
    record = check.record
    table = Table(
        title=f"{check.name}: workload at {check.rate:,.0f} req/s in all (lowest recorded "
        f"capacity {record.reference_rate:,.0f} less the tolerance), {len(check.rounds)} rounds",
        title_justify="left",
    )
    for column in ("class", "served by", "p99 ms (median)", "bound ms", "met in rounds", "verdict"):
        table.add_column(column, justify="left" if column in ("class", "served by") else "right")
    by = {c.name: c for c in check.criteria}
    traffic = check.traffic
    for traffic_class in traffic.classes if traffic else ():
        name = traffic_class.name
        criterion = by.get(name)
        p99s = check.class_p99s(name)
        bound = traffic_class.latency_bound_s
        met = sum(v[name].met for v in check.verdicts)
        table.add_row(
            name,
            record.routes.get(name, "-"),
            ms(statistics.median(p99s)) if p99s else "-",
            f"{bound * 1e3:g}" if bound else "-",
            f"{met}/{len(check.verdicts)}",
            "-" if criterion is None else "[green]pass[/]" if criterion.passed else "[bold red]FAIL[/]",
        )
    console.print(table)
    for problem in check.problems:
        console.print(f"[red]{escape(check.name)}: {escape(problem)}[/]")
    for criterion in check.criteria:
        if not criterion.passed:
            reasons = [v[criterion.name].reason for v in check.verdicts if not v[criterion.name].met]
            console.print(
                f"[red]{escape(check.name)} failed:[/] class {escape(criterion.name)} missed its "
                f"objective in {len(reasons)}/{criterion.rounds} rounds ({escape('; '.join(reasons))})"
            )
    for warning in check.warnings:
        console.print(f"[yellow]{escape(check.name)} warning:[/] {escape(warning)}")


def _print_models(report: CheckReport) -> None:
    table = Table(
        title=f"tritontune check {report.repository}: Triton {report.server_version}, "
        f"{report.host.summary()}, tolerance {report.tolerance:.0%}",
        title_justify="left",
    )
    for column in ("model", "load", "p99 ms", "SLO ms", "infer/s", "recorded", "change"):
        table.add_column(column, justify="left" if column == "model" else "right")
    table.add_column("verdict")
    table.add_column("confidence")
    for m in report.models:
        by = {c.name: c for c in m.criteria}
        record = m.record
        p99, tput = by.get("p99"), by.get("throughput")
        recorded = record.operating_point.throughput if record else None
        pipeline = record.pipeline if record else None
        table.add_row(
            m.name + (f" (pipeline: {', '.join(pipeline.names)})" if pipeline else ""),
            record.load.spec().label() if record else "-",
            ms(p99.measured) if p99 else "-",
            f"{record.slo_p99_ms:g}" if record else "-",
            f"{tput.measured:,.1f}" if tput else "-",
            f"{recorded:,.1f}" if recorded else "-",
            f"{tput.measured / recorded - 1:+.1%}" if tput and recorded else "-",
            "[green]pass[/]" if m.passed else "[bold red]FAIL[/]",
            m.confidence or "-",
        )
    console.print(table)
    for m in report.models:
        _print_steps(m)
    for m in report.models:
        for problem in m.problems:
            console.print(f"[red]{escape(m.name)}: {escape(problem)}[/]")
        for c in m.criteria:
            if not c.passed:
                console.print(f"[red]{escape(m.name)} failed:[/] {escape(criterion_text(m, c))}")
        for warning in m.warnings:
            console.print(f"[yellow]{escape(m.name)} warning:[/] {escape(warning)}")


def _print_steps(check: ModelCheck) -> None:
    """A pipeline's steps over the rounds beside the record's: where a request's time went."""
    steps = check.steps
    if not steps:
        return
    pipeline = check.record.pipeline if check.record else None
    recorded = {s.model: s for s in pipeline.steps} if pipeline else {}
    title = f"{check.name}: where a request's time went, per step (median of {len(check.rounds)} rounds"
    if pipeline and pipeline.steps:
        title += (
            f"; recorded: the search's {pipeline.steps_figures} figures at load {pipeline.steps_load:g}"
        )
    table = Table(title=title + ")", title_justify="left")
    for column in ("step", "queue ms", "compute ms", "avg batch", "recorded queue ms",
                   "recorded compute ms", ""):  # fmt: skip
        table.add_column(column, justify="left" if column in ("step", "") else "right")
    slowest = bottleneck(steps)
    for step in steps:
        then = recorded.get(step.model)
        table.add_row(
            step.model,
            ms(step.queue_s),
            ms(step.compute_s),
            f"{step.avg_batch_size:.1f}",
            f"{then.queue_ms:.2f}" if then else "-",
            f"{then.compute_ms:.2f}" if then else "-",
            "bottleneck" if step is slowest else "",
        )
    console.print(table)
