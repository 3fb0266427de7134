"""The local launcher against the real bundled tritonserver."""

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from tests.conftest import tritonserver_processes
from tritontune.config.repository import WorkingRepository, load_model_source
from tritontune.errors import ModelLoadError, ServerDiedError, ServerError
from tritontune.server.client import TritonClient
from tritontune.server.local import LocalTritonLauncher
from tritontune.server.reaper import SHM_DIR
from tritontune.server.remote import RemoteTriton

pytestmark = [pytest.mark.integration, pytest.mark.functional]


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_start_load_stop_leaves_nothing(example_repository: Path, tmp_path: Path):
    work = WorkingRepository(tmp_path / "repo")
    launcher = LocalTritonLauncher(work.root)
    with launcher:
        info = launcher.info
        assert info.version == "2.51.0"
        assert info.grpc_url.startswith("127.0.0.1:")
        assert info.capabilities.gpu_count == 0
        assert "python" in info.capabilities.backends
        served = work.add(load_model_source(example_repository, "mlp"), info.capabilities.backends)
        client = launcher.client()
        client.load_model("mlp", served.served_config(served.source.base_config))
        assert client.is_model_ready("mlp")
        assert client.model_config("mlp").max_batch_size == 64
        assert any(n.startswith("nv_") for n in client.metrics())
        pid = launcher.pid
        prefix = launcher._shm_prefix
        assert list(SHM_DIR.glob(f"{prefix}*")), "the Python backend should have made shm regions"
        client.close()
    assert not pid_alive(pid)
    assert not list(SHM_DIR.glob(f"{prefix}*"))
    assert not tritonserver_processes(work.root)


def test_model_that_fails_to_load_shows_tritons_reason(repo_copy: Path, tmp_path: Path):
    (repo_copy / "mlp" / "1" / "model.onnx").write_bytes(b"this is not onnx")
    work = WorkingRepository(tmp_path / "repo")
    with LocalTritonLauncher(work.root) as launcher:
        served = work.add(load_model_source(repo_copy, "mlp"), launcher.info.capabilities.backends)
        client = launcher.client()
        with pytest.raises(ModelLoadError) as err:
            client.load_model("mlp", served.served_config(served.source.base_config))
        assert "model 'mlp' failed to load" in str(err.value)
        assert "INVALID_PROTOBUF" in str(err.value) or "Protobuf" in str(err.value)
        client.close()


def test_dead_server_is_detected_and_restarted(tmp_path: Path):
    launcher = LocalTritonLauncher(tmp_path)
    with launcher:
        launcher.check_alive()
        killed = launcher.pid
        os.kill(killed, signal.SIGKILL)
        time.sleep(0.5)
        with pytest.raises(ServerDiedError, match=r"tritonserver died \(exit code -9\)"):
            launcher.check_alive()
        info = launcher.restart()
        launcher.check_alive()
        assert launcher.pid != killed and pid_alive(launcher.pid) and not pid_alive(killed)
        client = TritonClient(info.grpc_url)  # the new server answers where restart() says
        assert client.is_ready()
        client.close()


def test_port_in_use_is_a_clear_error(tmp_path: Path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        launcher = LocalTritonLauncher(tmp_path, grpc_port=port)
        with pytest.raises(ServerError, match=f"--grpc-port {port} is already in use"):
            launcher.start()
        launcher.stop()


def test_remote_attach_needs_explicit_mode_and_a_server(tmp_path: Path):
    with pytest.raises(ServerError, match="no ready Triton server answers"):
        RemoteTriton("127.0.0.1:9").start()
    with LocalTritonLauncher(tmp_path) as local:
        remote = RemoteTriton(local.info.grpc_url, metrics_url=local.info.metrics_url)
        info = remote.start()
        assert info.launch == "remote" and info.version == "2.51.0"
        remote.stop()
        local.check_alive()  # attaching and detaching never stops somebody else's server
