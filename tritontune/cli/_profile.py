"""``tritontune profile``: one config at several loads."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.progress import BarColumn, TextColumn
from rich.table import Table

from tritontune.cli._common import (
    BatchSizeOption,
    ComposingOption,
    ConfigOption,
    CsvOption,
    InputDataOption,
    ModelOption,
    RepositoryOption,
    accuracy_text,
    app,
    console,
    err_console,
    kept_log_said,
    ms,
    print_server,
    progress_bar,
    refuse_given,
    user_errors,
)
from tritontune.cli._option_groups import load_options, precision_options, server_options
from tritontune.config.variant import Variant, knobs_summary
from tritontune.errors import InputError
from tritontune.measure.arrivals import Arrival
from tritontune.measure.client_cost import ClientCost
from tritontune.measure.gpu_metrics import NO_GPUS, gpu_summary
from tritontune.measure.interference import Interference
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.traffic import Traffic, read_traffic
from tritontune.precision.convert import check_precision
from tritontune.precision.prepare import AccuracySettings
from tritontune.profile import (
    ProfileResult,
    TrafficProfileResult,
    run_profile,
    run_traffic_profile,
)
from tritontune.report.inference_csv import profile_rows, write_inference_csv
from tritontune.report.workload import summary_lines, write_workload_report
from tritontune.server.factory import LaunchSettings
from tritontune.serving.opening import open_session
from tritontune.serving.server import failure_log_path
from tritontune.serving.session import TuningSession
from tritontune.units import (
    parse_duration,
    parse_int_list,
    parse_rate_list,
    to_microseconds,
)


def _parse_params(params: list[str]) -> dict[str, str]:
    parsed = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--param {item!r}: expected KEY=VALUE, e.g. intra_op_thread_count=1")
        parsed[key.strip()] = value.strip()
    return parsed


_PER_CLASS = "not with --workload: each class of the workload file says its own"
#: What ``profile --workload`` refuses when it is given, and why.
PROFILE_WORKLOAD_REFUSES = {
    "arrival": f"{_PER_CLASS} arrivals (poisson, constant, gamma or a trace)",
    "batch_size": f"{_PER_CLASS} (batch_size)",
    "input_data": f"{_PER_CLASS} (input_data)",
    "csv_out": "not with --workload: the per-level CSV is written for one class of load "
    "(--json and --report hold every class's figures)",
}


def _loads(concurrency: str | None, request_rate: str | None, arrival: str) -> list[LoadSpec]:
    if concurrency and request_rate:
        raise InputError("give --concurrency or --request-rate, not both")
    if request_rate:
        known = [str(Arrival.POISSON), str(Arrival.CONSTANT)]
        if arrival not in known:
            raise InputError(
                f"--arrival: {arrival!r} is not one of {', '.join(known)} (gamma and trace "
                "arrivals: per class, in a --workload file)"
            )
        return [LoadSpec.rate(r, Arrival(arrival)) for r in parse_rate_list(request_rate)]
    values = parse_int_list(concurrency or "1,4,16", what="--concurrency")
    return [LoadSpec.concurrency(n) for n in values]


def _levels_table(result: ProfileResult) -> Table:
    table = Table(title=f"{result.model}: {knobs_summary(result.knobs)}", title_justify="left")
    for column in ("load", "infer/s", "p50 ms", "p90", "p95", "p99", "p99.9", "max", "errors"):
        table.add_column(column, justify="right")
    for column in ("queue ms", "compute ms", "avg batch", "stable"):
        table.add_column(column, justify="right", style="cyan")
    for m in result.measurements:
        lat = m.latency
        server = m.server
        table.add_row(
            m.load.label(),
            f"{m.throughput:,.0f}",
            ms(lat.p50),
            ms(lat.p90),
            ms(lat.p95),
            ms(lat.p99),
            ms(lat.p999),
            ms(lat.max),
            ", ".join(f"{k}:{v}" for k, v in m.errors.items()) or "0",
            ms(server.avg_queue_s) if server else "-",
            ms(server.avg_compute_s) if server else "-",
            f"{server.avg_batch_size:.2f}" if server else "-",
            "yes" if m.stable else f"no (±{m.throughput_deviation:.0%})",
        )
    return table


@app.command()
@server_options
@load_options
@precision_options
def profile(
    ctx: typer.Context,
    model_repository: RepositoryOption,
    model: ModelOption,
    composing: ComposingOption = None,
    config: ConfigOption = None,
    max_batch_size: Annotated[int | None, typer.Option(help="Set max_batch_size.")] = None,
    dynamic_batching: Annotated[
        bool | None,
        typer.Option("--dynamic-batching/--no-dynamic-batching", help="Switch dynamic batching."),
    ] = None,
    max_queue_delay: Annotated[
        str | None, typer.Option(help="Dynamic batching window, e.g. 2ms or 500us.")
    ] = None,
    preferred_batch_size: Annotated[
        str | None, typer.Option(help="Preferred batch sizes, e.g. 8,16.")
    ] = None,
    instances: Annotated[int | None, typer.Option(help="Instance count.", min=1)] = None,
    kind: Annotated[str | None, typer.Option(help="Instance kind: cpu or gpu.")] = None,
    response_cache: Annotated[bool | None, typer.Option("--response-cache/--no-response-cache")] = None,
    precision: Annotated[
        str | None,
        typer.Option(help="Precision variant: fp32, fp16, fp16_io, int8_dynamic, int8_static."),
    ] = None,
    graph_optimization: Annotated[
        str | None,
        typer.Option(help="onnxruntime graph optimization: all (default), extended, basic, disabled."),
    ] = None,
    param: Annotated[
        list[str] | None,
        typer.Option(help="Backend parameter KEY=VALUE (repeatable), e.g. intra_op_thread_count=1."),
    ] = None,
    concurrency: Annotated[
        str | None, typer.Option(help="Closed-loop concurrency levels, e.g. 1,4,16 (default).")
    ] = None,
    request_rate: Annotated[
        str | None, typer.Option(help="Open-loop request rates in req/s, e.g. 100,400.")
    ] = None,
    arrival: Annotated[str, typer.Option(help="Open-loop arrivals: poisson or constant.")] = "poisson",
    workload_file: Annotated[
        Path | None,
        typer.Option(
            "--workload",
            help="Workload file (YAML): classes of traffic measured at once, each on its own; "
            "--request-rate is then the total rate, and without it the capacity is searched for.",
        ),
    ] = None,
    priorities: Annotated[
        bool,
        typer.Option(
            "--priorities/--no-priorities",
            help="With --workload: Triton's priority levels as the classes name them (default on).",
        ),
    ] = True,
    max_queue_size: Annotated[
        int | None,
        typer.Option(
            help="Admission control: the lowest priority level's queue bound (the only queue "
            "without priorities); past it Triton rejects at once.",
            min=1,
        ),
    ] = None,
    report: Annotated[
        Path | None,
        typer.Option(help="With --workload: the HTML report (per-class curves, cliff, plan)."),
    ] = None,
    start_rate: Annotated[
        float | None,
        typer.Option(
            help="With --workload and no --request-rate: where the capacity ramp starts (req/s).",
            min=0.001,
        ),
    ] = None,
    batch_size: BatchSizeOption = 1,
    input_data: InputDataOption = None,
    dynamic_dim: Annotated[int, typer.Option(help="Size used for dynamic (-1) input dims.", min=1)] = 16,
    warmup: Annotated[str, typer.Option(help="Warm-up per load level.")] = "1s",
    window: Annotated[str, typer.Option(help="Measurement window length.")] = "1s",
    max_windows: Annotated[int, typer.Option(help="Windows before giving up on stability.", min=3)] = 8,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
    csv_out: CsvOption = None,
    *,
    server: LaunchSettings,
    load_generator: LoadSettings,
    precision_checks: AccuracySettings,
) -> None:
    """Measure one config variant of a model at several load levels on a real Triton server."""
    with user_errors(ctx):
        variant = Variant(
            max_batch_size=max_batch_size,
            dynamic_batching=dynamic_batching,
            max_queue_delay_us=to_microseconds(parse_duration(max_queue_delay, what="--max-queue-delay"))
            if max_queue_delay is not None
            else None,
            preferred_batch_sizes=tuple(
                parse_int_list(preferred_batch_size, what="--preferred-batch-size")
            )
            if preferred_batch_size
            else None,
            instance_count=instances,
            instance_kind=kind,
            response_cache=response_cache,
            backend_parameters=_parse_params(param or []),
            precision=check_precision(precision) if precision else None,
            graph_optimization=graph_optimization,
        )
        traffic = None
        if workload_file is not None:
            refuse_given(ctx, PROFILE_WORKLOAD_REFUSES)
            load_generator.refuse_traffic()
            if concurrency:
                raise InputError(
                    "--workload drives open-loop traffic: give --request-rate, not --concurrency"
                )
            traffic = read_traffic(workload_file, dynamic_dim=dynamic_dim)
            if traffic.routed:
                raise InputError(
                    f"--workload {workload_file}: its classes name their models "
                    f"({', '.join(traffic.models)}); profile serves one model's classes (search "
                    "--workload tunes several models together)"
                )
            variant = traffic.scheduled(variant, priorities=priorities, admission=max_queue_size)
        elif report is not None:
            raise InputError("--report: written for --workload (a study's report: tritontune report)")
        elif max_queue_size is not None:
            variant = dataclasses.replace(variant, max_queue_size=max_queue_size)
        loads = _loads(concurrency, request_rate, arrival) if traffic is None else []
        settings = MeasureSettings(
            warmup_s=parse_duration(warmup, what="--warmup"),
            window_s=max(parse_duration(window, what="--window"), 0.05),
            max_windows=max_windows,
        )
        request_shape = RequestShape(
            batch_size=batch_size, input_data=input_data, dynamic_dim=dynamic_dim
        )
        session = open_session(
            model_repository,
            model,
            composing=tuple(composing or ()),
            for_traffic=traffic is not None,
            launch=server,
            load=load_generator,
            request_shape=request_shape,
            settings=settings,
            failure_log=failure_log_path(json_out or Path("profile.json"), f"{model}-profile"),
        )
        if traffic is not None:
            rates = parse_rate_list(request_rate) if request_rate else None
            _profile_traffic(session, variant, traffic, rates, start_rate, json_out, report)
            return
        with kept_log_said(session):
            print_server(session)
            result = _profile_with_progress(session, variant, loads, precision_checks)
        console.print(_levels_table(result))
        _print_caveats((m.load.label(), m.interference, m.client) for m in result.measurements)
        if result.accuracy:
            console.print(
                f"accuracy of {variant.precision} against fp32: {accuracy_text(result.accuracy)}"
            )
            if result.recipe:
                console.print(f"recipe: {result.recipe}")
        if any(m.gpu for m in result.measurements):
            for m in result.measurements:
                console.print(f"GPU at {m.load.label()}: {gpu_summary(m.gpu)}")
        else:
            console.print(NO_GPUS)
        if result.switch_s is not None:
            console.print(f"config switch (model reload): {result.switch_s:.2f} s")
        if json_out:
            json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
            console.print(f"wrote {json_out}")
        if csv_out:
            write_inference_csv(profile_rows(result), csv_out)
            console.print(f"wrote {csv_out}")


def _print_caveats(
    levels: Iterable[tuple[str, Interference | None, ClientCost | None]],
) -> None:
    """One line for each level measured while the machine was disturbed, and for each level the
    load generator limited."""
    for label, interference, client in levels:
        note = interference.describe() if interference else None
        if note:
            console.print(f"[yellow]machine disturbed[/] at {label}: {escape(note)}")
        bound = client.describe() if client else None
        if bound:
            console.print(f"[yellow]client-bound[/] at {label}: {escape(bound)}")


def _profile_traffic(
    session: TuningSession,
    variant: Variant,
    traffic: Traffic,
    rates: list[float] | None,
    start_rate: float | None,
    json_out: Path | None,
    report: Path | None,
) -> None:
    console.print(f"workload: {escape(traffic.describe())}")
    with kept_log_said(session):
        print_server(session)

        def done(m: TrafficMeasurement) -> None:
            missed = [f"{v.name}: {v.reason}" for v in m.verdicts(traffic) if not v.met]
            verdict = "every class met its objective" if not missed else "; ".join(missed)
            err_console.print(
                f"  {m.total_rate:,.1f} req/s: served {m.throughput:,.1f} infer/s; {verdict}"
            )

        result = run_traffic_profile(
            session, variant, traffic, rates, start_rate=start_rate, on_level_done=done
        )
    console.print(_traffic_table(result))
    _print_caveats((f"{m.total_rate:,.1f} req/s", m.interference, m.client) for m in result.levels)
    capacity = result.capacity
    if capacity is not None:
        if capacity.feasible:
            console.print(
                f"capacity: {capacity.served:,.1f} infer/s served with every class meeting its "
                f"objective, at {capacity.total_rate:,.1f} req/s in all"
            )
            if capacity.highest_rate > capacity.total_rate:
                console.print(
                    f"objectives kept up to {capacity.highest_rate:,.1f} req/s offered "
                    "(the surplus shed)"
                )
        else:
            console.print(
                f"[red]no rate tried met every objective[/]: {escape(capacity.failure())}",
                highlight=True,
            )
        for line in summary_lines(capacity):
            console.print(f"  {line}")
        if report:
            write_workload_report(capacity, report, title=f"{result.model}: {traffic.describe()}")
            console.print(f"report: {report}")
    if json_out:
        json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
        console.print(f"wrote {json_out}")


def _traffic_table(result: TrafficProfileResult) -> Table:
    table = Table(title=f"{result.model}: {knobs_summary(result.knobs)}", title_justify="left")
    for column in ("total req/s", "class", "offered/s", "served/s", "infer/s", "p50 ms", "p95", "p99"):
        table.add_column(column, justify="right")
    for column in ("rejected", "timed out", "other errors", "objective"):
        table.add_column(column, justify="right", style="cyan")
    for m in result.levels:
        verdicts = {v.name: v for v in m.verdicts(result.traffic)}
        for i, f in enumerate(m.classes):
            other = sum(f.errors.values()) - f.rejected - f.timed_out
            table.add_row(
                f"{m.total_rate:,.1f}" if i == 0 else "",
                f.name,
                f"{f.offered_rate:,.1f}",
                f"{f.request_rate:,.1f}",
                f"{f.throughput:,.0f}",
                ms(f.latency.p50),
                ms(f.latency.p95),
                ms(f.latency.p99),
                str(f.rejected),
                str(f.timed_out),
                str(other),
                "met" if verdicts[f.name].met else "[red]missed[/]",
            )
    return table


def _profile_with_progress(
    session: TuningSession, variant: Variant, loads: list[LoadSpec], accuracy: AccuracySettings
) -> ProfileResult:
    with progress_bar(BarColumn(), TextColumn("{task.completed}/{task.total} levels")) as progress:
        task = progress.add_task("loading config", total=len(loads))

        def start(load: LoadSpec) -> None:
            progress.update(task, description=f"measuring {load.label()}")

        def done(m: Measurement) -> None:
            progress.advance(task)
            err_console.print(
                f"  {m.load.label()}: {m.throughput:,.0f} infer/s, p99 {ms(m.latency.p99)} ms"
            )

        if variant.precision:
            progress.update(task, description=f"building and checking {variant.precision}")
        return run_profile(
            session,
            variant,
            loads,
            on_level_start=start,
            on_level_done=done,
            accuracy_settings=accuracy,
        )
