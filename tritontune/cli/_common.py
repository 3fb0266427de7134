"""What every command shares: the app, consoles, the error boundary, common options."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Annotated, Any, cast

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text
from typer.core import TyperGroup

from tritontune import __version__
from tritontune.cli._config import config_defaults
from tritontune.errors import InputError, ServerDiedError, TritonTuneError
from tritontune.precision.accuracy import (
    AccuracyFigures,
)
from tritontune.precision.convert import FP32
from tritontune.precision.prepare import PrecisionCheck
from tritontune.redaction import RedactingStream, guard_process_output, register_url
from tritontune.serving.session import TuningSession
from tritontune.study.figures import Interval
from tritontune.study.records import TrialResult
from tritontune.units import format_duration


class _ConfigGroup(TyperGroup):
    """The app's group. Precedence is flags > config file (``-f``) > environment > defaults;
    click alone would rank an option's environment variable above the default map the config
    file fills, so each option's ``envvar`` (declared where the option is, e.g.
    :data:`StorageOption`) is taken off the option here, when the app is built, and read by
    :func:`_read_config` as the layer under the file's values."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self.envvars: dict[str, dict[str, str | Sequence[str]]] = {}
        for name, command in self.commands.items():
            moved = self.envvars.setdefault(name, {})
            for param in command.params:
                if param.envvar and param.name:
                    moved[param.name] = param.envvar
                    param.envvar = None


#: ``ctx.meta`` key: by flag, where in the config file its value came from.
_CONFIG_SOURCES = "tritontune.config_sources"


def _read_config(ctx: typer.Context, path: Path | None) -> None:
    """Fill the command's default map: the environment's values, then the config file's."""
    group = ctx.parent.command if ctx.parent else None
    if not isinstance(group, _ConfigGroup) or ctx.info_name is None:
        return
    defaults: dict[str, Any] = {}
    for name, envvar in group.envvars.get(ctx.info_name, {}).items():
        names = [envvar] if isinstance(envvar, str) else envvar
        value = next((os.environ[n] for n in names if os.environ.get(n)), None)
        if value is not None:
            defaults[name] = value
    if path is not None:
        with user_errors():
            from_file = config_defaults(path, group.commands, ctx.info_name, ctx)
        defaults.update(from_file.values)
        ctx.meta[_CONFIG_SOURCES] = from_file.sources
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


#: ``-f/--config FILE``, which every command takes (its keys: :mod:`tritontune.cli._config`).
ConfigOption = Annotated[
    Path | None,
    typer.Option(
        "--config",
        "-f",
        is_eager=True,
        expose_value=False,
        callback=_read_config,
        dir_okay=False,
        help="YAML file of options: top-level keys for every command, a section per command "
        "(search:, profile:, ...); flags override it.",
    ),
]


