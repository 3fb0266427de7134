"""Which server a job runs on: one :class:`LaunchSettings`, one factory.

The CLI turns ``--launch/--url/--image/--gpus/--shm-size/--tritonserver`` and the client options
(``--protocol``, TLS, ``--header``) into a :class:`LaunchSettings` once; sessions get a launcher
from :func:`make_launcher`, so no other module chooses between the launchers (the seam httpx keeps
for its transports).
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


def make_launcher(
    settings: LaunchSettings,
    repository_root: Path,
    *,
    log_path: Path,
    mounts: Callable[[], tuple[Path, ...]],
) -> TritonLauncher:
    """The launcher ``settings`` asks for, serving ``repository_root``. ``mounts`` (called only
    for a container) are the directories the repository's links lead into."""
    if settings.kind == LaunchKind.REMOTE:
        return RemoteTriton(settings.url or "", client=settings.client)  # which says --url is needed
    if settings.client.tls is not None:
        raise InputError(
            f"--ssl/--ssl-ca/--ssl-cert/--ssl-key are for --launch remote: the server --launch "
            f"{settings.kind} starts listens on 127.0.0.1 without TLS"
        )
    launcher: TritonLauncher
    if settings.kind == LaunchKind.LOCAL:
        launcher = LocalTritonLauncher(repository_root, binary=settings.tritonserver, log_path=log_path)
    else:
        launcher = DockerTritonLauncher(
            repository_root, settings.docker, mounts=mounts(), log_path=log_path
        )
    launcher.client_settings = settings.client
    return launcher
