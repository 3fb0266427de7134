"""Groups of options shared by several commands, each defined once.

``search``, ``profile`` and ``check`` take the same fourteen launch and client options (where the
server comes from, and how requests reach it) and the same two load options (what sends the load);
``search`` and ``profile`` the same four precision options (how variants are judged and calibrated).
Rather than repeat them in each signature, a command declares one parameter for the parsed group and
is decorated with the group (:data:`server_options`: ``server: LaunchSettings``;
:data:`load_options`: ``load_generator: LoadSettings``; :data:`precision_options`:
``precision_checks: AccuracySettings``): the decorator adds the options to the command's signature
(so typer, ``--help``, the config file and the environment variables see them as the
command's own) and hands the command the group's settings, parsed.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from tritontune.cli._common import user_errors
from tritontune.measure.load_settings import LoadSettings, parse_load_settings
from tritontune.precision.accuracy import parse_output_kinds, parse_tolerance
from tritontune.precision.prepare import AccuracySettings
from tritontune.precision.recipe import parse_calibration
from tritontune.redaction import register_secret
from tritontune.server.docker import DEFAULT_IMAGE, DockerSettings
from tritontune.server.endpoint import client_settings
from tritontune.server.factory import LaunchKind, LaunchSettings

F = TypeVar("F", bound=Callable[..., Any])


def _option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


def secret_headers(texts: list[str] | None) -> list[str] | None:
    """Hide the ``--header`` values from all this process prints (``Bearer TOKEN``, and the
    credential after the scheme on its own)."""
    for text in texts or ():
        value = text.partition("=")[2].strip()
        register_secret(value)
        register_secret(value.partition(" ")[2].strip())
    return texts


#: The launch and client options, in the order ``--help`` lists them.
SERVER_OPTIONS: tuple[inspect.Parameter, ...] = (
    _option(
        "launch",
        Annotated[
            str,
            typer.Option(help="local (start tritonserver), docker (a container) or remote (--url)."),
        ],
        "local",
    ),
    _option(
        "image",
        Annotated[str, typer.Option(help="--launch docker: the tritonserver image (never pulled).")],
        DEFAULT_IMAGE,
    ),
    _option(
        "gpus",
        Annotated[str | None, typer.Option(help="--launch docker: GPUs for the container, all or 0,1.")],
        None,
    ),
    _option(
        "shm_size",
        Annotated[str, typer.Option(help="--launch docker: the container's /dev/shm.")],
        "1g",
    ),
    _option(
        "url",
        Annotated[
            str | None,
            typer.Option(
                envvar="TRITONTUNE_URL",
                help="--launch remote: the server, [grpc://|grpcs://|http://|https://]HOST[:PORT] "
                "(or $TRITONTUNE_URL). The scheme picks the protocol and TLS; default gRPC, port "
                "8001 (HTTP 8000; https/grpcs 443).",
            ),
        ],
        None,
    ),
    _option(
        "tritonserver",
        Annotated[Path | None, typer.Option(help="Path of the tritonserver binary to launch.")],
        None,
    ),
    _option(
        "server_arg",
        Annotated[
            list[str] | None,
            typer.Option(
                "--server-arg",
                help="A flag for the tritonserver tritontune launches, e.g. "
                "--server-arg=--log-verbose=1 (repeatable; not with --url; flags tritontune sets "
                "itself are refused).",
            ),
        ],
        None,
    ),
    _option(
        "server_log",
        Annotated[
            Path | None,
            typer.Option(
                "--server-log",
                help="Write the launched server's log here and keep it (appended). Without it the "
                "log is kept only when something failed.",
            ),
        ],
        None,
    ),
    _option(
        "protocol",
        Annotated[
            str | None,
            typer.Option(
                help="grpc or http: the protocol of control and load requests (default: the "
                "--url scheme's, else grpc)."
            ),
        ],
        None,
    ),
    _option(
        "ssl",
        Annotated[
            bool, typer.Option("--ssl", help="--launch remote: TLS to the server (gRPC or HTTPS).")
        ],
        False,
    ),
    _option(
        "ssl_ca",
        Annotated[
            Path | None,
            typer.Option(
                help="--launch remote: CA certificate (PEM) to verify the server with; implies "
                "--ssl (default: the system's CAs).",
                exists=True,
                dir_okay=False,
            ),
        ],
        None,
    ),
    _option(
        "ssl_cert",
        Annotated[
            Path | None,
            typer.Option(
                help="--launch remote: client certificate (PEM) for mutual TLS; needs --ssl-key.",
                exists=True,
                dir_okay=False,
            ),
        ],
        None,
    ),
    _option(
        "ssl_key",
        Annotated[
            Path | None,
            typer.Option(
                help="--launch remote: the client certificate's private key (PEM).",
                exists=True,
                dir_okay=False,
            ),
        ],
        None,
    ),
    _option(
        "header",
        Annotated[
            list[str] | None,
            typer.Option(
                "--header",
                help="KEY=VALUE header sent with every request, control and load (repeatable), "
                "e.g. 'Authorization=Bearer TOKEN'; its value is never printed.",
                callback=secret_headers,
            ),
        ],
        None,
    ),
)


def launch_settings(values: dict[str, Any]) -> LaunchSettings:
    """The options' values (by parameter name) as one :class:`LaunchSettings`."""
    return LaunchSettings(
        kind=LaunchKind.parse(values["launch"]),
        url=values["url"],
        tritonserver=values["tritonserver"],
        docker=DockerSettings(image=values["image"], gpus=values["gpus"], shm_size=values["shm_size"]),
        server_args=tuple(values["server_arg"] or ()),
        server_log=values["server_log"],
        client=client_settings(
            values["protocol"],
            ssl=values["ssl"],
            ca=values["ssl_ca"],
            cert=values["ssl_cert"],
            key=values["ssl_key"],
            headers=values["header"],
        ),
    )


