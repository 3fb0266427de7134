"""The one fault policy: a server that dies is restarted and the work done again, once.

Every job that measures (the search's trials, the playoff and the workload's final rounds,
``profile``, ``check``) runs its measurement through :func:`with_restarts`, so a fault is blamed on
its cause the same way everywhere:

- Triton refusing a config, or failing its requests, while the server keeps running: the config's
  own fault. :class:`ConfigFailed` is raised at once, with Triton's reason.
- The server dying (a crash, or killed from outside): not yet the config's. The server is
  restarted and the work done again; only the :data:`SERVER_DEATHS_TO_FAIL`-th death is the
  config's, with the server's last log lines as the reason.

A server somebody else runs (``--launch remote``) can't be restarted: its death is said at once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol, TypeVar

from tritontune.errors import ServerDiedError, ServerError

#: A config that brings the server down this many times fails (once may be a fault of the
#: machine, e.g. the server killed from outside; twice is the config's).
SERVER_DEATHS_TO_FAIL = 2

T = TypeVar("T")


class Restartable(Protocol):
    """What the fault policy needs of a server: a diagnosis, and a restart."""

    def fault(self, err: ServerError) -> ServerDiedError | None:
        """The server's death behind ``err``; None when the server is fine (``err`` is the
        config's own)."""
        ...

    def restart(self, *, reload: bool = False) -> None:
        """Start a dead server again; with ``reload``, load the config it had again."""
        ...


class ConfigFailed(ServerError):
    """A config that could not be measured, for a reason that is the config's own."""

    def __init__(self, reason: str, server_deaths: int, log_tail: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.server_deaths = server_deaths
        self.log_tail = log_tail


def with_restarts(
    server: Restartable,
    attempt: Callable[[], T],
    *,
    reload: bool = False,
    deaths_to_fail: int = SERVER_DEATHS_TO_FAIL,
) -> tuple[T, int]:
    """``attempt()`` and how many times the server died on the way (see the module docstring).

    ``reload``: the restarted server gets the config it had again (``attempt`` only measures);
    without it the server comes back bare and ``attempt`` loads what it measures, so a config
    that may have brought the server down is never loaded again behind its back.
    """
    deaths = 0
    while True:
        try:
            return attempt(), deaths
        except ConfigFailed:
            raise
        except ServerError as err:
            died = err if isinstance(err, ServerDiedError) else server.fault(err)
            if died is None:
                raise ConfigFailed(str(err), deaths) from None
            deaths += 1
            try:
                server.restart(reload=reload)
            except ServerError as cant:  # e.g. a remote server, which is not ours to restart
                raise ServerDiedError(f"{died}; it was not restarted: {cant}", died.log_tail) from None
            if deaths >= deaths_to_fail:
                tail = _last_lines(died.log_tail)
                raise ConfigFailed(
                    f"brought the server down {deaths} times: {died}"
                    + (f"; last log lines: {tail}" if tail else ""),
                    deaths,
                    died.log_tail,
                ) from None


def _last_lines(log_tail: str, lines: int = 3) -> str:
    return " | ".join(line.strip() for line in log_tail.strip().splitlines()[-lines:])
