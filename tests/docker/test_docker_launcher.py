"""The Docker launcher on a real Docker engine, with a local tritonserver image (no registry).

CI brings the engine up (Debian's docker.io) and sets TRITONTUNE_REQUIRE_DOCKER=1, so a missing
engine fails there; elsewhere these tests are skipped with the reason.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.docker.image import ensure_image
from tests.measuring import FAST
from tritontune.cli import app
from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import ServerDiedError, ServerError
from tritontune.measure.loadgen import LoadSpec
from tritontune.server.docker import LABEL, PID_LABEL, DockerSettings, DockerTritonLauncher
from tritontune.server.factory import LaunchKind, LaunchSettings
from tritontune.serving.session import TuningSession

pytestmark = [pytest.mark.integration, pytest.mark.docker, pytest.mark.functional]
runner = CliRunner()


@pytest.fixture(scope="module")
def engine():
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
    except Exception as err:
        message = f"no Docker engine reachable ({err}); start dockerd (see .ci/run)"
        if os.environ.get("TRITONTUNE_REQUIRE_DOCKER"):
            pytest.fail(message)
        pytest.skip(message)
    return client


@pytest.fixture(scope="module")
def image(engine) -> str:
    return ensure_image(engine)


#: The tritontune processes the tests started (this one, and the CLIs it ran): only their
#: containers are looked at, whatever else runs on the machine.
STARTED = {str(os.getpid())}


def ours(engine) -> list:
    labelled = engine.containers.list(all=True, filters={"label": LABEL})
    return [c for c in labelled if c.labels.get(PID_LABEL) in STARTED]


@pytest.fixture(autouse=True)
def nothing_left_behind(request):
    yield
    if "engine" in request.fixturenames:
        engine = request.getfixturevalue("engine")
        deadline = time.monotonic() + 10
        while ours(engine) and time.monotonic() < deadline:
            time.sleep(0.5)  # the reaper's poll
        assert ours(engine) == [], "a tritontune container was left behind"


def test_a_session_measures_through_the_container(engine, image, example_repository: Path):
    source = load_model_source(example_repository, "mlp")
    settings = DockerSettings(image=image)
    with TuningSession(
        source, launch=LaunchSettings(LaunchKind.DOCKER, docker=settings), settings=FAST
    ) as session:
        info = session.info
        assert info.launch == "docker" and info.version == "2.51.0"
        assert "python" in info.capabilities.backends  # read from inside the image
        (container,) = ours(engine)
        assert container.labels[PID_LABEL] == str(os.getpid())
        mounts = {m["Destination"]: m["RW"] for m in container.attrs["Mounts"]}
        assert mounts and not any(mounts.values()), "every mount is read-only"
        session.load(Variant(max_queue_delay_us=1000))
        first = session.measure(LoadSpec.concurrency(4))
        session.load(Variant(max_queue_delay_us=1000, instance_count=2))  # a reload
        second = session.measure(LoadSpec.concurrency(4))
        assert ours(engine)[0].id == container.id, "switching configs kept the container"
        assert first.error_count == second.error_count == 0 and second.throughput > 0
        assert second.server.avg_batch_size > 1
    assert ours(engine) == []


def test_profile_cli_goes_through_the_container(engine, image, example_repository: Path):
    result = runner.invoke(
        app,
        ["profile", "-r", str(example_repository), "-m", "mlp", "--launch", "docker",
         "--image", image, "--concurrency", "2", "--window", "0.3s", "--warmup", "0.2s"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "(docker, grpc://127.0.0.1:" in result.output
    assert ours(engine) == []


def _profile_process(image: str, example_repository: Path) -> subprocess.Popen:
    command = [sys.executable, "-m", "tritontune", "profile", "-r", str(example_repository),
               "-m", "mlp", "--launch", "docker", "--image", image, "--concurrency", "1,2,4,8",
               "--window", "2s", "--max-windows", "20"]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    STARTED.add(str(process.pid))
    return process


def _wait_for_container(engine, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + 120
    while not any(c.status == "running" for c in ours(engine)):
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, "no container came up"
        time.sleep(0.5)
    time.sleep(3)  # measuring by now


def test_ctrl_c_removes_the_container(engine, image, example_repository: Path):
    process = _profile_process(image, example_repository)
    _wait_for_container(engine, process)
    process.send_signal(signal.SIGINT)
    output, _ = process.communicate(timeout=60)
    assert process.returncode == 130, output
    assert "interrupted" in output and "Traceback" not in output
    assert ours(engine) == []


def test_a_killed_tritontune_leaves_no_container(engine, image, example_repository: Path):
    process = _profile_process(image, example_repository)
    _wait_for_container(engine, process)
    process.kill()  # SIGKILL: tritontune gets no chance to clean up; its reaper does
    process.communicate(timeout=30)
    deadline = time.monotonic() + 15
    while ours(engine) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert ours(engine) == []


def test_a_stale_container_of_a_crashed_run_is_removed(engine, image, tmp_path: Path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    import socket

    STARTED.add(dead)

    stale = engine.containers.run(
        image, ["cat"], stdin_open=True, detach=True, name="tritontune-stale-test",
        labels={LABEL: "1", PID_LABEL: dead, "tritontune.host": socket.gethostname()},
    )  # fmt: skip
    repo = tmp_path / "repo"
    repo.mkdir()
    with DockerTritonLauncher(repo, DockerSettings(image=image)) as launcher:
        assert launcher.stale_removed == ["tritontune-stale-test"]
        assert stale.id not in {c.id for c in ours(engine) if c.name != launcher.container_name}


def test_clear_errors(engine, image, tmp_path: Path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    with pytest.raises(ServerError, match=r"is not on this host and tritontune does not pull: run "
                       r"`docker pull nvcr.io/nvidia/tritonserver:99.99-py3`"):  # fmt: skip
        DockerTritonLauncher(repo, DockerSettings(image="nvcr.io/nvidia/tritonserver:99.99-py3")).start()
    with pytest.raises(ServerError, match="the Docker engine has no GPU runtime"):
        DockerTritonLauncher(repo, DockerSettings(image=image, gpus="all")).start()
    with pytest.raises(ServerDiedError, match="exited during start-up") as err:
        DockerTritonLauncher(repo, DockerSettings(image=image, tritonserver="ls")).start()
    assert err.value.log_tail  # the container's own output comes with it
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path / 'no.sock'}")
    with pytest.raises(ServerError, match="no Docker engine reachable at unix://"):
        DockerTritonLauncher(repo, DockerSettings(image=image)).start()
