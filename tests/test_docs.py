"""The documentation site: it builds, and its hand-written reference pages keep up with the code.

The command reference and the tuning record's schemas are rendered from the code when the site is
built (docs/hooks.py), so they cannot drift. What is written by hand is checked here against what
the code writes: every key of the results JSON (from real searches on the modelled server), every
CSV column, every search-space dimension. A key added to the code without its line in the docs
fails here, naming it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import optuna
import pytest
import typer.main
import yaml

from tests.fakes import FakeSession
from tritontune.cli import app
from tritontune.config.repository import load_model_source
from tritontune.measure.traffic import parse_traffic
from tritontune.report.inference_csv import COLUMNS
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.space import DIMENSIONS, Choice, SearchSpace
from tritontune.search.workload_search import WorkloadSearchSettings, run_workload_search
from tritontune.study.records import RecordedPrecision

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
#: Results keys whose own keys are data (knob names, dimensions, models, classes), not schema.
DATA_MAPS = {
    "params", "config", "knobs", "space", "point", "models", "routes",
    "served_infer_per_s_by_class", "by_model", "by_class", "classes_by_round",
}  # fmt: skip


def nav_pages(nav: Any) -> list[str]:
    """Every page the mkdocs.yml nav names."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for item in nav.values() for page in nav_pages(item)]
    return [page for item in nav for page in nav_pages(item)]


NAV = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])


def test_every_page_of_the_nav_exists():
    assert [page for page in NAV if not (DOCS / page).is_file()] == []


@pytest.mark.parametrize("command", sorted(typer.main.get_command(app).commands))
def test_every_command_has_its_page_in_the_nav(command: str):
    page = f"cli/{command}.md"
    assert page in NAV
    assert f"<!-- cli: {command} -->" in (DOCS / page).read_text(encoding="utf-8")


def keys_of(value: Any, found: set[str] | None = None) -> set[str]:
    found = set() if found is None else found
    if isinstance(value, dict):
        for key, item in value.items():
            found.add(str(key))
            if key not in DATA_MAPS:
                keys_of(item, found)
    elif isinstance(value, list):
        for item in value:
            keys_of(item, found)
    return found


def undocumented(keys: set[str], page: str) -> list[str]:
    text = (DOCS / page).read_text(encoding="utf-8")
    return sorted(key for key in keys if f"`{key}`" not in text)


@pytest.fixture
def session(example_repository: Path) -> FakeSession:
    # max_batch_size 4 is refused by the modelled Triton: the results have a failed trial too.
    return FakeSession(load_model_source(example_repository, "mlp"), refuse=4)


def test_every_key_of_the_search_results_is_documented(session: FakeSession):
    space = SearchSpace(
        {
            "max_batch_size": Choice((4, 8, 16)),
            "dynamic_batching": Choice((True,)),
            "instance_count": Choice((1, 2)),
        }
    )
    settings = SearchSettings(
        slo_p99_s=0.05, trials=6, seed=3, storage=optuna.storages.InMemoryStorage(), study_name="docs"
    )
    results = run_search(session, space, settings).to_dict()
    assert results["best"] and results["playoff"] and results["failed"], "the search left parts out"
    assert list(results["phase_seconds"]) == ["precision checks", "baseline", "trials", "playoff"]
    keys = keys_of(results) | keys_of(RecordedPrecision("fp16", accepted=True).to_dict())
    assert undocumented(keys, "reference/results.md") == []


def test_every_key_of_the_workload_search_results_is_documented(session: FakeSession):
    traffic = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "share": 0.3, "priority": 1, "slo_p99": "20ms"},
                {"name": "batch", "share": 0.7, "batch_size": 8, "priority": 2, "may_shed": True},
            ]
        },
        where="test",
    )
    space = SearchSpace({"max_batch_size": Choice((16, 64)), "dynamic_batching": Choice((True,))})
    settings = WorkloadSearchSettings(
        trials=4, seed=1, storage=optuna.storages.InMemoryStorage(), study_name="docs", rounds=2
    )
    results = run_workload_search(session, space, traffic, settings).to_dict()
    assert results["winner"] and results["finalists"], "the search left parts out"
    assert undocumented(keys_of(results), "reference/results.md") == []


def test_every_csv_column_is_documented():
    assert undocumented(set(COLUMNS), "reference/csv.md") == []


def test_every_space_dimension_is_documented():
    assert undocumented(set(DIMENSIONS), "reference/space.md") == []


def test_the_site_builds_strict(tmp_path: Path):
    """Broken links and anchors, pages out of the nav, a command without its page: all fail it."""
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed: `make docs` installs the docs extra (CI does)")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert built.returncode == 0, built.stdout + built.stderr
    search = (tmp_path / "site" / "cli" / "search" / "index.html").read_text(encoding="utf-8")
    assert "--slo-p99" in search and "slo_p99" in search  # the reference, rendered from the code
