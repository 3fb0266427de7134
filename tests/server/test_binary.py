import os
from pathlib import Path

import pytest

from tritontune.errors import ServerError
from tritontune.server.binary import find_tritonserver, prepare_bundled_backends, server_environment


def test_finds_the_bundled_server():
    binary = find_tritonserver()
    assert binary.path.is_file() and os.access(binary.path, os.X_OK)
    assert "python" in binary.backends()


def test_explicit_path_must_be_executable(tmp_path: Path):
    with pytest.raises(ServerError, match="not an executable file"):
        find_tritonserver(tmp_path / "tritonserver")


def test_bundled_backend_dir_has_the_stub(tmp_path: Path):
    binary = find_tritonserver()
    if not binary.bundled:
        pytest.skip("a tritonserver on PATH is used instead of the bundled one")
    backends = prepare_bundled_backends(binary, tmp_path)
    assert (backends / "python" / "libtriton_python.so").is_file()
    assert (backends / "python" / "triton_python_backend_stub").is_file()
    env = server_environment(binary)
    assert env["LD_LIBRARY_PATH"].startswith(str(binary.library_dirs[0]))
