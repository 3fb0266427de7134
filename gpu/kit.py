"""Build the GPU kit: everything a lent GPU host lacks to run tritontune, installable offline.

A lent GPU host (one H100 or H200, Python 3.12 with PyTorch, no network, no Docker, no
tritonserver) receives the repository's tracked files plus at most 64 MiB in all. The kit is what
it lacks, for Python 3.12 on x86-64 Linux:

- ``wheels/``: the tritontune wheel built from this checkout, and every package it needs that the
  host does not have (``gpu/host-packages.txt``), downloaded from PyPI for Python 3.12: optuna and
  its database layer, tritonclient 2.73 (pure Python: the perf_analyzer binaries, 40 MB unpacked
  in the 2.51 wheel, are not run there), plotly, jsonschema, ...; protobuf too, installed only
  where the host's is older than tritonclient's generated code needs.
- ``tritonserver-2.51-py3.12.tar.xz``: the bundled Triton 2.51 build of ``nvidia-pytriton`` 0.7.0
  (server, Python backend, response cache, the libraries they link) with the Python 3.12 backend
  stub only: the wheel's five other stubs, its libpython 3.13 and its own Python package are left
  out (55 MB as a wheel, 27 MB so packed).
- ``libpython3.12.so.1.0.xz``: a shared libpython 3.12 (stripped), which the backend stub links;
  used only where the host has none of its own.
- ``manifest.json``: what is in the kit, what was left out and why, and the sizes.

Left out on purpose: aiohttp and its needs (tritonclient's asyncio HTTP client, which only
``--protocol http`` load uses; the check talks gRPC). The blocking HTTP client (geventhttpclient,
gevent) stays: tritontune asks a server it launched what it is over HTTP.

``python gpu/kit.py`` writes ``gpu-kit/`` (git-ignored) and fails, printing the sizes, when the kit
and the tracked tree together exceed the limit (62 MiB: the device's 64 MiB less a margin).
"""

from __future__ import annotations

import argparse
import io
import json
import lzma
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
HOST_PACKAGES = Path(__file__).resolve().parent / "host-packages.txt"
PYTHON_VERSION = "3.12"
#: tritonclient's newest release: pure Python, and it allows numpy 2 (2.51 caps numpy < 2, which
#: the host's numpy 2.x fails).
TRITONCLIENT = "tritonclient==2.73.0"
PYTRITON = "nvidia-pytriton==0.7.0"
SERVER_ARCHIVE = f"tritonserver-2.51-py{PYTHON_VERSION}.tar.xz"
LIBPYTHON_ARCHIVE = f"libpython{PYTHON_VERSION}.so.1.0.xz"
LIMIT_MIB = 62.0
PLATFORMS = (
    "manylinux_2_35_x86_64",
    "manylinux_2_34_x86_64",
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux2010_x86_64",
    "manylinux1_x86_64",
)
#: Installed from the kit even where the host has them, when the host's version is older than the
#: kit's packages need (pip would otherwise take the host's).
FALLBACKS = frozenset({"protobuf"})
#: Packages the resolver brings that the kit leaves out, and why.
OMITTED = {
    "aiohttp": "tritonclient's asyncio HTTP client (--protocol http); the check talks gRPC",
    "aiohappyeyeballs": "aiohttp's",
    "aiosignal": "aiohttp's",
    "frozenlist": "aiohttp's",
    "multidict": "aiohttp's",
    "propcache": "aiohttp's",
    "yarl": "aiohttp's",
    "idna": "aiohttp's",
    # typer's needs in its newest releases: a host with typer has the ones its typer needs.
    "pydantic": "the host's typer's (the host has typer and what it needs)",
    "pydantic-core": "the host's typer's",
    "annotated-types": "the host's typer's",
    "typing-inspection": "the host's typer's",
    "annotated-doc": "the host's typer's",
}


