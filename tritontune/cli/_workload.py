"""``search --workload``: the printing half (the search is :mod:`tritontune.search.workload_search`)."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.progress import BarColumn, TextColumn
from rich.table import Table

from tritontune.cli._common import (
    TrialsDisplay,
    console,
    err_console,
    kept_log_said,
    print_precisions,
    print_server,
    progress_bar,
    resumable,
    write_results,
)
from tritontune.config.variant import PIPELINE_KNOBS, knobs_summary
from tritontune.measure.traffic import Layout, Traffic
from tritontune.report.workload import summary_lines, write_workload_report
from tritontune.search.endpoint_layout import describe_endpoint_knobs
from tritontune.search.pipeline_space import PipelineSpace, knob_name
from tritontune.search.setup import space_for
from tritontune.search.space import SearchSpace, SpaceSource
from tritontune.search.traffic_objective import ADMISSION_CHOICES
from tritontune.search.workload_search import (
    WorkloadSearchProgress,
    WorkloadSearchResult,
    WorkloadSearchSettings,
    run_workload_search,
    searched_layouts,
    workload_space,
)
from tritontune.serving.session import TuningSession
from tritontune.study.duet import Order
from tritontune.study.figures import Finalist
from tritontune.study.records import TrialResult


def search_workload(
    session: TuningSession,
    space_source: SpaceSource | None,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    results: Path | None,
    report: Path | None = None,
) -> WorkloadSearchResult:
    console.print(f"workload: {traffic.describe()}")
    name = settings.study_name_for(session.name, traffic)
    with kept_log_said(session):
        print_server(session)
        # The default space needs the running server's capabilities; its delays are sized for
        # the tightest class SLO.
        tightest = min((c.slo_p99_s for c in traffic.classes if c.slo_p99_s), default=1.0)
        space = space_for(session, tightest, space_source)
        searched = workload_space(space, traffic)
        err_console.print(
            "space: "
            + ", ".join(f"{k}={v}" for k, v in searched.describe().items())
            + _scheduler_text(searched, traffic)
            + (
                ", layout={shared, endpoints}"
                if len(searched_layouts(settings, session.owns_server, traffic)) > 1
                else ""
            )
        )
        if isinstance(space, PipelineSpace) and space.budget is not None:
            err_console.print(
                f"instances: {space.budget.describe()}, shared by the tuned models (a point "
                "over it is measured clamped to it)"
            )
        with resumable(name, settings.storage_name):
            result = _search_with_progress(session, space, traffic, settings)
    if result.final_rounds_reused and not result.finalists:
        console.print(
            "final rounds: another worker of this study runs them (its output has the winner; "
            "run the same command again once it is done)"
        )
    elif result.final_rounds_reused:
        console.print("final rounds: the study's, over the same finalists (reused)")
    if result.finalists:  # none where another worker runs them: no empty table
        console.print(_finalists_table(result))
    winner, baseline = result.winner, result.baseline
    if winner is not None and baseline is not None and baseline.median > 0:
        console.print(
            f"winner: {winner.label} serves {winner.median:,.0f} infer/s with every class meeting "
            f"its objective (at {winner.median_rate:,.0f} req/s offered), "
            f"{winner.median / baseline.median:.2f}x "
            + ("the models' own configs" if traffic.routed else "the model's own config")
        )
    for label, duet in result.final.duets.items():
        if duet.order == Order.UNCERTAIN:
            console.print(
                f"[yellow]order uncertain[/]: {label} against the winner, {duet.text()} "
                "(per-round ratios of infer/s served); the higher median won"
            )
    ratio = result.layout_ratio
    if ratio is not None:
        console.print(
            f"layouts: one shared model {'wins' if ratio >= 1 else 'loses'} against one endpoint "
            f"per class ({', '.join(f'{session.name}_{c.name}' for c in traffic.classes)}) by "
            f"{ratio:.2f}x (median infer/s served, same rounds)"
        )
    elif not session.owns_server and not traffic.routed:
        console.print(
            "layouts: one endpoint per class was not measured (a remote server's repository is its own)"
        )
    if result.stop_reason:
        console.print(f"stopped before the trial budget: {result.stop_reason}")
    console.print(f"time: {result.phases.describe()}")
    if winner is not None and traffic.routed:
        _print_models(winner)
    capacity = result.winner_capacity()
    if capacity is not None:
        for line in summary_lines(capacity):
            console.print(f"  {line}")
        if report:
            write_workload_report(capacity, report, title=f"{session.name}: {result.study_name}")
            console.print(f"report: {report}")
    write_results(results or Path(f"{result.study_name}.results.json"), result.to_dict())
    return result


def _scheduler_text(space: SearchSpace, traffic: Traffic) -> str:
    """The scheduler's knobs of the space line: one model's, or each model's of a group."""
    admission = f"admission={{{', '.join(str(a) for a in ADMISSION_CHOICES)}}}"
    if isinstance(space, PipelineSpace) and traffic.routed:
        parts = []
        for model in space.models:
            if traffic.served_by(model).priority_levels:
                parts.append(f"{knob_name(model, 'priorities')}={{true, false}}")
            parts.append(knob_name(model, admission))
        return "".join(f", {p}" for p in parts)
    return (", priorities={true, false}" if traffic.priority_levels else "") + f", {admission}"


