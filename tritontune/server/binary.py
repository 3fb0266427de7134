"""Finding a ``tritonserver`` binary and preparing what the bundled one needs to run.

Order: an explicit path, then ``tritonserver`` on PATH, then the build that ships inside the PyPI
wheel ``nvidia-pytriton``. The bundled build needs a private backend directory with the Python
backend stub for the running interpreter, and an environment that lets the stub find its libraries
and this virtual environment's packages (see shared/triton-local.md).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from tritontune.errors import ServerError

INSTALL_HINT = (
    "install the bundled server with `pip install 'tritontune[local]'` (nvidia-pytriton), "
    "put tritonserver on PATH, or pass --tritonserver PATH"
)


@dataclass(frozen=True)
class TritonBinary:
    """A tritonserver executable and how to run it."""

    path: Path
    bundled: bool
    """True for the build inside nvidia-pytriton, which needs :func:`prepare_bundled_backends`."""
    backends_dir: Path | None = None
    caches_dir: Path | None = None
    library_dirs: tuple[Path, ...] = field(default_factory=tuple)

    def backends(self) -> frozenset[str]:
        """Backend names available to this binary (empty when unknown)."""
        if self.backends_dir and self.backends_dir.is_dir():
            return frozenset(p.name for p in self.backends_dir.iterdir() if p.is_dir())
        return frozenset()


def _bundled_root() -> Path | None:
    spec = importlib.util.find_spec("pytriton")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations)))
    return root if (root / "tritonserver" / "bin" / "tritonserver").is_file() else None


def find_tritonserver(explicit: Path | str | None = None) -> TritonBinary:
    """Locate tritonserver; raise a :class:`ServerError` that says how to get one."""
    if explicit:
        path = Path(explicit)
        if not path.is_file() or not os.access(path, os.X_OK):
            raise ServerError(f"--tritonserver {path}: not an executable file")
        return _binary_at(path)
    on_path = shutil.which("tritonserver")
    if on_path:
        return _binary_at(Path(on_path))
    root = _bundled_root()
    if root is None:
        raise ServerError(f"tritonserver not found: {INSTALL_HINT}")
    server = root / "tritonserver"
    return TritonBinary(
        path=server / "bin" / "tritonserver",
        bundled=True,
        backends_dir=server / "backends",
        caches_dir=server / "caches",
        library_dirs=(root.parent / "nvidia_pytriton.libs",),
    )


def _binary_at(path: Path) -> TritonBinary:
    """A tritonserver installed the NGC way: backends and caches beside ``bin/``."""
    home = path.resolve().parent.parent
    bundled = _bundled_root()
    if bundled is not None and home == (bundled / "tritonserver"):
        return TritonBinary(
            path=path,
            bundled=True,
            backends_dir=home / "backends",
            caches_dir=home / "caches",
            library_dirs=(bundled.parent / "nvidia_pytriton.libs",),
        )
    backends = home / "backends"
    caches = home / "caches"
    return TritonBinary(
        path=path,
        bundled=False,
        backends_dir=backends if backends.is_dir() else None,
        caches_dir=caches if caches.is_dir() else None,
    )


def prepare_bundled_backends(binary: TritonBinary, into: Path) -> Path:
    """Copy the bundled Python backend into ``into`` with the stub for this interpreter.

    The wheel ships one stub per Python version; the backend looks for
    ``triton_python_backend_stub`` beside ``libtriton_python.so``.
    """
    assert binary.backends_dir is not None
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = binary.backends_dir.parent / "python_backend_stubs" / version / "triton_python_backend_stub"
    if not stub.is_file():
        raise ServerError(
            f"the bundled tritonserver has no Python backend stub for Python {version} "
            f"(looked for {stub})"
        )
    python_dir = into / "python"
    shutil.copytree(binary.backends_dir / "python", python_dir, dirs_exist_ok=True)
    shutil.copy2(stub, python_dir / "triton_python_backend_stub")
    return into


def server_environment(binary: TritonBinary) -> dict[str, str]:
    """The environment for tritonserver: bundled libraries, and this venv's ``python3`` first.

    The Python backend stub finds numpy, onnxruntime, ... through the ``python3`` on PATH.
    """
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    extra = [str(d) for d in binary.library_dirs]
    # The stub embeds libpython3.X: Debian's is on the loader's path, but an interpreter built
    # with a shared libpython elsewhere (pyenv, a custom prefix) has it in its own LIBDIR.
    libdir = sysconfig.get_config_var("LIBDIR")
    if sysconfig.get_config_var("Py_ENABLE_SHARED") and libdir and Path(libdir).is_dir():
        extra.append(str(libdir))
    if extra:
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            extra + [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        )
    return env
