"""Stops what a tritontune process started once that process is gone without stopping it.

Started detached by the launchers (its own session, so Ctrl-C and group kills don't reach it); a
normal exit stops the server and kills this process first. Only when tritontune dies without
cleaning up (SIGKILL, the OOM killer, a crash) does it act:

* ``python -m tritontune.server.reaper container CONTAINER_ID PARENT_PID``: removes the container;
* ``python -m tritontune.server.reaper group PGID PARENT_PID``: kills a local tritonserver's whole
  process group. The server itself dies with tritontune (``PR_SET_PDEATHSIG``), but its Python
  backend stubs would live on, orphaned, holding CPU and shared memory.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.5


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def start_reaper(what: str, target: str) -> subprocess.Popen[bytes]:
    """A detached reaper of ``what`` (``container`` or ``group``) ``target`` for this process."""
    return subprocess.Popen(
        [sys.executable, "-m", "tritontune.server.reaper", what, target, str(os.getpid())],
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
    while pid_alive(parent):
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


def reap_group(pgid: int, parent: int) -> int:
    while pid_alive(parent):
        time.sleep(POLL_S)
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return 0  # the whole group is gone: nothing left to do (and never a reused id)
        except PermissionError:
            pass
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)
    return 0


def main(argv: list[str]) -> int:
    what, target, parent = argv[0], argv[1], int(argv[2])
    if what == "group":
        return reap_group(int(target), parent)
    return reap_container(target, parent)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
