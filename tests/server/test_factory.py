"""The launcher factory: one LaunchSettings decides which server a job runs on."""

from pathlib import Path

import pytest

from tritontune.errors import InputError
from tritontune.server.docker import DockerSettings, DockerTritonLauncher
from tritontune.server.factory import LaunchKind, LaunchSettings, make_launcher
from tritontune.server.local import LocalTritonLauncher
from tritontune.server.remote import RemoteTriton


def no_mounts() -> tuple[Path, ...]:
    raise AssertionError("only a container needs the mounts")


def test_each_kind_gets_its_launcher(tmp_path: Path):
    local = make_launcher(LaunchSettings(), tmp_path, log_path=tmp_path / "log", mounts=no_mounts)
    assert isinstance(local, LocalTritonLauncher) and local.owns_server
    remote = make_launcher(
        LaunchSettings(LaunchKind.REMOTE, url="10.0.0.5:8001"), tmp_path,
        log_path=tmp_path / "log", mounts=no_mounts,
    )  # fmt: skip
    assert isinstance(remote, RemoteTriton) and not remote.owns_server
    docker = make_launcher(
        LaunchSettings(LaunchKind.DOCKER, docker=DockerSettings(image="mine:1")), tmp_path,
        log_path=tmp_path / "log", mounts=lambda: (tmp_path,),
    )  # fmt: skip
    assert isinstance(docker, DockerTritonLauncher) and docker.notices() == []


def test_bad_launch_options_are_one_line_errors(tmp_path: Path):
    with pytest.raises(InputError, match="--launch: 'cloud' is not one of local, docker, remote"):
        LaunchKind.parse("cloud")
    with pytest.raises(InputError, match="--url is required with --launch remote"):
        make_launcher(
            LaunchSettings(LaunchKind.REMOTE), tmp_path, log_path=tmp_path / "l", mounts=no_mounts
        )