def normalize(name: str) -> str:
    """A distribution name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class HostPackage:
    name: str
    in_cpu_emulation: bool


def host_packages(path: Path = HOST_PACKAGES) -> tuple[HostPackage, ...]:
    """The distributions a lent GPU host already has (``gpu/host-packages.txt``)."""
    found = []
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, _, rest = line.partition(" ")
        rest = rest.strip()
        if rest not in ("", "cpu-emulation: no"):
            raise SystemExit(f"{path}:{number}: expected NAME [cpu-emulation: no], got {raw!r}")
        found.append(HostPackage(normalize(name), rest == ""))
    return tuple(found)


@dataclass(frozen=True)
class KitWheel:
    """A wheel of the kit, as its METADATA says (the file name's spelling may differ)."""

    name: str
    version: str
    path: Path
    requires: tuple[str, ...]


def read_wheel(path: Path) -> KitWheel:
    with zipfile.ZipFile(path) as wheel:
        metadata = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        text = wheel.read(metadata).decode("utf-8")
    fields: dict[str, list[str]] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), []).append(value.strip())
    if "Name" not in fields or "Version" not in fields:
        raise SystemExit(f"{path.name}: no Name or Version in its METADATA")
    return KitWheel(
        name=normalize(fields["Name"][0]),
        version=fields["Version"][0],
        path=path,
        requires=tuple(fields.get("Requires-Dist", ())),
    )


def pip(*args: str) -> None:
    command = [sys.executable, "-m", "pip", "--disable-pip-version-check", *args]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed:\n{done.stdout}{done.stderr}")


def download_for_host(what: list[str], into: Path, *, deps: bool) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    pip(
        "download",
        "-q",
        "--only-binary=:all:",
        "--python-version",
        PYTHON_VERSION,
        "--implementation",
        "cp",
        *platforms,
        *([] if deps else ["--no-deps"]),
        "-d",
        str(into),
        *what,
    )


def build_wheels(out: Path, scratch: Path) -> tuple[list[dict], list[dict]]:
    """The tritontune wheel and what the host lacks of its needs; (kept, left out)."""
    own = scratch / "own"
    pip("wheel", "-q", str(REPO), "--no-deps", "-w", str(own))
    tritontune_wheel = next(own.glob("tritontune-*.whl"))
    resolved = scratch / "resolved"
    download_for_host([str(tritontune_wheel), TRITONCLIENT], resolved, deps=True)
    host = {p.name for p in host_packages()}
    wheels = out / "wheels"
    wheels.mkdir(parents=True)
    kept, left = [], []
    for wheel in sorted(resolved.glob("*.whl")):
        name = read_wheel(wheel).name
        size = wheel.stat().st_size
        if name in host and name not in FALLBACKS:
            left.append({"name": name, "bytes": size, "why": "the GPU host has it"})
        elif name in OMITTED:
            left.append({"name": name, "bytes": size, "why": OMITTED[name]})
        else:
            shutil.copy2(wheel, wheels / wheel.name)
            kept.append({"name": name, "file": wheel.name, "bytes": size})
    return kept, left


def server_member(name: str) -> bool:
    """Whether a file of the nvidia-pytriton wheel belongs in the kit's server archive."""
    if name.startswith("nvidia_pytriton.libs/"):
        return "/libpython3" not in name  # the 3.13 stub's libpython
    if not name.startswith("pytriton/tritonserver/"):
        return False  # pytriton's own Python package and its dist-info
    stubs = "pytriton/tritonserver/python_backend_stubs/"
    return not name.startswith(stubs) or name.startswith(f"{stubs}{PYTHON_VERSION}/")


