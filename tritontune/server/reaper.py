"""Stops what a tritontune process started once that process is gone without stopping it.

Started detached by the launchers (its own session, so Ctrl-C and group kills don't reach it); a
normal exit stops the server and kills this process first. Only when tritontune dies without
cleaning up (SIGKILL, the OOM killer, a crash) does it act:

* ``python -m tritontune.server.reaper container CONTAINER_ID PARENT_PID``: removes the container;
* ``python -m tritontune.server.reaper group PGID PARENT_PID [SHM_PREFIX]``: kills a local
  tritonserver's whole process group and removes the Python backend's shared-memory regions
  (``/dev/shm/SHM_PREFIX*``). The server itself dies with tritontune (``PR_SET_PDEATHSIG``), but
  its Python backend stubs would live on, orphaned, holding CPU; and a killed server never unlinks
  its regions (1 MiB or more each, in RAM, until the next reboot).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

POLL_S = 0.5
SHM_DIR = Path("/dev/shm")


def remove_shm_regions(prefix: str) -> None:
    """Unlink the Python backend's shared-memory regions named ``prefix*`` (its
    ``shm-region-prefix-name``), which a server that did not shut down cleanly leaves behind."""
    if prefix and SHM_DIR.is_dir():
        for region in SHM_DIR.glob(f"{prefix}*"):
            with contextlib.suppress(OSError):
                region.unlink()


def start_reaper(what: str, target: str, *extra: str) -> subprocess.Popen[bytes]:
    """A detached reaper of ``what`` (``container`` or ``group``) ``target`` for this process;
    ``extra`` for a group: the shared-memory prefix to clean up after it."""
    return subprocess.Popen(
        [sys.executable, "-m", "tritontune.server.reaper", what, target, str(os.getpid()), *extra],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # Ctrl-C and a kill of tritontune's group don't reach it
    )


def stop_reaper(reaper: subprocess.Popen[bytes] | None) -> None:
    """tritontune cleaned up itself: the reaper has nothing left to do."""
    if reaper is not None:
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            reaper.kill()
            reaper.wait(timeout=5)


def reap_container(container_id: str, parent: int) -> int:
    import docker

    client = docker.from_env(timeout=30)
    while psutil.pid_exists(parent):
        time.sleep(POLL_S)
        try:
            client.containers.get(container_id)
        except docker.errors.NotFound:
            return 0  # removed by tritontune: nothing left to do
        except Exception:
            continue  # the engine is busy; try again
    with contextlib.suppress(Exception):
        client.containers.get(container_id).remove(force=True)
    return 0


def reap_group(pgid: int, parent: int, shm_prefix: str = "") -> int:
    while psutil.pid_exists(parent):
        time.sleep(POLL_S)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return 0  # the whole group is gone: nothing left to do (and never a reused id)
        except PermissionError:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    deadline = time.monotonic() + 5.0  # the regions go once nothing of the group maps them
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            break
        time.sleep(0.05)
    remove_shm_regions(shm_prefix)
    return 0


def main(argv: list[str]) -> int:
    what, target, parent = argv[0], argv[1], int(argv[2])
    if what == "group":
        return reap_group(int(target), parent, *argv[3:4])
    return reap_container(target, parent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
