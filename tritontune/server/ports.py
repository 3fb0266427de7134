"""Free loopback ports for a server about to start."""

from __future__ import annotations

import socket

from tritontune.errors import ServerError


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """``count`` distinct ports that are free now (bound together, then released)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((host, 0))
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def ensure_port_free(port: int, what: str, host: str = "127.0.0.1") -> None:
    """Raise a clear error if ``port`` is taken, before the server finds out in its log."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            raise ServerError(f"{what} {port} is already in use on {host}") from None