app = typer.Typer(
    name="tritontune",
    cls=_ConfigGroup,
    help="Find the Triton model config with the highest throughput under a latency SLO.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
# Tables stay readable when output is piped or captured (rich would assume 80 columns).
# Everything printed goes through the redaction of the process's secrets (a storage URL's
# password, header values), whatever printed it. Text is not highlighted (no colored numbers,
# paths, ...) unless a print asks for it.
console = Console(
    file=cast(IO[str], RedactingStream(lambda: sys.stdout)),
    width=None if sys.stdout.isatty() else 160,
    highlight=False,
)
err_console = Console(
    file=cast(IO[str], RedactingStream(lambda: sys.stderr)),
    width=None if sys.stderr.isatty() else 160,
    highlight=False,
)


def _print_error(err: Exception) -> None:
    err_console.print(Text("error: ", style="bold red") + Text(str(err)), soft_wrap=True)


@contextmanager
def user_errors(ctx: typer.Context | None = None) -> Iterator[None]:
    """Turn tritontune's errors into one red line and a non-zero exit; Ctrl-C into exit 130.

    With the command's ``ctx``, an error about a flag whose value came from a config file
    (``--slo-p99: '50' has no unit``) is prefixed with the file and key it came from."""
    try:
        yield
    except ServerDiedError as err:
        _print_error(err)
        if err.log_tail:
            err_console.print("[dim]last tritonserver log lines:[/]", highlight=True)
            err_console.print(err.log_tail.rstrip(), style="dim", markup=False)
        raise typer.Exit(3) from None
    except TritonTuneError as err:
        _print_error(_from_config_file(err, ctx))
        raise typer.Exit(2) from None
    except KeyboardInterrupt:
        err_console.print("[yellow]interrupted: the server was stopped[/]", highlight=True)
        raise typer.Exit(130) from None
    except BrokenPipeError:  # output piped into `head` and closed: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())
        raise typer.Exit(141) from None


def _from_config_file(err: TritonTuneError, ctx: typer.Context | None) -> Exception:
    message = str(err)
    if ctx is None:
        return err
    for flag, (name, where) in ctx.meta.get(_CONFIG_SOURCES, {}).items():
        source = ctx.get_parameter_source(name)
        from_file = source is not None and source.name == "DEFAULT_MAP"  # not a flag given
        if from_file and message.startswith((f"{flag}:", f"{flag} ")):
            return TritonTuneError(f"{where}: {message}")
    return err


# Options shared by the commands that run a model on a server.
RepositoryOption = Annotated[
    Path, typer.Option("--model-repository", "-r", help="The model repository directory.")
]
ModelOption = Annotated[str, typer.Option("--model", "-m", help="Model name in the repository.")]
ComposingOption = Annotated[
    list[str] | None,
    typer.Option(
        "--composing",
        help="MODEL is a BLS model (Python code calling other models): a model it calls (repeat "
        "for each), served with it; a search tunes their configs with its own, for its end-to-end "
        "figure. An ensemble needs none: its steps say what it runs.",
    ),
]
BatchSizeOption = Annotated[int, typer.Option(help="Client batch size per request.", min=1)]
InputDataOption = Annotated[
    Path | None, typer.Option(help="Inputs in perf_analyzer's --input-data JSON format.")
]


def secret_storage(url: str | None) -> str | None:
    """Hide the storage URL's password from all this process prints (see tritontune.redaction)."""
    register_url(url)
    return url


StorageOption = Annotated[
    str,
    typer.Option(
        envvar="TRITONTUNE_STORAGE",
        help="Optuna storage URL (or $TRITONTUNE_STORAGE, which keeps credentials off the "
        "command line and out of process lists), e.g. postgresql://user:pw@host/db; its "
        "password is never printed or written.",
        callback=secret_storage,
    ),
]
CsvOption = Annotated[
    Path | None,
    typer.Option(
        "--csv",
        help="Write one row per measured load level as CSV (Model Analyzer's "
        "metrics-model-inference.csv columns, where they mean the same).",
    ),
]


def given(ctx: typer.Context, name: str) -> bool:
    """Whether parameter ``name`` was given: on the command line, in the config file or in the
    environment (anything but its default)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name != "DEFAULT"


def refuse_given(ctx: typer.Context, reasons: Mapping[str, str]) -> None:
    """Refuse, in one line with its reason, the first parameter of ``reasons`` that was given."""
    for name, reason in reasons.items():
        if given(ctx, name):
            param = next(p for p in ctx.command.params if p.name == name)
            flag = max(param.opts, key=len) if param.opts else name
            raise InputError(f"{flag}: {reason}")


def write_results(path: Path, results: Mapping[str, Any]) -> None:
    """A command's results JSON (``search``, ``search --workload``, ``profile``), and where it is."""
    path.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    console.print(f"results: {path}")


def _version(value: bool) -> None:
    if value:
        console.print(f"tritontune {__version__}", highlight=True)
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool | None,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = None,
) -> None:
    """tritontune: tune Triton model configs on a real server."""


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f}"


def interval_text(interval: Interval | None, *, percent: bool = False) -> str:
    """``7,130 [6,904-7,391]``, or for a gain ``+40% [+35%, +46%]``."""
    if interval is None:
        return ""
    if percent:
        return f"{interval.median:+.0%} [{interval.low:+.0%}, {interval.high:+.0%}]"
    return f"{interval.median:,.0f} [{interval.low:,.0f}-{interval.high:,.0f}]"


