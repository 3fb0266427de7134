"""A private PostgreSQL server for the tests of shared studies (Debian's ``postgresql`` package).

Started once per test session on 127.0.0.1 with a data directory of its own and stopped at the
end, as the tests do with tritonserver. Where the package is missing the tests skip, saying so,
except in CI (``TRITONTUNE_REQUIRE_POSTGRES=1``), where that is a failure.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest


def _bin(name: str) -> str | None:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    return found[-1] if found else shutil.which(name)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_postgres(args: list[str]) -> list[str]:
    """PostgreSQL refuses to run as root: run it as Debian's ``postgres`` user then."""
    return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args


def _run(args: list[str], env: dict[str, str] | None = None) -> None:
    done = subprocess.run(args, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {(done.stderr or done.stdout).strip()}")


def postgres_server(password: str | None = None, *, under: str | None = None) -> Iterator[str]:
    """A server on 127.0.0.1 and the URL of its database ``studies``; with ``password``, one that
    asks the user ``tritontune`` for it (SCRAM), the URL carrying it. Its files go in a directory
    made ``under`` the given one (else the temporary directory now)."""
    initdb, pg_ctl = _bin("initdb"), _bin("pg_ctl")
    if initdb is None or pg_ctl is None:
        message = "PostgreSQL is not installed (apt-get install postgresql)"
        if os.environ.get("TRITONTUNE_REQUIRE_POSTGRES"):
            pytest.fail(message)  # CI installs it: missing there is a failure, not a skip
        pytest.skip(message)
    # Not under pytest's tmp_path: its parents are private to root, and the server runs as postgres.
    base = Path(tempfile.mkdtemp(prefix="tritontune-postgres-", dir=under))
    base.chmod(0o755)
    data, sockets = base / "data", base / "sockets"
    sockets.mkdir()
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        shutil.chown(sockets, "postgres")
    auth = ["-A", "trust"]
    if password is not None:
        pwfile = base / "password"
        pwfile.write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres")
        auth = ["-A", "scram-sha-256", f"--pwfile={pwfile}"]
    _run(_as_postgres([initdb, "-D", str(data), *auth, "-U", "tritontune", "--no-sync"]))
    port = _free_port()
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off"
    log = base / "postgres.log"
    _run(_as_postgres([pg_ctl, "-D", str(data), "-o", options, "-l", str(log), "-w", "start"]))
    try:
        createdb = _bin("createdb")
        assert createdb is not None
        env = {**os.environ, "PGPASSWORD": password} if password is not None else None
        _run([createdb, "-h", "127.0.0.1", "-p", str(port), "-U", "tritontune", "studies"], env)
        user = "tritontune" if password is None else f"tritontune:{quote(password, safe='')}"
        yield f"postgresql://{user}@127.0.0.1:{port}/studies"
    finally:
        subprocess.run(
            _as_postgres([pg_ctl, "-D", str(data), "-m", "immediate", "stop"]), capture_output=True
        )
        shutil.rmtree(base, ignore_errors=True)
