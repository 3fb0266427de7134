"""What else the machine did during a measurement window: interference detection.

A shared machine's other tenants (a build, a backup, another benchmark) take CPU from the server
and from the load generator, and the figure of that window is then the machine's, not the
config's; neither perf_analyzer nor Model Analyzer looks. At every window edge an
:class:`InterferenceProbe` reads, for the span since the previous edge, the CPU of every process
that is neither tritontune's (this process, its children, its load processes) nor a Triton server,
the CPU the hypervisor took (steal), and how busy the load generator's busiest event-loop thread
was. A window is *disturbed* when others used :data:`OTHER_CORES_LIMIT` cores or more or steal
reached :data:`STEAL_CORES_LIMIT`: it does not count towards stability and more windows are taken
(``MeasureSettings.extra_windows``). A busy load generator is reported, not re-measured: measuring
again would not give it more CPU. See ``docs/concepts/measurement.md``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import psutil

from tritontune.measure.client_cost import LoadThread

#: Other processes using this many cores (averaged over a window) disturb it.
OTHER_CORES_LIMIT = 0.25
#: The hypervisor taking this many cores disturbs a window.
STEAL_CORES_LIMIT = 0.10
#: The load generator's thread busy this share of a window: it ran out of CPU.
LOADGEN_BUSY_LIMIT = 0.90
#: Processes that are a Triton server however it was launched (a container's show on the host).
SERVER_PROCESS_NAMES = ("tritonserver", "triton_python_backend_stub")
#: The same as Linux names them in ``/proc/PID/stat``: cut to 15 characters
#: (``triton_python_b``), which :func:`process_table` reads.
_SERVER_COMMS = tuple(name[:15] for name in SERVER_PROCESS_NAMES)


@dataclass(frozen=True)
class WindowLoad:
    """What the machine did besides the measurement during one window."""

    wall_s: float
    other_cores: float
    steal_cores: float
    loadgen_busy: float
    culprit: str | None = None
    """The other process that used the most CPU, as ``name (pid N, 0.9 cores)``."""

    @property
    def disturbed(self) -> bool:
        return self.other_cores >= OTHER_CORES_LIMIT or self.steal_cores >= STEAL_CORES_LIMIT

    @property
    def loadgen_saturated(self) -> bool:
        return self.loadgen_busy >= LOADGEN_BUSY_LIMIT


@dataclass(frozen=True)
class Interference:
    """A measurement's interference, over all its windows (maxima) and its reported ones."""

    windows: int
    disturbed_windows: int
    """Windows taken while the machine was disturbed (not counted as stable; more were taken)."""
    result_disturbed: bool
    """The reported (merged) windows include a disturbed one: the figure is not clean."""
    other_cores: float
    steal_cores: float
    loadgen_busy: float
    culprit: str | None = None

    @classmethod
    def of(cls, windows: list[WindowLoad], reported: list[WindowLoad]) -> Interference:
        worst = max(windows, key=lambda w: w.other_cores, default=None)
        return cls(
            windows=len(windows),
            disturbed_windows=sum(w.disturbed for w in windows),
            result_disturbed=any(w.disturbed for w in reported),
            other_cores=max((w.other_cores for w in windows), default=0.0),
            steal_cores=max((w.steal_cores for w in windows), default=0.0),
            loadgen_busy=max((w.loadgen_busy for w in reported), default=0.0),
            culprit=worst.culprit if worst is not None and worst.disturbed else None,
        )

    @property
    def loadgen_saturated(self) -> bool:
        return self.loadgen_busy >= LOADGEN_BUSY_LIMIT

    def describe(self) -> str | None:
        """One line for the user, or None when nothing worth saying happened."""
        parts = []
        if self.disturbed_windows:
            what = []
            if self.other_cores >= OTHER_CORES_LIMIT:
                who = f" ({self.culprit})" if self.culprit else ""
                what.append(f"other processes used up to {self.other_cores:.1f} cores{who}")
            if self.steal_cores >= STEAL_CORES_LIMIT:
                what.append(f"the hypervisor stole up to {self.steal_cores:.1f} cores")
            verdict = (
                "the reported figure is NOT clean"
                if self.result_disturbed
                else "re-measured until clean"
            )
            parts.append(
                f"{self.disturbed_windows} of {self.windows} windows disturbed: "
                f"{'; '.join(what)}; {verdict}"
            )
        if self.loadgen_saturated:
            parts.append(
                f"the load generator ran out of CPU (busy {self.loadgen_busy:.0%} of a window): "
                "the figure is partly the client's"
            )
        return "; ".join(parts) or None

    def to_dict(self) -> dict:
        return {
            "windows": self.windows,
            "disturbed_windows": self.disturbed_windows,
            "result_disturbed": self.result_disturbed,
            "other_cores": round(self.other_cores, 3),
            "steal_cores": round(self.steal_cores, 3),
            "loadgen_busy": round(self.loadgen_busy, 3),
            "culprit": self.culprit,
            "summary": self.describe(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> Interference:
        return cls(
            windows=int(data["windows"]),
            disturbed_windows=int(data["disturbed_windows"]),
            result_disturbed=bool(data["result_disturbed"]),
            other_cores=float(data["other_cores"]),
            steal_cores=float(data["steal_cores"]),
            loadgen_busy=float(data["loadgen_busy"]),
            culprit=data.get("culprit"),
        )


class InterferenceProbe:
    """Reads the machine's CPU accounting at window edges; :meth:`sample` gives the span since
    the previous call. ``loadgen`` are the threads that run the load generator's event loops
    (this process's, or its load worker processes'): their processes are ours, and their CPU
    use tells whether the client kept up."""

    def __init__(self, loadgen: Sequence[LoadThread]) -> None:
        self._me = psutil.Process()
        self._loadgen_threads = list(loadgen)
        self._loadgen_processes: dict[int, psutil.Process] = {}
        for thread in self._loadgen_threads:
            try:
                self._loadgen_processes.setdefault(thread.pid, psutil.Process(thread.pid))
            except psutil.Error:
                continue
        self._at = time.monotonic()
        self._steal = _steal_seconds()
        self._loadgen = self._loadgen_seconds()
        self._cpu = self.others()

    def sample(self) -> WindowLoad:
        at, steal, loadgen = time.monotonic(), _steal_seconds(), self._loadgen_seconds()
        cpu = self.others()
        wall = max(at - self._at, 1e-6)
        used: dict[int, float] = {}
        for pid, (seconds, started, _) in cpu.items():
            before = self._cpu.get(pid)
            if before is not None and before[1] == started:
                used[pid] = seconds - before[0]
            else:  # not there at the last edge (or its pid reused): it started in the window
                used[pid] = seconds
        culprit = None
        if used:
            pid = max(used, key=lambda p: used[p])
            if used[pid] > 0:
                culprit = f"{cpu[pid][2]} (pid {pid}, {used[pid] / wall:.1f} cores)"
        start = self._loadgen
        busiest = max((now - start[t] for t, now in loadgen.items() if t in start), default=0.0)
        window = WindowLoad(
            wall_s=wall,
            other_cores=max(0.0, sum(used.values())) / wall,
            steal_cores=max(0.0, steal - self._steal) / wall,
            loadgen_busy=min(1.0, max(0.0, busiest) / wall),
            culprit=culprit,
        )
        self._at, self._steal, self._loadgen, self._cpu = at, steal, loadgen, cpu
        return window

    def _loadgen_seconds(self) -> dict[LoadThread, float]:
        """Each load-generator thread's CPU seconds so far (a thread gone is left out)."""
        found = {}
        for pid, process in self._loadgen_processes.items():
            try:
                threads = {t.id: t.user_time + t.system_time for t in process.threads()}
            except psutil.Error:
                continue
            for thread in self._loadgen_threads:
                if thread.pid == pid and thread.tid in threads:
                    found[thread] = threads[thread.tid]
        return found

    def others(self) -> dict[int, tuple[float, float, str]]:
        """By pid, the CPU seconds, start time and name of every process that is neither ours
        nor a server: the ones a window counts."""
        table = process_table()
        # the load workers are ours even where they are not (or no longer) our children
        ours = _descendants(table, {self._me.pid, *self._loadgen_processes})
        return {
            pid: (proc.cpu_s, proc.started, proc.name)
            for pid, proc in table.items()
            if pid not in ours and not proc.name.startswith(_SERVER_COMMS)
        }


@dataclass(frozen=True)
class ProcessCpu:
    """One process's line of the table the probe reads at every window edge."""

    cpu_s: float
    started: float
    """When it started (a pid seen again with another start is another process)."""
    name: str
    parent: int


def process_table() -> dict[int, ProcessCpu]:
    """Every process's CPU seconds, start, name and parent. On Linux from ``/proc/PID/stat``
    alone: one read per process, about 12 us each, where psutil's ``process_iter`` took 95 us
    (6.5 ms of CPU for 68 processes against 0.8 ms). The probe runs at every window edge while
    the server works, and a burst of the probe's CPU there is a burst taken from the server: it
    showed in the p99 of MiniLM at concurrency 1 (docs/concepts/measurement.md, "Fidelity")."""
    if not os.path.isdir("/proc/self/task"):
        return _process_table_psutil()
    tick = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                line = handle.read()
            end = line.rindex(b")")
            fields = line[end + 2 :].split()
            # after the name: state ppid ... utime(11) stime(12) ... starttime(19), in ticks
            table[int(entry)] = ProcessCpu(
                cpu_s=(int(fields[11]) + int(fields[12])) / tick,
                started=int(fields[19]) / tick,
                name=line[line.index(b"(") + 1 : end].decode(errors="replace"),
                parent=int(fields[1]),
            )
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile, or not ours to read
    return table


def _process_table_psutil() -> dict[int, ProcessCpu]:
    table = {}
    for process in psutil.process_iter(["name", "cpu_times", "create_time", "ppid"]):
        info = process.info
        times = info["cpu_times"]
        if times is None:
            continue
        table[process.pid] = ProcessCpu(
            times.user + times.system, info["create_time"] or 0.0, info["name"] or "?", info["ppid"] or 0
        )
    return table


def _descendants(table: dict[int, ProcessCpu], roots: set[int]) -> set[int]:
    """``roots`` and every process under them in ``table``."""
    children: dict[int, list[int]] = {}
    for pid, proc in table.items():
        children.setdefault(proc.parent, []).append(pid)
    found, todo = set(roots), list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def _steal_seconds() -> float:
    return float(getattr(psutil.cpu_times(), "steal", 0.0))
