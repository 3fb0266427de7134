"""A storage password never reaches a file, a log or the terminal.

The operator of a shared study, as the docs advise: the URL with its password in
``$TRITONTUNE_STORAGE`` (a real PostgreSQL server that asks for it, tests/postgres.py), then
search with results and a report, status, export, report, check with JUnit and a summary, and
commands whose storage can't be opened (a port nobody listens on, a wrong password given on the
command line). Every line printed and every file written (the study's own database aside, on the
server) is searched for the password in every form it could take.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from urllib.parse import quote, quote_plus

import pytest

from tests.conftest import SENTINEL_PASSWORD
from tests.measuring import FAST_OPTIONS

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.functional]

SPACE = """\
max_batch_size: [8, 16]
dynamic_batching: [true]
max_queue_delay: [1ms]
preferred_batch_size: [none]
instance_count: [1]
intra_op_thread_count: [1]
inter_op_thread_count: [1]
precision: [fp32]
"""
FORMS = {SENTINEL_PASSWORD, quote(SENTINEL_PASSWORD, safe=""), quote_plus(SENTINEL_PASSWORD)}
#: The part of the password no other text has (a leak of any form of it holds this).
UNIQUE = SENTINEL_PASSWORD.removeprefix("Sentinel!")


def tritontune(
    args: list[str], cwd: Path, storage: str | None, outputs: list[str], expect: int = 0
) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITONTUNE_STORAGE"}
    if storage:
        env["TRITONTUNE_STORAGE"] = storage
    done = subprocess.run(
        [sys.executable, "-m", "tritontune", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    printed = done.stdout + done.stderr
    outputs.append(printed)
    assert done.returncode == expect, f"tritontune {' '.join(args)}: exit {done.returncode}\n{printed}"
    return printed


def leaks(text: str) -> list[str]:
    return [form for form in FORMS | {UNIQUE} if form in text]


def test_the_storage_password_is_nowhere(
    example_repository: Path, tmp_path: Path, postgres_password, monkeypatch
):
    url = postgres_password
    shown = url.replace(quote(SENTINEL_PASSWORD, safe=""), "***")
    assert shown != url
    (tmp_path / "space.yaml").write_text(SPACE)
    outputs: list[str] = []
    fast = [*FAST_OPTIONS, "--max-load", "4"]
    search = [
        "search", "-r", str(example_repository), "-m", "mlp", "--slo-p99", "50ms",
        "--trials", "1", "--space", "space.yaml", "--study", "secret", "--seed", "1",
        *fast, "--playoff-top", "0",  # a playoff writes nothing a search does not
        "--results", "r.json", "--report", "search.html",
    ]  # fmt: skip
    printed = tritontune(search, tmp_path, url, outputs)
    assert "secret" in printed
    tritontune(["status", "--study", "secret"], tmp_path, url, outputs)
    # As the docs advise too: no password in the URL, libpq's PGPASSWORD instead.
    with monkeypatch.context() as patched:
        patched.setenv("PGPASSWORD", SENTINEL_PASSWORD)
        tritontune(["status", "--study", "secret"], tmp_path, shown.replace(":***", ""), outputs)
    tritontune(["export", "--study", "secret", "--out", "out"], tmp_path, url, outputs)
    tritontune(["report", "--study", "secret", "--out", "report.html"], tmp_path, url, outputs)
    check = [
        "check", "out", "--junit", "junit.xml", "--summary", "summary.md",
        "--rounds", "1", "--window", "0.3s", "--tolerance", "90%",
    ]  # fmt: skip
    tritontune(check, tmp_path, None, outputs)  # the record read back, without the storage
    # Opens that fail: nobody listens on port 1; the right server, a wrong password (on the
    # command line this time), which the server's error names the user of.
    nobody = url.replace(url.rsplit("@", 1)[1].split("/")[0], "127.0.0.1:1")
    refused = tritontune(["status", "--study", "secret"], tmp_path, nobody, outputs, expect=2)
    assert "cannot be opened" in refused and "***" in refused
    wrong = url.replace(quote(SENTINEL_PASSWORD, safe=""), quote("x" + SENTINEL_PASSWORD, safe=""))
    denied = tritontune(
        ["export", "--study", "secret", "--out", "out2", "--storage", wrong], tmp_path, None, outputs, 2
    )
    assert "cannot be opened" in denied and "password authentication failed" in denied

    for printed in outputs:
        assert leaks(printed) == [], printed
    written = sorted(p for p in tmp_path.rglob("*") if p.is_file())
    names = {p.name for p in written}
    assert {"r.json", "search.html", "report.html", "junit.xml", "summary.md"} <= names
    assert "tritontune.lock.yaml" in names
    for path in written:
        text = path.read_bytes().decode("utf-8", errors="replace")
        assert leaks(text) == [], f"{path.relative_to(tmp_path)} holds the password"
    # What is written still names the study's place.
    assert shown in (tmp_path / "r.json").read_text()
    record = next(tmp_path.glob("out/*/tritontune.lock.yaml")).read_text()
    assert shown in record
