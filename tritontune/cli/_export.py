"""``tritontune export``: a finished study as a deployable model repository."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from tritontune.cli._common import (
    ConfigOption,
    StorageOption,
    app,
    console,
    err_console,
    ms,
    user_errors,
)
from tritontune.config.variant import knobs_summary
from tritontune.export.single_class import Endpoint, parse_endpoint
from tritontune.export.staging import ExportResult
from tritontune.export.studies import export_studies
from tritontune.measure.traffic import Layout
from tritontune.study.storage import DEFAULT_STORAGE
from tritontune.tuning_record import PipelineRecord, TuningRecord, WorkloadRecord


@app.command()
def export(
    ctx: typer.Context,
    out: Annotated[Path, typer.Option(help="Directory to write the model repository into.")],
    config: ConfigOption = None,
    study: Annotated[str | None, typer.Option(help="The study to export (its best config).")] = None,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(
            help="ROLE=STUDY (repeatable): one endpoint per study, named MODEL_ROLE, "
            "e.g. interactive=mlp-p99-10ms-concurrency batch=mlp-p99-500ms-concurrency."
        ),
    ] = None,
    storage: StorageOption = DEFAULT_STORAGE,
    top_k: Annotated[
        int, typer.Option(help="Also export the runners-up, as MODEL_rank2, ...", min=1)
    ] = 1,
    model_repository: Annotated[
        Path | None,
        typer.Option(help="Where the measured model files are, if not where the study says."),
    ] = None,
    force: Annotated[
        bool, typer.Option(help="Write into a non-empty --out, replacing the exported models.")
    ] = False,
) -> None:
    """Write the best config(s) of a study, their model files and tuning records."""
    with user_errors(ctx):
        endpoints = [Endpoint(study)] if study else []
        endpoints += [parse_endpoint(text) for text in endpoint or []]
        result = export_studies(
            endpoints,
            storage,
            out,
            top_k=top_k,
            model_repository=model_repository,
            force=force,
        )
        for warning in result.warnings:
            err_console.print(f"[yellow]warning:[/] {warning}")
        if any(isinstance(m.record, WorkloadRecord) for m in result.models):
            _print_workload_export(result)
        else:
            _print_export(result)
        console.print(
            f"serve it: tritonserver --model-repository {result.out.resolve()}; "
            f"gate it in CI: tritontune check {result.out}"
        )


def _print_export(result: ExportResult) -> None:
    table = Table(title=f"exported to {result.out}", title_justify="left")
    for column in ("model", "config", "load", "infer/s", "p99 ms", "SLO ms", "figures"):
        table.add_column(column, justify="left" if column in ("model", "config") else "right")
    routing = None
    for model in result.models:
        record = model.record
        assert isinstance(record, TuningRecord)
        point = record.operating_point
        routing = routing or record.routing
        pipeline = record.pipeline
        table.add_row(
            model.name,
            f"pipeline: {', '.join(pipeline.names)}" if pipeline else knobs_summary(record.knobs),
            f"{record.load.value:g}",
            f"{point.throughput:,.0f}",
            ms(point.p99_ms / 1e3),
            f"{record.slo_p99_ms:g}",
            ("playoff, held" if record.playoff else "re-measured, held")
            if point.confirmed
            else "screening",
        )
    console.print(table)
    if routing:
        console.print(f"routing: {routing['note']}")
    for model in result.models:
        assert isinstance(model.record, TuningRecord)
        if model.record.pipeline:
            _print_composing(model.name, model.record.pipeline)


def _print_composing(name: str, pipeline: PipelineRecord) -> None:
    """A pipeline's composing models as exported, with their share of a request's time."""
    title = f"{name}'s composing models (each its own directory, the record is {name}'s)"
    if pipeline.steps:
        title += (
            f"; per step: the search's {pipeline.steps_figures} figures at load {pipeline.steps_load:g}"
        )
    table = Table(title=title, title_justify="left")
    for column in ("model", "config", "queue ms", "compute ms", "avg batch"):
        table.add_column(column, justify="left" if column in ("model", "config") else "right")
    steps = {s.model: s for s in pipeline.steps}
    for composing in pipeline.models:
        step = steps.get(composing.model)
        table.add_row(
            composing.model,
            knobs_summary(composing.knobs),
            f"{step.queue_ms:.2f}" if step else "-",
            f"{step.compute_ms:.2f}" if step else "-",
            f"{step.avg_batch_size:.1f}" if step else "-",
        )
    console.print(table)


def _print_workload_export(result: ExportResult) -> None:
    table = Table(title=f"exported to {result.out} (tuned for a workload)", title_justify="left")
    for column in ("model", "config", "serves", "capacity req/s (rounds)"):
        table.add_column(column, justify="right" if column.startswith("capacity") else "left")
    for model in result.models:
        record = model.record
        assert isinstance(record, WorkloadRecord)
        classes = [c for c, m in record.routes.items() if m == model.name]
        table.add_row(
            model.name,
            knobs_summary(record.knobs),
            ", ".join(classes),
            ", ".join(f"{r:,.0f}" for r in record.capacity_rounds),
        )
    console.print(table)
    record = result.models[0].record
    assert isinstance(record, WorkloadRecord)
    routes = "; ".join(f"{c} -> {m}" for c, m in record.routes.items())
    if record.layout == Layout.ENDPOINTS:
        console.print(f"routing (client side): {routes}")
    elif len(record.models) > 1:  # a group: the classes name their models in the workload file
        console.print(f"one server serves them all, each class calling its own model: {routes}")
