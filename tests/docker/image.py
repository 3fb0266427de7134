"""A local Docker image with a working tritonserver, for testing the Docker launcher offline.

No registry is reachable here, so NVIDIA's image can't be pulled. This builds a stand-in from
what the machine has, laid out like the NGC image: the tritonserver 2.51 build of the
``nvidia-pytriton`` wheel in ``/opt/tritonserver`` (binary, Python backend with its stub, response
cache), Debian's Python 3.11 (the stub embeds libpython) with numpy and onnxruntime (for ONNX
models served through the Python backend), ``ls`` and ``sh``, and every shared library these
need, found with ``ldd``. It is imported with ``docker import`` under a tag made from the hash of
its inputs, so it is built once per set of inputs and reused after.

    python tests/docker/image.py        # build (or find) the image, print its tag
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

REPOSITORY = "tritontune-test/tritonserver"
#: Python packages the image's Python needs (numpy and onnxruntime, and what they import).
PACKAGES = ("numpy", "onnxruntime")
#: Bump when the recipe changes, so cached images are rebuilt.
RECIPE = "5"
EXTRA_BINARIES = (
    "/bin/ls",
    "/bin/sh",
    "/bin/bash",
    "/bin/cat",
)  # the Python backend starts its stub with bash


def _pytriton_root() -> Path:
    import pytriton

    return Path(next(iter(pytriton.__path__)))


def _package_files(name: str) -> list[Path]:
    """Every installed file of distribution ``name`` and of what it requires (no extras)."""
    seen: set[str] = set()
    files: list[Path] = []
    todo = [name]
    while todo:
        dist_name = todo.pop()
        key = re.sub(r"[-_.]+", "-", dist_name).lower()
        if key in seen:
            continue
        seen.add(key)
        try:
            dist = metadata.distribution(dist_name)
        except metadata.PackageNotFoundError:
            continue
        files += [Path(dist.locate_file(f)) for f in dist.files or []]
        for requirement in dist.requires or []:
            if "extra ==" in requirement:
                continue
            todo.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0])
    return [f for f in files if f.is_file() and "__pycache__" not in f.parts]


def _ldd(paths: list[Path], library_path: str) -> set[Path]:
    """The shared libraries ``paths`` load (resolved), as the dynamic loader finds them."""
    found: set[Path] = set()
    env = {**os.environ, "LD_LIBRARY_PATH": library_path}
    for path in paths:
        out = subprocess.run(["ldd", str(path)], capture_output=True, text=True, env=env).stdout
        for line in out.splitlines():
            match = re.search(r"(/\S+)", line.split("=>")[-1])
            if match and "not found" not in line:
                found.add(Path(match.group(1)))
    return found


def _inputs() -> dict[str, str]:
    return {
        "recipe": RECIPE,
        "pytriton": metadata.version("nvidia-pytriton"),
        "python": sys.version.split()[0],
        **{name: metadata.version(name) for name in PACKAGES},
    }


def image_tag() -> str:
    digest = hashlib.sha256(repr(sorted(_inputs().items())).encode()).hexdigest()[:12]
    return f"{REPOSITORY}:{digest}"


class _Rootfs:
    """A tarball being filled, each path once (Debian's merged /usr gives files several names)."""

    def __init__(self, tar: tarfile.TarFile) -> None:
        self.tar = tar
        self.names: set[str] = set()

    def file(self, source: Path, target: str) -> None:
        name = target.lstrip("/")
        if name not in self.names:
            self.names.add(name)
            self.tar.add(str(source.resolve()), arcname=name, recursive=False)

    def link(self, name: str, points_to: str) -> None:
        name = name.lstrip("/")
        if name not in self.names:
            self.names.add(name)
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, points_to
            self.tar.addfile(info)

    def host_path(self, path: Path) -> None:
        """A host file at its real path, and a link from the name it was found by."""
        real = path.resolve()
        self.file(real, str(real))
        named = path.parent.resolve() / path.name
        if named != real:
            self.link(str(named), str(real))

    def tree(self, source: Path, target: str) -> None:
        for path in sorted(source.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                self.file(path, f"{target}/{path.relative_to(source)}")

    def directory(self, name: str, mode: int = 0o755) -> None:
        info = tarfile.TarInfo(name.lstrip("/"))
        info.type, info.mode = tarfile.DIRTYPE, mode
        self.names.add(info.name)
        self.tar.addfile(info)

    def text(self, name: str, text: str) -> None:
        data = text.encode()
        info = tarfile.TarInfo(name.lstrip("/"))
        info.size, info.mode = len(data), 0o644
        self.names.add(info.name)
        self.tar.addfile(info, io.BytesIO(data))


def build_rootfs(out: Path) -> Path:
    """Write the image's root filesystem as a tarball."""
    root = _pytriton_root()
    server = root / "tritonserver"
    bundled_libs = root.parent / "nvidia_pytriton.libs"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = server / "python_backend_stubs" / version / "triton_python_backend_stub"
    site = Path(sysconfig.get_paths()["purelib"])
    packages = [f for name in PACKAGES for f in _package_files(name)]
    binaries = [server / "bin" / "tritonserver", stub, *map(Path, EXTRA_BINARIES)]
    binaries += list((server / "backends" / "python").glob("*.so"))
    binaries += list((server / "caches").rglob("*.so"))
    binaries += [f for f in packages if f.suffix == ".so" or ".so." in f.name]
    binaries += [Path(f"/usr/bin/python{version}")]
    libraries = _ldd(binaries, str(bundled_libs))
    stdlib = Path(f"/usr/lib/python{version}")
    if not stdlib.is_dir():
        raise SystemExit(f"{stdlib} missing: apt-get install libpython{version}-stdlib")

    tarball = out / "rootfs.tar"
    with tarfile.open(tarball, "w") as tar:
        fs = _Rootfs(tar)
        for name in ("/tmp", "/dev", "/proc", "/sys", "/etc", "/opt", "/usr/local/lib"):
            fs.directory(name, 0o1777 if name == "/tmp" else 0o755)
        for top in ("/bin", "/sbin", "/lib", "/lib64"):  # Debian's merged /usr
            if Path(top).is_symlink():
                fs.link(top, os.readlink(top))
        fs.text("/etc/passwd", "root:x:0:0:root:/root:/bin/sh\n")
        fs.text("/etc/group", "root:x:0:\n")
        fs.file(server / "bin" / "tritonserver", "/opt/tritonserver/bin/tritonserver")
        fs.tree(server / "backends" / "python", "/opt/tritonserver/backends/python")
        fs.file(stub, "/opt/tritonserver/backends/python/triton_python_backend_stub")
        fs.tree(server / "caches", "/opt/tritonserver/caches")
        fs.tree(bundled_libs, "/opt/tritonserver/lib")
        for library in sorted(libraries):
            if not library.is_relative_to(bundled_libs):
                fs.host_path(library)
        for binary in EXTRA_BINARIES:
            fs.host_path(Path(binary))
        fs.host_path(Path(f"/usr/bin/python{version}"))
        fs.link("/usr/bin/python3", f"python{version}")
        fs.tree(stdlib, str(stdlib))
        dist = f"/usr/local/lib/python{version}/dist-packages"
        for path in packages:
            fs.file(path, f"{dist}/{path.relative_to(site)}")
    return tarball


def ensure_image(client=None) -> str:
    """The image's tag, building and importing it first if this engine doesn't have it."""
    import docker

    client = client or docker.from_env(timeout=600)
    tag = image_tag()
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    workdir = Path(tempfile.mkdtemp(prefix="tritontune-image-"))
    try:
        tarball = build_rootfs(workdir)
        repository, _, version = tag.partition(":")
        client.api.import_image(
            src=str(tarball),
            repository=repository,
            tag=version,
            changes=[
                "ENV PATH=/opt/tritonserver/bin:/usr/local/bin:/usr/bin:/bin",
                "ENV LD_LIBRARY_PATH=/opt/tritonserver/lib",
                'CMD ["tritonserver", "--help"]',
            ],
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    client.images.get(tag)  # raises if the import did not produce it
    return tag


if __name__ == "__main__":
    print(ensure_image())