def accuracy_text(accuracy: dict | None) -> str:
    """``SCORES (classifier): top-1 100.0% [128 samples]`` for a precision variant, else ``""``."""
    return AccuracyFigures.from_dict(accuracy).summary() if accuracy else ""


def progress_bar(*columns: ProgressColumn) -> Progress:
    """A transient display on stderr: spinner, description, ``columns``, time elapsed."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        *columns,
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
    )


class TrialsDisplay:
    """The trial lines of a search's progress bar (single-class and workload alike): which trial
    runs, each one's outcome, the best so far and the ETA."""

    def __init__(self, bar: Progress, task: TaskID, unit: str) -> None:
        self.bar, self.task, self.unit = bar, task, unit

    def start(self, n: int, total: int | None, point: dict) -> None:
        self.bar.update(self.task, description=f"trial {n}/{total or '?'}")

    def done(
        self, result: TrialResult, best: TrialResult | None, eta: float | None, what: str, shown: str
    ) -> None:
        """``what`` the trial measured (escaped here) and ``shown``, its figure (rich markup)."""
        self.bar.advance(self.task)
        best_text = (
            f"best {best.value:,.0f} {self.unit} (trial {best.number})" if best else "no best yet"
        )
        eta_text = f", ETA {format_duration(eta)}" if eta is not None else ""
        self.bar.update(self.task, status=best_text + eta_text)
        outcome = f"[red]failed[/]: {escape(result.error)}" if result.error else shown
        err_console.print(f"trial {result.number}: {escape(what)} -> {outcome}")


@contextmanager
def kept_log_said(session: TuningSession) -> Iterator[TuningSession]:
    """``with session``, then say where its server log was kept, also when the block failed."""
    try:
        with session:
            yield session
    finally:
        print_kept_log(session.server.kept_log, session.server.kept_log_reason)


@contextmanager
def resumable(study: str, storage_name: str) -> Iterator[None]:
    """A Ctrl-C inside a search says where its study is and how to go on, then goes on up to
    :func:`user_errors` (which stops the server and exits 130)."""
    try:
        yield
    except KeyboardInterrupt:
        err_console.print(
            f"[yellow]interrupted:[/] study {study!r} is saved in {storage_name}; "
            "run the same command again to resume"
        )
        raise


def print_kept_log(path: Path | None, reason: str, *, what: str = "tritonserver log") -> None:
    """Say where the server's log was kept, and why (``--server-log`` or what failed)."""
    if path is not None:
        err_console.print(f"{what}: {escape(str(path))} ({escape(reason)})", soft_wrap=True)


def print_server(session: TuningSession) -> None:
    info = session.info
    for notice in session.server.notices():
        err_console.print(notice)
    err_console.print(
        f"tritonserver {info.version} ({info.launch}, {session.server.endpoint().url()}); "
        f"load: {session.load_settings.describe()}"
    )
    for source in session.served_via_python:
        err_console.print(
            f"[yellow]note:[/] this server has no {source.backend!r} backend: serving "
            f"{source.name}'s {source.model_file.name} through the Python backend "
            "(onnxruntime in model.py); configs keep your backend"
        )


def run() -> None:  # pragma: no cover - called by tritontune.__main__.main, the console entry
    guard_process_output()
    app(prog_name="tritontune")
    sys.exit(0)


def print_precisions(checks: Mapping[str, PrecisionCheck]) -> None:
    """Each precision variant checked before a search: accepted or left out, and why (keyed by
    precision; a pipeline's or a group's ``MODEL/PRECISION``)."""
    for name, check in checks.items():
        if check.precision == FP32:
            continue
        verdict = "[green]accepted[/]" if check.accepted else "[yellow]left out[/]"
        err_console.print(f"precision {name}: {verdict} ({escape(check.summary())})")
        for tried in check.tried:
            err_console.print(f"  [dim]passed over: {escape(tried)}[/]")
