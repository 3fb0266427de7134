"""The ``tritontune`` command: parses options, calls the library, prints. No logic lives here."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from tritontune import __version__
from tritontune.config.variant import Variant
from tritontune.errors import InputError, ServerDiedError, TritonTuneError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.runner import Measurement, MeasureSettings
from tritontune.profile import ProfileResult, run_profile
from tritontune.search import (
    DEFAULT_STORAGE,
    SEARCH_MEASURE,
    OperatingPoint,
    SearchProgress,
    SearchResult,
    SearchSettings,
    SearchSpace,
    TrialResult,
    default_space,
    default_study_name,
    load_space_file,
    run_search,
)
from tritontune.session import TuningSession, Workload, open_session
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
    except BrokenPipeError:  # output piped into `head` and closed: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
        raise typer.Exit(141) from None


# Options shared by the commands that run a model on a server.
RepositoryOption = Annotated[
    Path, typer.Option("--model-repository", "-r", help="The model repository directory.")
]
ModelOption = Annotated[str, typer.Option("--model", "-m", help="Model name in the repository.")]
BatchSizeOption = Annotated[int, typer.Option(help="Client batch size per request.", min=1)]
InputDataOption = Annotated[
    Path | None, typer.Option(help="Inputs in perf_analyzer's --input-data JSON format.")
]
LaunchOption = Annotated[str, typer.Option(help="local (start tritonserver) or remote (--url).")]
UrlOption = Annotated[str | None, typer.Option(help="gRPC HOST:PORT of a remote server.")]
TritonserverOption = Annotated[
    Path | None, typer.Option(help="Path of the tritonserver binary to launch.")
]


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
    parsed = {}
    for item in params:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--param {item!r}: expected KEY=VALUE, e.g. intra_op_thread_count=1")
        parsed[key.strip()] = value.strip()
    return parsed


def _loads(concurrency: str | None, request_rate: str | None, arrival: str) -> list[LoadSpec]:
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
    model_repository: RepositoryOption,
    model: ModelOption,
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
    batch_size: BatchSizeOption = 1,
    input_data: InputDataOption = None,
    dynamic_dim: Annotated[int, typer.Option(help="Size used for dynamic (-1) input dims.", min=1)] = 16,
    warmup: Annotated[str, typer.Option(help="Warm-up per load level.")] = "1s",
    window: Annotated[str, typer.Option(help="Measurement window length.")] = "1s",
    max_windows: Annotated[int, typer.Option(help="Windows before giving up on stability.", min=3)] = 8,
    launch: LaunchOption = "local",
    url: UrlOption = None,
    tritonserver: TritonserverOption = None,
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
            _print_server(session)
            result = _profile_with_progress(session, variant, loads)
        console.print(_levels_table(result))
        if result.switch_s is not None:
            console.print(f"config switch (model reload): {result.switch_s:.2f} s", highlight=False)
        if json_out:
            json_out.write_text(json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8")
            console.print(f"wrote {json_out}", highlight=False)


def _print_server(session: TuningSession) -> None:
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


@app.command()
def search(
    model_repository: RepositoryOption,
    model: ModelOption,
    slo_p99: Annotated[str, typer.Option(help="The latency SLO on p99, e.g. 50ms.")],
    trials: Annotated[
        int | None, typer.Option(help="Trials to finish (resumed ones count). Default 20.", min=1)
    ] = None,
    timeout: Annotated[str | None, typer.Option(help="Stop starting trials after, e.g. 20m.")] = None,
    load: Annotated[
        str, typer.Option(help="concurrency (closed loop) or poisson (open-loop arrivals).")
    ] = "concurrency",
    space: Annotated[
        Path | None, typer.Option(help="YAML file that fixes, narrows or widens dimensions.")
    ] = None,
    storage: Annotated[str, typer.Option(help="Optuna storage URL.")] = DEFAULT_STORAGE,
    study: Annotated[str | None, typer.Option(help="Study name (default: MODEL-p99-SLO-LOAD).")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed, for a repeatable search.")] = None,
    results: Annotated[
        Path | None, typer.Option(help="Results JSON (default: STUDY.results.json).")
    ] = None,
    batch_size: BatchSizeOption = 1,
    input_data: InputDataOption = None,
    warmup: Annotated[str, typer.Option(help="Warm-up per load level.")] = "0.2s",
    window: Annotated[str, typer.Option(help="Measurement window length.")] = "0.3s",
    launch: LaunchOption = "local",
    url: UrlOption = None,
    tritonserver: TritonserverOption = None,
) -> None:
    """Search for the highest-throughput config whose p99 meets the SLO."""
    with user_errors():
        slo = parse_duration(slo_p99, what="--slo-p99", unit="ms")
        if slo <= 0:
            raise InputError("--slo-p99: must be above 0, e.g. 50ms")
        if load not in ("concurrency", "poisson"):
            raise InputError(f"--load: {load!r} is not one of concurrency, poisson")
        settings = SearchSettings(
            slo_p99_s=slo,
            trials=trials if trials is not None else (None if timeout else 20),
            timeout_s=parse_duration(timeout, what="--timeout") if timeout else None,
            load=load,  # type: ignore[arg-type]
            seed=seed,
            storage=storage,
            study_name=study,
            measure=replace(
                SEARCH_MEASURE,
                warmup_s=parse_duration(warmup, what="--warmup"),
                window_s=max(parse_duration(window, what="--window"), 0.05),
            ),
        )
        session = open_session(
            model_repository,
            model,
            launch=launch,
            url=url,
            tritonserver=tritonserver,
            workload=Workload(batch_size=batch_size, input_data=input_data),
            settings=settings.measure,
        )
        with session:
            _print_server(session)
            tuning_space = build_space(session, slo, space)
            err_console.print(
                "space: " + ", ".join(f"{k}={v}" for k, v in tuning_space.describe().items()),
                highlight=False,
            )
            try:
                outcome = _search_with_progress(session, tuning_space, settings)
            except KeyboardInterrupt:
                name = settings.study_name or default_study_name(model, slo, settings.load_mode)
                err_console.print(
                    f"[yellow]interrupted:[/] study {name!r} is saved in {storage}; "
                    "run the same command again to resume",
                    highlight=False,
                )
                raise
        _print_search_result(outcome)
        out = results or Path(f"{outcome.study_name}.results.json")
        out.write_text(json.dumps(outcome.to_dict(), indent=2) + "\n", encoding="utf-8")
        console.print(f"results: {out}", highlight=False)
        if outcome.best is None:
            err_console.print(
                Text("no config met the SLO", style="bold red"),
                Text(f"(p99 <= {format_duration(slo)}); see the results file for each trial"),
            )
            raise typer.Exit(1)


def build_space(session: TuningSession, slo: float, space_file: Path | None) -> SearchSpace:
    defaults = default_space(
        session.source.base_config,
        session.info.capabilities,
        slo_p99_s=slo,
        batch_dim_dynamic=session.batch_dim_dynamic,
    )
    return load_space_file(space_file, defaults) if space_file else defaults


def _point_text(point: dict) -> str:
    return " ".join(
        f"{k}={format_duration(v / 1e6) if k == 'max_queue_delay' else v}" for k, v in point.items()
    )


def _search_with_progress(session, tuning_space: SearchSpace, settings: SearchSettings) -> SearchResult:
    unit = "concurrency" if settings.load_mode == "concurrency" else "req/s"
    with Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.fields[status]}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    ) as bar:
        task = bar.add_task("baseline", total=settings.trials, status="")
        measured = []

        def baseline_start() -> None:
            measured.append(True)
            bar.update(task, description="measuring the base config (baseline)")

        def baseline(op: OperatingPoint) -> None:
            source = "measured now" if measured else "from the study"
            err_console.print(f"baseline ({source}): {_op_text(op, unit)}", highlight=False)

        def trial_start(n: int, total: int | None, point: dict) -> None:
            bar.update(task, description=f"trial {n}/{total or '?'}")

        def trial_done(result: TrialResult, best: TrialResult | None, eta: float | None) -> None:
            bar.advance(task)
            best_text = f"best {best.throughput:,.0f}/s (trial {best.number})" if best else "no best yet"
            eta_text = f", ETA {format_duration(eta)}" if eta is not None else ""
            bar.update(task, status=best_text + eta_text)
            if result.error:
                outcome = f"[red]failed[/]: {escape(result.error)}"
            else:
                outcome = _op_text(result.operating_point, unit)
            err_console.print(
                f"trial {result.number}: {escape(_point_text(result.params))} -> {outcome}",
                highlight=False,
            )

        return run_search(
            session,
            tuning_space,
            settings,
            SearchProgress(baseline_start, baseline, trial_start, trial_done),
        )


def _op_text(op: OperatingPoint | None, unit: str) -> str:
    if op is None:
        return "no result"
    if not op.feasible:
        return f"[yellow]misses the SLO[/] even at the lowest load (p99 {_ms(op.p99_s)} ms)"
    load = f"{unit} {op.load:g}" if unit == "concurrency" else f"{op.load:,.0f} {unit}"
    return f"{op.throughput:,.0f} infer/s at {load} (p50 {_ms(op.p50_s)}, p99 {_ms(op.p99_s)} ms)"


def _print_search_result(outcome: SearchResult, top: int = 5) -> None:
    table = Table(
        title=f"study {outcome.study_name}: p99 <= {format_duration(outcome.slo_p99_s)}, "
        f"{outcome.load_mode} load, {len(outcome.results)} completed trials",
        title_justify="left",
    )
    for column in ("#", "trial", "config", "load", "infer/s", "p50 ms", "p99 ms", "vs baseline"):
        table.add_column(column, justify="left" if column == "config" else "right")
    base = outcome.baseline
    if base is not None:
        table.add_row(
            "-", "base", "the model's own config.pbtxt", f"{base.load:g}", f"{base.throughput:,.0f}",
            _ms(base.p50_s), _ms(base.p99_s), "" if base.feasible else "misses SLO",
        )  # fmt: skip
    for rank, r in enumerate(outcome.results[:top], 1):
        op = r.operating_point
        assert op is not None
        gain = outcome.improvement(r)
        versus = f"{gain:+.0%}" if gain is not None else ""
        table.add_row(
            str(rank), str(r.number), format_knobs(r.knobs) if r.knobs else _point_text(r.params),
            f"{op.load:g}" if op.feasible else "-", f"{op.throughput:,.0f}", _ms(op.p50_s),
            _ms(op.p99_s), versus if op.feasible else "misses SLO",
        )  # fmt: skip
    console.print(table)
    if outcome.failed:
        console.print(
            f"{len(outcome.failed)} trial(s) failed (reasons in the results file)", highlight=False
        )
    if outcome.stop_reason:
        console.print(f"stopped before the trial budget: {outcome.stop_reason}", highlight=False)
    unit = "concurrency" if outcome.load_mode == "concurrency" else "req/s"
    if outcome.best and outcome.confirmed:
        confirmed = outcome.confirmed
        if confirmed.feasible:
            verdict = f"confirmed: {_op_text(confirmed, unit)}"
        else:
            lowest = min(level.load for level in confirmed.levels)
            verdict = f"[red]NOT confirmed[/]: p99 stayed over the SLO down to {unit} {lowest:g}"
        console.print(
            f"best (trial {outcome.best.number}) re-measured with longer windows, {verdict}",
            highlight=False,
        )
    if outcome.best:
        console.print(f"best config (trial {outcome.best.number}), config.pbtxt:", highlight=False)
        console.print(outcome.best.config_pbtxt, markup=False, highlight=False)