def build_server(out: Path, scratch: Path, preset: int) -> dict:
    """The bundled tritonserver, its Python backend and the 3.12 stub, as one .tar.xz."""
    download_for_host([PYTRITON], scratch / "pytriton", deps=False)
    wheel = next((scratch / "pytriton").glob("nvidia_pytriton-*.whl"))
    archive = out / SERVER_ARCHIVE
    members = 0
    unpacked = 0
    with (
        zipfile.ZipFile(wheel) as source,
        lzma.open(archive, "wb", preset=preset) as packed,
        tarfile.open(fileobj=packed, mode="w") as tar,
    ):
        for entry in source.infolist():
            if entry.is_dir() or not server_member(entry.filename):
                continue
            data = source.read(entry)
            info = tarfile.TarInfo(entry.filename)
            info.size = len(data)
            info.mode = (entry.external_attr >> 16) & 0o777 or 0o644
            tar.addfile(info, io.BytesIO(data))
            members += 1
            unpacked += len(data)
    return {
        "file": archive.name,
        "from": wheel.name,
        "files": members,
        "unpacked_bytes": unpacked,
        "bytes": archive.stat().st_size,
    }


def find_libpython() -> Path | None:
    """A shared libpython 3.12 on this machine: pyenv's shared build (newest first), or the
    system's."""
    pyenv = sorted(Path.home().glob(f".pyenv/versions/{PYTHON_VERSION}.*/lib"), reverse=True)
    system = [Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/local/lib"), Path("/usr/lib")]
    for folder in [*pyenv, *system]:
        path = folder / f"libpython{PYTHON_VERSION}.so.1.0"
        if path.is_file():
            return path
    return None


def build_libpython(out: Path, scratch: Path, preset: int) -> dict | None:
    source = find_libpython()
    if source is None:
        return None
    stripped = scratch / source.name
    shutil.copy2(source, stripped)
    if shutil.which("strip"):
        subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)
    archive = out / LIBPYTHON_ARCHIVE
    with lzma.open(archive, "wb", preset=preset) as packed:
        packed.write(stripped.read_bytes())
    return {"file": archive.name, "from": str(source), "bytes": archive.stat().st_size}


def tracked_bytes() -> int:
    """What the repository's tracked files weigh (they travel to the host with the kit)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    return sum((REPO / name.decode()).stat().st_size for name in listed if name)


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "gpu-kit")
    parser.add_argument("--limit-mib", type=float, default=LIMIT_MIB)
    parser.add_argument(
        "--xz-preset", type=int, default=6, help="6: 27 MB in ~40 s here; 9: 25 MB in ~80 s"
    )
    args = parser.parse_args(argv)
    out: Path = args.out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="tritontune-kit-") as tmp:
        scratch = Path(tmp)
        print("kit: the tritontune wheel and what the host lacks of its needs (pip download)")
        kept, left = build_wheels(out, scratch)
        print(f"kit: the bundled tritonserver for Python {PYTHON_VERSION} (xz -{args.xz_preset})")
        server = build_server(out, scratch, args.xz_preset)
        libpython = build_libpython(out, scratch, args.xz_preset)
    manifest = {
        "python": PYTHON_VERSION,
        "wheels": kept,
        "left_out": left,
        "server": server,
        "libpython": libpython,
        "host_packages": [p.name for p in host_packages()],
        "fallbacks": sorted(FALLBACKS),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    kit = folder_bytes(out)
    tree = tracked_bytes()
    wheels = sum(w["bytes"] for w in kept)
    print(
        f"kit: {len(kept)} wheels {mib(wheels)}, server {mib(server['bytes'])}"
        + (f", libpython {mib(libpython['bytes'])}" if libpython else ", no libpython 3.12 here")
        + f"; kit {mib(kit)} + tracked tree {mib(tree)} = {mib(kit + tree)}"
        f" (limit {args.limit_mib:.0f} MiB)"
    )
    if kit + tree > args.limit_mib * 2**20:
        largest = sorted(kept, key=lambda w: -w["bytes"])[:8]
        print(
            f"kit: too large to travel: {mib(kit + tree)} > {args.limit_mib:.0f} MiB. Largest wheels: "
            + ", ".join(f"{w['name']} {mib(w['bytes'])}" for w in largest),
            file=sys.stderr,
        )
        return 1
    print(f"kit: written to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