#: The precision options: how precision variants are judged and calibrated.
PRECISION_OPTIONS: tuple[inspect.Parameter, ...] = (
    _option(
        "accuracy",
        Annotated[
            str | None,
            typer.Option(
                help="Accuracy bounds for precision variants against FP32, applied to every "
                "output, e.g. cosine=0.995,cosine_p5=0.98,top1=0.98,kl=0.01,rel=0.05,max_abs=0.1 "
                "(defaults depend on the precision and each output's kind)."
            ),
        ],
        None,
    ),
    _option(
        "accuracy_kind",
        Annotated[
            str | None,
            typer.Option(
                help="What the outputs are, for the accuracy gate: embedding, classifier or "
                "regression (every output), or per output, e.g. logits=classifier,pooled=embedding "
                "(default: read from the graph and the output names)."
            ),
        ],
        None,
    ),
    _option(
        "calibration",
        Annotated[
            str,
            typer.Option(
                help="int8_static calibration: auto (minmax, then percentile, then entropy, until "
                "one passes the accuracy gate), minmax, percentile or entropy."
            ),
        ],
        "auto",
    ),
    _option(
        "calibration_data",
        Annotated[
            Path | None,
            typer.Option(
                help="Real inputs to calibrate int8_static on (perf_analyzer's --input-data "
                "format); then every --input-data sample judges accuracy. Default: half of "
                "--input-data.",
                exists=True,
                dir_okay=False,
            ),
        ],
        None,
    ),
)


def accuracy_settings(values: dict[str, Any]) -> AccuracySettings:
    """The precision options' values (by parameter name) as one :class:`AccuracySettings`."""
    kinds = values["accuracy_kind"]
    return AccuracySettings(
        tolerance=parse_tolerance(values["accuracy"]) if values["accuracy"] else {},
        output_kinds=parse_output_kinds(kinds) if kinds else {},
        calibrations=parse_calibration(values["calibration"]),
        calibration_data=values["calibration_data"],
    )


def option_group(
    options: tuple[inspect.Parameter, ...], parameter: str, parse: Callable[[dict[str, Any]], Any]
) -> Callable[[F], F]:
    """A decorator that adds ``options`` to a command and hands it ``parse(values)`` as its
    parameter ``parameter``. A bad value is the one-line error of any option."""
    names = tuple(option.name for option in options)

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != parameter]

        @functools.wraps(command)
        def with_group(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            # the command's own context: an error about a value from a config file names it
            context = kwargs.get("ctx")
            with user_errors(context):
                kwargs[parameter] = parse(values)
            return command(*args, **kwargs)

        with_group.__signature__ = signature.replace(parameters=[*own, *options])  # type: ignore[attr-defined]
        with_group.__annotations__ = {
            **{p.name: p.annotation for p in own},
            **{p.name: p.annotation for p in options},
        }
        return with_group  # type: ignore[return-value]

    return decorate


#: The load options: what generates the load of every measurement.
LOAD_OPTIONS: tuple[inspect.Parameter, ...] = (
    _option(
        "load_engine",
        Annotated[
            str,
            typer.Option(
                help="What sends the requests: asyncio (tritontune's own generator) or "
                "perf_analyzer (NVIDIA's, one run per load level; single-class loads, gRPC).",
            ),
        ],
        "asyncio",
    ),
    _option(
        "load_processes",
        Annotated[
            str,
            typer.Option(
                help="Load processes for the asyncio engine: a count, or auto (more while a "
                "level is client-bound, up to the cores the server leaves).",
            ),
        ],
        "1",
    ),
)


def load_settings(values: dict[str, Any]) -> LoadSettings:
    """The load options' values as one :class:`LoadSettings`."""
    return parse_load_settings(values["load_engine"], values["load_processes"])


#: ``server: LaunchSettings`` from the launch and client options.
server_options = option_group(SERVER_OPTIONS, "server", launch_settings)
#: ``load_generator: LoadSettings`` from the load options.
load_options = option_group(LOAD_OPTIONS, "load_generator", load_settings)
#: ``precision_checks: AccuracySettings`` from the precision options.
precision_options = option_group(PRECISION_OPTIONS, "precision_checks", accuracy_settings)
