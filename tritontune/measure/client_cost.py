"""What the load generator itself cost, and whether it, not the server, limited a load level.

On a GPU host a small model answers faster than one Python process can send: past that point a
figure is the load generator's limit, not the config's, and a search would rank configs by noise.
So every window also records the load processes' CPU per request, the event-loop thread's *loop
demand* (running or waiting for a CPU, from ``/proc/PID/task/TID/schedstat``: unlike busy time it
also catches a generator starved by a busy core) and the *client lag* (open loop: how late a
request was sent; closed loop: each worker's turnaround, read off the latencies' own stamps). A
window is client-bound when the loop demand reached :data:`LOOP_DEMAND_LIMIT` and the lag's p99
:data:`CLIENT_LAG_LIMIT_S`; a level, when half of its windows are (one busy window does not make a
level the client's). The searches never take its figure as the config's; measuring again would
not help, more load processes would. See ``docs/concepts/measurement.md``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import psutil

#: The event-loop thread running or waiting for a CPU this share of a window: no slack left. (Not
#: 1.0: in a closed loop a starved loop also idles while gRPC's own threads, starved alike, hand
#: it the replies; pinned with CPU burners it read 0.82-0.94 at concurrency 32-64, against 0.37
#: at 8 and 0.62 at 16 unpinned, on 2 cores.)
LOOP_DEMAND_LIMIT = 0.80
#: ... and the client's own lag at p99 this long: its lack of CPU reached the latencies. (Over
#: HTTP the lag is a 1 ms asyncio timer's, which fires up to 1 ms late on an idle loop: epoll's
#: timeout is whole ms. A gRPC turnaround's p99 on the example model, unstarved, was 0.25 ms at
#: concurrency 1 and 3 ms at 64, where one turn handles many replies: loop demand 0.64.)
CLIENT_LAG_LIMIT_S = 0.002


@dataclass(frozen=True)
class LoadThread:
    """A load process's event-loop thread: its process id and its native thread id."""

    pid: int
    tid: int

    @classmethod
    def current(cls) -> LoadThread:
        import threading

        return cls(os.getpid(), threading.get_native_id())


