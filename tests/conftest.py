"""Shared fixtures: the bundled example model, and copies of it that tests may change."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_REPOSITORY = ROOT / "examples" / "model_repository"


@pytest.fixture(scope="session")
def example_repository() -> Path:
    """The bundled example repository (read-only: tests must not change it)."""
    assert (EXAMPLE_REPOSITORY / "mlp" / "1" / "model.onnx").is_file(), (
        "run `python examples/make_example_model.py` first"
    )
    return EXAMPLE_REPOSITORY


@pytest.fixture
def repo_copy(tmp_path: Path, example_repository: Path) -> Path:
    """A private copy of the example repository that a test may modify."""
    target = tmp_path / "model_repository"
    shutil.copytree(example_repository, target)
    return target


def tritonserver_processes() -> list[str]:
    """Command lines of running tritonserver / Python backend stub processes."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [
        line
        for line in out.splitlines()
        if ("bin/tritonserver" in line or "triton_python_backend_stub" in line) and "ps -eo" not in line
    ]
