"""The ``tritontune`` command: parses options, calls the library, prints. No logic lives here."""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tritontune import __version__
from tritontune.config.variant import Variant
from tritontune.errors import ServerDiedError, TritonTuneError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.runner import Measurement, MeasureSettings
from tritontune.profile import ProfileResult, run_profile
from tritontune.session import Workload, open_session
from tritontune.units import (
    format_duration,
    parse_duration,
    parse_int_list,
    parse_rate_list,
    to_microseconds,
)

app = typer.Typer(
    name="tritontune",
    help="Find the Triton model config with the highest throughput under a latency SLO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Tables stay readable when output is piped or captured (rich would assume 80 columns).
console = Console(width=None if sys.stdout.isatty() else 160)
err_console = Console(stderr=True, width=None if sys.stderr.isatty() else 160)


def _print_error(err: Exception) -> None:
    err_console.print(Text("error: ", style="bold red") + Text(str(err)), soft_wrap=True)


@contextmanager
def user_errors():
    """Turn tritontune's errors into one red line and a non-zero exit; Ctrl-C into exit 130."""
    try:
        yield
    except ServerDiedError as err:
        _print_error(err)
        if err.log_tail:
            err_console.print("[dim]last tritonserver log lines:[/]")
            err_console.print(err.log_tail.rstrip(), style="dim", highlight=False, markup=False)
        raise typer.Exit(3) from None
    except TritonTuneError as err:
        _print_error(err)
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: the server was stopped[/]")
        raise typer.Exit(130) from None


def _version(value: bool) -> None:
    if value:
        console.print(f"tritontune {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = None,
) -> None:
    """tritontune: tune Triton model configs on a real server."""


def _parse_params(params: list[str]) -> dict[str, str]:
    from tritontune.errors import InputError

    parsed = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--param {item!r}: expected KEY=VALUE, e.g. intra_op_thread_count=1")
        parsed[key.strip()] = value.strip()
    return parsed


def _loads(concurrency: str | None, request_rate: str | None, arrival: str) -> list[LoadSpec]:
    from tritontune.errors import InputError

    if concurrency and request_rate:
        raise InputError("give --concurrency or --request-rate, not both")
    if request_rate:
        if arrival not in ("poisson", "constant"):
            raise InputError(f"--arrival: {arrival!r} is not one of poisson, constant")
        return [LoadSpec.rate(r, arrival) for r in parse_rate_list(request_rate)]  # type: ignore[arg-type]
    values = parse_int_list(concurrency or "1,4,16", what="--concurrency")
    return [LoadSpec.concurrency(n) for n in values]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def format_knobs(knobs: dict) -> str:
    """A config's knobs on one line: ``max_batch_size=64 batching(delay=1ms) 1xKIND_CPU ...``."""
    parts = [f"max_batch_size={knobs['max_batch_size']}"]
    if knobs.get("dynamic_batching"):
        inner = [f"delay={format_duration(knobs.get('max_queue_delay_us', 0) / 1e6)}"]
        if knobs.get("preferred_batch_sizes"):
            inner.append("preferred=" + ",".join(map(str, knobs["preferred_batch_sizes"])))
        parts.append(f"batching({' '.join(inner)})")
    else:
        parts.append("no batching")
    parts += [f"{g['count']}x{g['kind'].removeprefix('KIND_')}" for g in knobs["instance_group"]]
    if knobs.get("response_cache"):
        parts.append("cache")
    parts += [f"{k}={v}" for k, v in knobs.get("parameters", {}).items()]
    return " ".join(parts)


def _levels_table(result: ProfileResult) -> Table:
    table = Table(title=f"{result.model}: {format_knobs(result.knobs)}", title_justify="left")
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
            _ms(lat.p50),
            _ms(lat.p90),
            _ms(lat.p95),
            _ms(lat.p99),
            _ms(lat.p999),
            _ms(lat.max),
            ", ".join(f"{k}:{v}" for k, v in m.errors.items()) or "0",
            _ms(server.avg_queue_s) if server else "-",
            _ms(server.avg_compute_s) if server else "-",
            f"{server.avg_batch_size:.2f}" if server else "-",
            "yes" if m.stable else f"no (±{m.throughput_deviation:.0%})",
        )
    return table


@app.command()
def profile(
    model_repository: Annotated[
        Path, typer.Option("--model-repository", "-r", help="The model repository directory.")
    ],
    model: Annotated[str, typer.Option("--model", "-m", help="Model name in the repository.")],
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
    batch_size: Annotated[int, typer.Option(help="Client batch size per request.", min=1)] = 1,
    input_data: Annotated[
        Path | None, typer.Option(help="Inputs in perf_analyzer's --input-data JSON format.")
    ] = None,
    dynamic_dim: Annotated[int, typer.Option(help="Size used for dynamic (-1) input dims.", min=1)] = 16,
    warmup: Annotated[str, typer.Option(help="Warm-up per load level.")] = "1s",
    window: Annotated[str, typer.Option(help="Measurement window length.")] = "1s",
    max_windows: Annotated[int, typer.Option(help="Windows before giving up on stability.", min=3)] = 8,
    launch: Annotated[str, typer.Option(help="local (start tritonserver) or remote (--url).")] = "local",
    url: Annotated[str | None, typer.Option(help="gRPC HOST:PORT of a remote server.")] = None,
    tritonserver: Annotated[
        Path | None, typer.Option(help="Path of the tritonserver binary to launch.")
    ] = None,
    json_out: Annotated[Path | None, typer.Option("--json", help="Write results as JSON.")] = None,
) -> None:
    """Measure one config variant of a model at several load levels on a real Triton server."""
    with user_errors():
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
        )
        loads = _loads(concurrency, request_rate, arrival)
        settings = MeasureSettings(
            warmup_s=parse_duration(warmup, what="--warmup"),
            window_s=max(parse_duration(window, what="--window"), 0.05),
            max_windows=max_windows,
        )
        workload = Workload(batch_size=batch_size, input_data=input_data, dynamic_dim=dynamic_dim)
        session = open_session(
            model_repository,
            model,
            launch=launch,
            url=url,
            tritonserver=tritonserver,
            workload=workload,
            settings=settings,
        )
        with session:
            info = session.info
            err_console.print(
                f"tritonserver {info.version} ({info.launch}, gRPC {info.grpc_url})", highlight=False
            )
            if session.served and session.served.via_python:
                err_console.print(
                    f"[yellow]note:[/] this server has no {session.source.backend!r} backend: "
                    f"serving {session.source.model_file.name} through the Python backend "
                    "(onnxruntime in model.py); configs keep your backend",
                    highlight=False,
                )
            result = _profile_with_progress(session, variant, loads)
        console.print(_levels_table(result))
        if result.switch_s is not None:
            console.print(f"config switch (model reload): {result.switch_s:.2f} s", highlight=False)
        if json_out:
            json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
            console.print(f"wrote {json_out}", highlight=False)


def _profile_with_progress(session, variant: Variant, loads: list[LoadSpec]) -> ProfileResult:
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total} levels"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("loading config", total=len(loads))

        def start(load: LoadSpec) -> None:
            progress.update(task, description=f"measuring {load.label()}")

        def done(m: Measurement) -> None:
            progress.advance(task)
            err_console.print(
                f"  {m.load.label()}: {m.throughput:,.0f} infer/s, p99 {_ms(m.latency.p99)} ms",
                highlight=False,
            )

        return run_profile(session, variant, loads, on_level_start=start, on_level_done=done)


def run() -> None:  # pragma: no cover - console entry for `python -m tritontune`
    app(prog_name="tritontune")
    sys.exit(0)