def schedstat_seconds(thread: LoadThread) -> tuple[float, float] | None:
    """The thread's CPU time and run-queue wait so far, in seconds (None: not readable, e.g. not
    Linux, or the thread is gone)."""
    try:
        with open(f"/proc/{thread.pid}/task/{thread.tid}/schedstat") as handle:
            fields = handle.read().split()
        return int(fields[0]) / 1e9, int(fields[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class ClientWindow:
    """The load generator over one window."""

    wall_s: float
    cpu_s: float
    """CPU time of every load process (all their threads)."""
    requests: int
    """Requests answered in the window."""
    loop_demand: float
    """The busiest event-loop thread's running plus run-queue time, per wall second (0..1+)."""
    lag_p99_s: float | None
    """The client's lag (open loop: send lag; closed loop: turnaround), p99."""

    @property
    def cores(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def bound(self) -> bool:
        """The client, not the server, limited this window (see the module's docstring)."""
        return (
            self.loop_demand >= LOOP_DEMAND_LIMIT
            and self.lag_p99_s is not None
            and self.lag_p99_s >= CLIENT_LAG_LIMIT_S
        )


@dataclass(frozen=True)
class ClientCost:
    """The load generator's cost over a measurement's reported windows."""

    cpu_us_per_request: float | None
    """Client CPU microseconds per answered request (None: nothing answered)."""
    cores: float
    """Client CPU in cores (1.0: one core busy the whole span)."""
    loop_demand: float
    """The highest loop demand of a reported window."""
    lag_p99_s: float | None
    """The highest per-window p99 of the client's lag."""
    bound_windows: int
    """Reported windows the client limited."""
    windows: int
    processes: int = 1

    @classmethod
    def of(cls, windows: Sequence[ClientWindow], processes: int = 1) -> ClientCost:
        requests = sum(w.requests for w in windows)
        cpu = sum(w.cpu_s for w in windows)
        wall = sum(w.wall_s for w in windows)
        lags = [w.lag_p99_s for w in windows if w.lag_p99_s is not None]
        return cls(
            cpu_us_per_request=cpu / requests * 1e6 if requests else None,
            cores=cpu / wall if wall > 0 else 0.0,
            loop_demand=max((w.loop_demand for w in windows), default=0.0),
            lag_p99_s=max(lags) if lags else None,
            bound_windows=sum(w.bound for w in windows),
            windows=len(windows),
            processes=processes,
        )

    @property
    def bound(self) -> bool:
        """At least half of the reported windows were limited by the client: the figure is the
        client's, in part."""
        return self.bound_windows > 0 and 2 * self.bound_windows >= self.windows

    def describe(self) -> str | None:
        """One line for the user when the client limited the level, else None."""
        if not self.bound:
            return None
        lag = f"{self.lag_p99_s * 1e3:.1f} ms" if self.lag_p99_s is not None else "?"
        per = "" if self.cpu_us_per_request is None else f", {self.cpu_us_per_request:.0f} us/request"
        return (
            f"client-bound: the load generator limited {self.bound_windows} of {self.windows} "
            f"windows (its event loop {self.loop_demand:.0%} busy or waiting for CPU, lag p99 {lag}"
            f"{per}); the figure is partly the client's: add load processes (--load-processes)"
        )

    def to_dict(self) -> dict:
        return {
            "cpu_us_per_request": None
            if self.cpu_us_per_request is None
            else round(self.cpu_us_per_request, 2),
            "cores": round(self.cores, 3),
            "loop_demand": round(self.loop_demand, 3),
            "lag_p99_ms": None if self.lag_p99_s is None else round(self.lag_p99_s * 1e3, 4),
            "bound_windows": self.bound_windows,
            "windows": self.windows,
            "processes": self.processes,
            "client_bound": self.bound,
        }

    @classmethod
    def from_dict(cls, data: dict) -> ClientCost:
        lag = data.get("lag_p99_ms")
        return cls(
            cpu_us_per_request=data.get("cpu_us_per_request"),
            cores=float(data["cores"]),
            loop_demand=float(data["loop_demand"]),
            lag_p99_s=None if lag is None else lag / 1e3,
            bound_windows=int(data["bound_windows"]),
            windows=int(data["windows"]),
            processes=int(data.get("processes", 1)),
        )


def lag_p99(samples: Sequence[float]) -> float | None:
    """The p99 of lag samples (the higher sample: a lag that really happened), None if none."""
    if not samples:
        return None
    return float(np.percentile(np.asarray(samples, dtype=np.float64), 99, method="higher"))


class ClientProbe:
    """Reads the load processes' CPU and their event-loop threads' schedstat at window edges;
    :meth:`sample` gives the span since the previous call."""

    def __init__(self, threads: Sequence[LoadThread]) -> None:
        self._threads = list(threads)
        self._processes = {t.pid: psutil.Process(t.pid) for t in self._threads}
        self._at = time.monotonic()
        self._cpu = self._cpu_seconds()
        self._sched = self._schedstats()

    def sample(self, requests: int, lags: Sequence[float]) -> ClientWindow:
        """The window since the last call, in which ``requests`` were answered and the client's
        lag was ``lags`` (seconds, one per request or timer tick)."""
        at, cpu, sched = time.monotonic(), self._cpu_seconds(), self._schedstats()
        wall = max(at - self._at, 1e-6)
        demand = 0.0
        for thread, now in sched.items():
            before = self._sched.get(thread)
            if now is not None and before is not None:
                demand = max(demand, (now[0] - before[0] + now[1] - before[1]) / wall)
        window = ClientWindow(
            wall_s=wall,
            cpu_s=max(0.0, cpu - self._cpu),
            requests=requests,
            loop_demand=demand,
            lag_p99_s=lag_p99(lags),
        )
        self._at, self._cpu, self._sched = at, cpu, sched
        return window

    def _cpu_seconds(self) -> float:
        total = 0.0
        for process in self._processes.values():
            try:
                times = process.cpu_times()
            except psutil.Error:
                continue
            total += times.user + times.system
        return total

    def _schedstats(self) -> dict[LoadThread, tuple[float, float] | None]:
        return {thread: schedstat_seconds(thread) for thread in self._threads}
