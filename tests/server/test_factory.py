"""The launcher factory: one LaunchSettings decides which server a job runs on."""

import re
from pathlib import Path

import pytest

from tritontune.errors import InputError
from tritontune.server.docker import DockerSettings, DockerTritonLauncher
from tritontune.server.factory import (
    LaunchKind,
    LaunchSettings,
    check_server_args,
    make_launcher,
)
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


@pytest.mark.parametrize(
    ("arg", "message"),
    [
        ("--grpc-port=9000", "--server-arg --grpc-port=9000: --grpc-port is set by tritontune"),
        ("--model-repository=/models", "private working repository"),
        ("--model-control-mode=poll", "explicit model-control mode"),
        ("--backend-directory=/opt/b", "sets up the backends"),
        ("--log-file=/tmp/x", "use --server-log FILE"),
        ("--allow-metrics=false", "reads the server's metrics"),
        ("1", "--server-arg '1': expected one tritonserver flag, written --flag=value"),
        ("-v", "expected one tritonserver flag"),
    ],
)
def test_server_args_tritontune_owns_are_refused_with_the_reason(arg: str, message: str):
    with pytest.raises(InputError, match=re.escape(message)):
        LaunchSettings(server_args=(arg,))


def test_server_args_pass_through_to_local_and_docker(tmp_path: Path):
    args = ("--log-verbose=1", "--pinned-memory-pool-byte-size=0")
    assert check_server_args(args) == args
    local = make_launcher(
        LaunchSettings(server_args=args), tmp_path, log_path=tmp_path / "log", mounts=no_mounts
    )
    assert isinstance(local, LocalTritonLauncher) and local.extra_args == args
    docker = make_launcher(
        LaunchSettings(LaunchKind.DOCKER, server_args=args), tmp_path,
        log_path=tmp_path / "log", mounts=lambda: (),
    )  # fmt: skip
    assert isinstance(docker, DockerTritonLauncher) and docker.extra_args == args


def test_a_remote_server_takes_no_server_args_nor_log(tmp_path: Path):
    with pytest.raises(InputError, match="--server-arg: the server at --url is not tritontune's"):
        LaunchSettings(LaunchKind.REMOTE, url="h:8001", server_args=("--log-verbose=1",))
    with pytest.raises(InputError, match="--server-log: the server at --url is not tritontune's"):
        LaunchSettings(LaunchKind.REMOTE, url="h:8001", server_log=tmp_path / "log")
