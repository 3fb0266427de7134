"""The launch and client options, defined once for every command that runs a server.

``search``, ``profile`` and ``check`` each take the same fourteen options (where the server comes
from, and how requests reach it). Rather than repeat them in each signature, a command declares
one parameter ``server: LaunchSettings`` and is decorated with :func:`server_options`: the
decorator adds the options to the command's signature (so typer, ``--help``, the config file and
the environment variables see them as the command's own) and hands the command one parsed
:class:`~tritontune.server.factory.LaunchSettings`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer

from tritontune.cli._common import user_errors
from tritontune.server.docker import DEFAULT_IMAGE, DockerSettings
from tritontune.server.endpoint import client_settings
from tritontune.server.factory import LaunchKind, LaunchSettings

F = TypeVar("F", bound=Callable[..., Any])

#: The parameter a decorated command declares to receive the parsed options.
SETTINGS_PARAMETER = "server"


def _option(name: str, annotation: Any, default: Any) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


#: The options, in the order ``--help`` lists them.
OPTIONS: tuple[inspect.Parameter, ...] = (
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
                "e.g. 'Authorization=Bearer TOKEN'.",
            ),
        ],
        None,
    ),
)
NAMES = tuple(option.name for option in OPTIONS)


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


def server_options(command: F) -> F:
    """Give ``command`` the launch and client options (see the module docstring). A bad value
    (``--launch nowhere``, a certificate without its key) is the one-line error of any option."""
    signature = inspect.signature(command, eval_str=True)
    own = [p for p in signature.parameters.values() if p.name != SETTINGS_PARAMETER]

    @functools.wraps(command)
    def with_settings(*args: Any, **kwargs: Any) -> Any:
        values = {name: kwargs.pop(name) for name in NAMES}
        with user_errors(click.get_current_context(silent=True)):  # type: ignore[arg-type]
            kwargs[SETTINGS_PARAMETER] = launch_settings(values)
        return command(*args, **kwargs)

    with_settings.__signature__ = signature.replace(parameters=[*own, *OPTIONS])  # type: ignore[attr-defined]
    with_settings.__annotations__ = {
        **{p.name: p.annotation for p in own},
        **{p.name: p.annotation for p in OPTIONS},
    }
    return with_settings  # type: ignore[return-value]