def _print_models(winner: Finalist) -> None:
    """Each model's config in the winner, and the classes it serves."""
    knobs = winner.knobs.get(PIPELINE_KNOBS, {})
    for model in winner.models:
        classes = ", ".join(c for c, m in winner.routes.items() if m == model) or "none"
        shown = knobs_summary(knobs[model]) if model in knobs else "its own config"
        console.print(f"  {model} (classes: {classes}): {shown}")


def _search_with_progress(
    session: TuningSession, space: SearchSpace, traffic: Traffic, settings: WorkloadSearchSettings
) -> WorkloadSearchResult:
    with progress_bar(BarColumn(), TextColumn("{task.fields[status]}")) as bar:
        task = bar.add_task("trials", total=settings.trials, status="")

        trials = TrialsDisplay(bar, task, "infer/s")

        def trial_done(trial: TrialResult, best: TrialResult | None, eta: float | None) -> None:
            knobs = knobs_summary(trial.knobs) if trial.knobs else ""
            if trial.params.get("layout") == "endpoints":
                own = describe_endpoint_knobs(trial.params)
                layout = f"one endpoint per class ({own})" if own else "one endpoint per class"
                knobs = f"{layout}, split from: {knobs}"
            shown = f"{trial.value:,.0f} infer/s served"
            if trial.capacity is not None and trial.capacity.client_bound:
                shown += " [yellow]at least: client-bound above[/]"  # as a single class's
            trials.done(trial, best, eta, knobs, shown)
            for note in trial.capacity.caveats() if trial.capacity is not None else ():
                err_console.print(f"  [yellow]caveat[/]: {escape(note)}")

        def final_round(round_number: int, finalist: Finalist, served: float | None) -> None:
            bar.update(task, description=f"final round {round_number}: {finalist.label}")
            shown = f"{served:,.0f} infer/s served" if served is not None else "[red]failed[/]"
            err_console.print(f"  final round {round_number}: {finalist.label} {shown}")

        def settled_note(settled_after: dict[str, int]) -> None:
            for label, rounds in settled_after.items():
                err_console.print(
                    f"  final rounds: {label} sat out after round {rounds} (its place could not "
                    "change: behind the leader by over 10 % in every round, or by half from the "
                    "first, or the leader with everyone behind it)"
                )

        return run_workload_search(
            session,
            space,
            traffic,
            settings,
            WorkloadSearchProgress(
                trials.start,
                trial_done,
                final_round,
                print_precisions,
                lambda first: err_console.print(first.describe()),
                settled_note,
            ),
        )


def _finalists_table(result: WorkloadSearchResult) -> Table:
    table = Table(title="final rounds (interleaved): inferences/s served with every objective met")
    for column in ("config", "knobs", "median", "rounds", "req/s offered"):
        table.add_column(column, justify="left" if column == "knobs" else "right")
    for f in sorted(result.finalists, key=lambda f: -f.median):
        table.add_row(
            f.label,
            _knobs_text(f),
            f"{f.median:,.0f}",
            ", ".join(f"{r:,.0f}" for r in f.served or f.rates)
            + (f" (left: {f.error})" if f.error else ""),
            f"{f.median_rate:,.0f}",
        )
    return table


def _knobs_text(finalist: Finalist) -> str:
    if finalist.layout == Layout.ENDPOINTS:
        return "; ".join(
            f"{finalist.routes.get(role, role)}: {knobs_summary(knobs)}"
            for role, knobs in finalist.knobs.items()
        )
    return knobs_summary(finalist.knobs)
