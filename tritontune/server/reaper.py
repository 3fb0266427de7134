"""Removes a tritontune container once the tritontune process that started it is gone.

Started detached by :class:`~tritontune.server.docker.DockerTritonLauncher` (its own session, so
Ctrl-C and group kills don't reach it); a normal exit removes the container and kills this
process first. Only when tritontune dies without cleaning up (SIGKILL, a crash) does it act:
``python -m tritontune.server.reaper CONTAINER_ID PARENT_PID``.
"""

from __future__ import annotations

import contextlib
import sys
import time

from tritontune.server.docker import pid_alive

POLL_S = 0.5


def main(argv: list[str]) -> int:
    container_id, parent = argv[0], int(argv[1])
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
