"""What machine a measurement was taken on.

Throughput figures only mean something on the hardware that produced them, so every study and
every tuning record carries a :class:`HostInfo`, and ``tritontune check`` warns when it re-measures
on a different machine.
"""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import psutil


@dataclass(frozen=True)
class HostInfo:
    """The CPU, GPUs and OS of the machine tritontune runs on."""

    cpu_model: str
    cpu_count: int
    gpus: tuple[str, ...] = field(default_factory=tuple)
    system: str = ""
    gpu_driver: str = ""
    """The NVIDIA driver version ("" without GPUs): figures move with it."""

    def to_dict(self) -> dict:
        data = asdict(self)
        data["gpus"] = list(self.gpus)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> HostInfo:
        return cls(
            cpu_model=str(data.get("cpu_model", "unknown")),
            cpu_count=int(data.get("cpu_count", 0)),
            gpus=tuple(data.get("gpus", ())),
            system=str(data.get("system", "")),
            gpu_driver=str(data.get("gpu_driver", "")),
        )

    def summary(self) -> str:
        """``2 x AMD EPYC 7B13, no GPU`` (one line, for tables and warnings)."""
        gpus = ", ".join(self.gpus) if self.gpus else "no GPU"
        return f"{self.cpu_count} x {self.cpu_model}, {gpus}"

    def differences(self, other: HostInfo) -> list[str]:
        """What differs from ``other`` in ways that change throughput (empty when comparable)."""
        found = []
        if self.cpu_model != other.cpu_model:
            found.append(f"CPU {self.cpu_model!r} vs {other.cpu_model!r}")
        if self.cpu_count != other.cpu_count:
            found.append(f"{self.cpu_count} vs {other.cpu_count} CPUs")
        if tuple(self.gpus) != tuple(other.gpus):
            found.append(f"GPUs {list(self.gpus) or 'none'} vs {list(other.gpus) or 'none'}")
        if self.gpu_driver != other.gpu_driver and self.gpus:
            found.append(f"GPU driver {self.gpu_driver or '?'} vs {other.gpu_driver or '?'}")
        return found


def _cpu_model() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                return " ".join(value.split())
    return platform.processor() or platform.machine() or "unknown"


def _gpus() -> tuple[tuple[str, ...], str]:
    """GPU names and the driver version from ``nvidia-smi`` where it exists (none on a CPU-only
    machine)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return (), ""
    try:
        out = subprocess.run(
            [smi, "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return (), ""
    rows = [[cell.strip() for cell in line.split(",")] for line in out.splitlines() if line.strip()]
    names = tuple(row[0] for row in rows)
    drivers = sorted({row[1] for row in rows if len(row) > 1})
    return names, ",".join(drivers)


def describe_host() -> HostInfo:
    """The machine this process runs on."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    gpus, driver = _gpus()
    return HostInfo(
        cpu_model=_cpu_model(),
        cpu_count=cpus or 1,
        gpus=gpus,
        system=f"{platform.system()} {platform.release()} {platform.machine()}",
        gpu_driver=driver,
    )


@dataclass(frozen=True)
class WorkerId:
    """One tritontune process: which machine (host name and boot) and which process on it.

    Kept with each trial a worker runs, so that a trial left running by a worker that is gone
    can be told from one still being measured: on the same machine and boot, by its process."""

    hostname: str
    boot_id: str
    pid: int
    started: float
    """The process's start time (a pid alone can be reused)."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WorkerId:
        return cls(str(data["hostname"]), str(data["boot_id"]), int(data["pid"]), float(data["started"]))

    def label(self) -> str:
        return f"{self.hostname}:{self.pid}"

    def is_gone(self) -> bool:
        """True only when this machine can tell for sure: the worker ran here, in this boot, and
        no process with its pid and start time exists any more."""
        here = this_worker()
        if (self.hostname, self.boot_id) != (here.hostname, here.boot_id) or not self.boot_id:
            return False
        try:
            return abs(psutil.Process(self.pid).create_time() - self.started) > 1.0
        except psutil.NoSuchProcess:
            return True
        except psutil.Error:
            return False


def _boot_id() -> str:
    path = Path("/proc/sys/kernel/random/boot_id")
    return path.read_text().strip() if path.is_file() else ""


def this_worker() -> WorkerId:
    """This process, as a :class:`WorkerId`."""
    return WorkerId(
        hostname=socket.gethostname(),
        boot_id=_boot_id(),
        pid=os.getpid(),
        started=psutil.Process().create_time(),
    )
