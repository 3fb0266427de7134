"""Interference detection: the probe reads real processes (a real CPU burner, no fakes)."""

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from tritontune.measure.client_cost import LoadThread
from tritontune.measure.interference import (
    OTHER_CORES_LIMIT,
    Interference,
    InterferenceProbe,
    WindowLoad,
)

BURN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"

# The probe reads every process's CPU use: another test beside it would be a tenant.
pytestmark = pytest.mark.alone


def burner(seconds: float) -> subprocess.Popen:
    """Another tenant of the machine: started through a shell that exits at once, so the burner
    is re-parented to init and is not a child of ours (children count as tritontune's own)."""
    return subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -c '{BURN.format(seconds=seconds)}' & echo $!"],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_a_cpu_burning_process_disturbs_the_window():
    probe = InterferenceProbe([LoadThread.current()])
    shell = burner(1.0)
    pid = int(shell.stdout.readline())  # the burner was re-parented to init: not ours
    shell.wait()
    time.sleep(0.6)
    burning = probe.others().get(pid)  # mid-window: the burner is counted as another tenant
    time.sleep(0.6)  # it burns about one core for the whole window, then ends
    window = probe.sample()
    assert burning is not None and burning[0] > 0, burning  # its CPU seconds so far
    assert window.other_cores >= OTHER_CORES_LIMIT, window
    assert window.disturbed
    # The culprit is the busiest other process: the burner on a quiet machine, maybe another
    # tenant on a busy one (this test looks only at what it started).
    assert window.culprit is not None and "cores)" in window.culprit


def test_own_children_are_not_interference():
    probe = InterferenceProbe([LoadThread.current()])
    child = subprocess.Popen([sys.executable, "-c", BURN.format(seconds=1.0)])
    time.sleep(0.8)
    counted = probe.others()  # while the child burns one core
    window = probe.sample()
    child.wait()
    # Only what this test started is looked at: the rest of a busy machine may add any load.
    assert child.pid not in counted
    assert window.culprit is None or f"pid {child.pid}," not in window.culprit, window
    assert window.culprit is None or f"pid {child.pid}," not in window.culprit


def test_loadgen_thread_busy_is_measured():
    probe = InterferenceProbe([LoadThread.current()])
    cpu, wall = time.thread_time(), time.monotonic()
    end = time.perf_counter() + 0.6
    while time.perf_counter() < end:  # this thread is the "load generator": busy the whole time
        pass
    busy = probe.sample().loadgen_busy
    truth = (time.thread_time() - cpu) / (time.monotonic() - wall)  # Python's own thread clock
    assert busy == pytest.approx(truth, abs=0.15) and busy > 0.1


def test_load_worker_processes_are_ours_and_their_busy_loop_is_the_load_generators():
    """With ``--load-processes N`` the load runs in worker processes: the probe is given their
    event-loop threads. A worker's CPU is the load, never interference (here a process that is
    not even our child, so only being named a load process keeps it out), and the busy figure
    is the busiest worker loop's, not this (idle) thread's."""
    shell = burner(10.0)
    pid = int(shell.stdout.readline())  # re-parented to init: not our child
    shell.wait()
    try:
        worker = LoadThread(pid, pid)  # its main thread stands for a worker's event loop
        probe = InterferenceProbe([LoadThread.current(), worker])
        time.sleep(0.8)
        counted = probe.others()
        window = probe.sample()
        # the same process, not named a load worker, is another tenant (as in the test above)
        stranger = InterferenceProbe([LoadThread.current()]).others()
    finally:
        os.kill(pid, signal.SIGKILL)
    assert pid not in counted and pid in stranger
    assert window.culprit is None or f"pid {pid}," not in window.culprit, window
    # it burns a core (about: a busy 2-core box may give it less), this thread sleeps
    assert window.loadgen_busy > 0.3, window


def test_summary_says_what_happened():
    clean = WindowLoad(1.0, 0.01, 0.0, 0.3)
    busy = WindowLoad(1.0, 0.9, 0.0, 0.3, "stress (pid 7, 0.9 cores)")
    remeasured = Interference.of([clean, busy, clean, clean, clean], [clean, clean, clean])
    assert not remeasured.result_disturbed
    text = remeasured.describe()
    assert text is not None
    assert "1 of 5 windows disturbed" in text and "0.9 cores" in text and "pid 7" in text
    assert "re-measured until clean" in text
    stuck = Interference.of([busy, busy, busy], [busy, busy, busy])
    assert stuck.result_disturbed and "NOT clean" in (stuck.describe() or "")
    assert Interference.of([clean], [clean]).describe() is None
    assert Interference.from_dict(stuck.to_dict()) == stuck


@pytest.mark.parametrize("steal", [0.0, 0.2])
def test_steal_disturbs(steal: float):
    assert WindowLoad(1.0, 0.0, steal, 0.1).disturbed is (steal > 0)


def test_a_servers_processes_are_not_interference_though_not_ours(tmp_path):
    """A Triton server launched elsewhere (a container's processes show on the host) is the
    server, not another tenant: ``tritonserver`` and its Python backend stubs, by the names
    Linux gives them (cut to 15 characters: ``triton_python_b``)."""
    pids = {}
    for name in ("triton_python_backend_stub", "tritonserver", "another_tenant"):
        (tmp_path / name).symlink_to(shutil.which("sleep"))
        shell = subprocess.Popen(
            ["sh", "-c", f"{tmp_path / name} 5 & echo $!"], stdout=subprocess.PIPE, text=True
        )
        pids[name] = int(shell.stdout.readline())  # re-parented to init: not our child
        shell.wait()
    try:
        counted = InterferenceProbe([LoadThread.current()]).others()
    finally:
        for pid in pids.values():
            os.kill(pid, signal.SIGKILL)
    assert pids["another_tenant"] in counted, counted.get(pids["another_tenant"])
    assert pids["triton_python_backend_stub"] not in counted
    assert pids["tritonserver"] not in counted
