"""Which server a job runs on: one :class:`LaunchSettings`, one factory.

The CLI turns ``--launch/--url/--image/--gpus/--shm-size/--tritonserver/--server-arg/--server-log``
and the client options (``--protocol``, TLS, ``--header``) into a :class:`LaunchSettings` once;
sessions get a launcher from :func:`make_launcher`, so no other module chooses between the
launchers (the seam httpx keeps for its transports).

``--server-arg`` passes flags through to the server tritontune starts, except the ones tritontune
sets itself and depends on (:data:`OWNED_FLAGS`): overriding those would break the launch in ways
that only show later (a port nobody listens on, a repository without the working configs, a mode
that refuses reloads), so they are refused up front with the reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tritontune.enums import TextEnum
from tritontune.errors import InputError
from tritontune.server.docker import DockerSettings, DockerTritonLauncher
from tritontune.server.endpoint import ClientSettings
from tritontune.server.launcher import TritonLauncher
from tritontune.server.local import LocalTritonLauncher
from tritontune.server.remote import RemoteTriton


class LaunchKind(TextEnum):
    """Where the server comes from: started locally, in a container, or somebody else's."""

    LOCAL = "local"
    DOCKER = "docker"
    REMOTE = "remote"

    @classmethod
    def parse(cls, text: str) -> LaunchKind:
        try:
            return cls(text)
        except ValueError:
            known = ", ".join(k.value for k in cls)
            raise InputError(f"--launch: {text!r} is not one of {known}") from None


_REPOSITORY = "tritontune serves a private working repository with the configs it measures"
_CONTROL = "tritontune switches configs by reloading models in explicit model-control mode"
_ENDPOINT = "tritontune picks free loopback ports and connects to them"

#: tritonserver flags tritontune sets itself, and why a user's value would break the launch.
OWNED_FLAGS: dict[str, str] = {
    "--model-repository": _REPOSITORY,
    "--model-store": _REPOSITORY,
    "--model-control-mode": _CONTROL,
    "--load-model": _CONTROL,
    "--repository-poll-secs": _CONTROL,
    "--strict-model-config": "tritontune loads every model with a complete config of its own",
    "--http-port": _ENDPOINT,
    "--grpc-port": _ENDPOINT,
    "--metrics-port": _ENDPOINT,
    "--http-address": _ENDPOINT,
    "--grpc-address": _ENDPOINT,
    "--metrics-address": _ENDPOINT,
    "--allow-http": "tritontune checks readiness over HTTP",
    "--allow-grpc": "tritontune loads models and sends requests over gRPC",
    "--allow-metrics": "tritontune reads the server's metrics (GPUs, utilization)",
    "--backend-directory": "tritontune sets up the backends of the server it launches",
    "--log-file": "tritontune keeps the server's log itself (use --server-log FILE)",
}


def check_server_args(args: tuple[str, ...]) -> tuple[str, ...]:
    """``args`` when each is one ``--flag`` or ``--flag=value`` tritontune does not own."""
    for arg in args:
        flag = arg.split("=", 1)[0]
        if not flag.startswith("--") or len(flag) < 3:
            raise InputError(
                f"--server-arg {arg!r}: expected one tritonserver flag, written --flag=value "
                "(e.g. --server-arg=--log-verbose=1)"
            )
        reason = OWNED_FLAGS.get(flag)
        if reason is not None:
            raise InputError(f"--server-arg {arg}: {flag} is set by tritontune ({reason})")
    return args


@dataclass(frozen=True)
class LaunchSettings:
    kind: LaunchKind = LaunchKind.LOCAL
    url: str | None = None
    """``[SCHEME://]HOST[:PORT]`` of a remote server (read by :func:`resolve_url`)."""
    client: ClientSettings = field(default_factory=ClientSettings)
    """How control and load requests talk to the server, whichever launcher."""
    tritonserver: Path | None = None
    """The binary a local launch starts (default: from PATH, else the bundled build)."""
    docker: DockerSettings = field(default_factory=DockerSettings)
    server_args: tuple[str, ...] = ()
    """Extra tritonserver flags (``--server-arg``), after tritontune's own, so they win."""
    server_log: Path | None = None
    """Where the server's log is written and kept (``--server-log``); None: a temporary file,
    kept only when something failed (see :class:`tritontune.serving.server.Server`)."""

    def __post_init__(self) -> None:
        check_server_args(self.server_args)
        if self.kind == LaunchKind.REMOTE and self.server_args:
            raise InputError(
                "--server-arg: the server at --url is not tritontune's to start; pass its flags "
                "where it is started"
            )
        if self.kind == LaunchKind.REMOTE and self.server_log is not None:
            raise InputError(
                "--server-log: the server at --url is not tritontune's, its log is where it runs"
            )


def make_launcher(
    settings: LaunchSettings,
    repository_root: Path,
    *,
    log_path: Path,
    mounts: Callable[[], tuple[Path, ...]],
    complete_configs: bool = False,
) -> TritonLauncher:
    """The launcher ``settings`` asks for, serving ``repository_root``. ``mounts`` (called only
    for a container) are the directories the repository's links lead into.

    ``complete_configs``: every model it will serve comes with its inputs and outputs declared,
    so a server tritontune starts runs with ``--disable-auto-complete-config``. Besides serving
    exactly the config tritontune sends, that makes each load of a Python-backend model ~1.2 s
    faster here (with auto-complete on, Triton first runs a separate stub process just to ask the
    model for its config, and that stub's start and stop took 1.27 s of a 1.47 s load)."""
    if settings.kind == LaunchKind.REMOTE:
        return RemoteTriton(settings.url or "", client=settings.client)  # which says --url is needed
    if settings.client.tls is not None:
        raise InputError(
            f"--ssl/--ssl-ca/--ssl-cert/--ssl-key are for --launch remote: the server --launch "
            f"{settings.kind} starts listens on 127.0.0.1 without TLS"
        )
    # tritontune's flags first, so that a user's --server-arg wins.
    own = ("--disable-auto-complete-config",) if complete_configs else ()
    server_args = (*own, *settings.server_args)
    launcher: TritonLauncher
    if settings.kind == LaunchKind.LOCAL:
        launcher = LocalTritonLauncher(
            repository_root,
            binary=settings.tritonserver,
            log_path=log_path,
            extra_args=server_args,
            graceful_stop=bool(settings.server_args),
        )
    else:
        launcher = DockerTritonLauncher(
            repository_root,
            settings.docker,
            mounts=mounts(),
            log_path=log_path,
            extra_args=server_args,
        )
    launcher.client_settings = settings.client
    return launcher
