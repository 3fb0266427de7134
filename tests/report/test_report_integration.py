"""`tritontune report` on real (small) studies: sections, figures, the study's own numbers, and a
real headless browser that renders it without console errors."""

import json
import os
import re
import shutil
from pathlib import Path

import optuna
import pytest
from plotly.offline import get_plotlyjs
from typer.testing import CliRunner

from tests.conftest import SmallStudies
from tests.studies import read_study
from tritontune.cli import app
from tritontune.report.data import collect
from tritontune.report.html import write_report
from tritontune.study.handle import TuningStudy
from tritontune.study.verdict import best_point

pytestmark = pytest.mark.integration
runner = CliRunner()
SECTIONS = ("summary", "capacity", "warnings", "playoff", "top-configs", "frontier",
            "latency-curves", "history", "importances")  # fmt: skip
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def report(small_studies: SmallStudies, tmp_path_factory: pytest.TempPathFactory) -> Path:
    study = optuna.load_study(study_name=small_studies.tight, storage=small_studies.storage)
    path = tmp_path_factory.mktemp("report") / "report.html"
    write_report(TuningStudy.of(study), path, peak=20_000)
    return path


def embedded(html: str) -> dict:
    match = re.search(
        r'<script type="application/json" id="tritontune-report">(.*?)</script>', html, re.S
    )
    assert match, "the report embeds its figures as JSON"
    return json.loads(match.group(1))


def test_report_has_every_section_and_figure(report: Path):
    html = report.read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html
    for figure in ("frontier", "latency", "history"):
        assert f'id="fig-{figure}"' in html  # plotly's divs
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "element ids are unique"
    assert "Pareto frontier" in html and "SLO p99 50ms" in html
    assert "<script src=" not in html and "<link " not in html, "self-contained"
    library = get_plotlyjs()  # plotly.js itself is inlined, whole: its start and its end
    assert library[:5000] in html and library[-5000:] in html


def test_report_numbers_are_the_studys(report: Path, small_studies: SmallStudies):
    study = optuna.load_study(study_name=small_studies.tight, storage=small_studies.storage)
    data = embedded(report.read_text())
    record = read_study(study)
    results = [r for r in record.results if r.feasible]
    assert [row["trial"] for row in data["top"]] == [r.number for r in results]
    for row, result in zip(data["top"], results, strict=True):
        assert row["throughput"] == result.throughput
        assert row["p99_ms"] == pytest.approx(result.operating_point.p99_s * 1e3, abs=1e-4)
    winner = best_point(record)
    assert winner is not None and winner.playoff is not None and winner.playoff.gain is not None
    assert data["best_trial"] == winner.result.number and data["figures"] == "playoff"
    assert data["capacity"]["max_throughput"] == pytest.approx(winner.point.throughput, rel=1e-6)
    gain = winner.playoff.gain.median  # within the playoff's rounds
    assert f"{gain * 100:+.0f} %</strong>" in report.read_text()
    assert data["playoff"]["winner"] == winner.result.number
    assert data["capacity"]["replicas"] >= 1 and data["capacity"]["peak"] == 20_000
    # every measured level of every trial and the baseline is a point
    levels = sum(len(r.operating_point.levels) for r in record.results)
    assert data["points"] == levels + len(record.baseline.levels)
    # the table shows the same throughputs
    html = report.read_text()
    for result in results:
        assert f"{result.throughput:,.0f}" in html


def test_report_cli_and_capacity_in_search_output(small_studies: SmallStudies, tmp_path: Path):
    out = tmp_path / "r.html"
    ok = runner.invoke(
        app, ["report", "--study", small_studies.loose, "--storage", small_studies.storage,
              "--out", str(out), "--peak-qps", "5k", "--headroom", "60%"],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert out.is_file() and "capacity plan:" in ok.output and "60% of it" in ok.output
    bad = runner.invoke(app, ["report", "--study", "nope", "--storage", small_studies.storage])
    assert bad.exit_code == 2 and "study 'nope' not found" in bad.output
    bad = runner.invoke(
        app, ["report", "--study", small_studies.loose, "--storage", small_studies.storage,
              "--headroom", "0%"],
    )  # fmt: skip
    assert bad.exit_code == 2 and "--headroom: must be above 0 %" in bad.output


def test_warnings_come_from_the_numbers(small_studies: SmallStudies):
    study = optuna.load_study(study_name=small_studies.tight, storage=small_studies.storage)
    data = collect(read_study(study))
    best = data.best_point
    tail = best.p99_s / best.p50_s > 3
    assert any("p99/p50" in w for w in data.warnings) == tail


@pytest.mark.browser
def test_report_renders_in_a_real_browser(report: Path):
    if CHROMIUM is None:
        message = "Debian's chromium is not installed (apt-get install chromium)"
        if os.environ.get("TRITONTUNE_REQUIRE_BROWSER"):
            pytest.fail(message)  # CI installs it: missing there is a failure, not a skip
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"],
        )  # fmt: skip
        page = browser.new_page()
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda request: requests.append(request.url))
        page.goto(report.resolve().as_uri())
        page.wait_for_selector("#frontier .main-svg", timeout=15_000)
        rendered = page.eval_on_selector_all(".js-plotly-plot", "plots => plots.length")
        points = page.eval_on_selector_all("#frontier .scatterlayer .point", "pts => pts.length")
        browser.close()
    assert errors == []
    assert all(url.startswith(("file:", "data:", "blob:")) for url in requests), requests
    assert rendered >= 3  # frontier, latency curves, history (importances too with enough trials)
    assert points > 0
