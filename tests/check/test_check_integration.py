"""`tritontune check` on a repository exported from a real search, then made worse on purpose."""

import csv
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tests.conftest import SmallStudies, tritonserver_processes
from tritontune.cli import app
from tritontune.config.model_config import read_config, write_config
from tritontune.export.single_class import Endpoint
from tritontune.export.studies import export_studies
from tritontune.tuning_record import RECORD_FILE

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.fixture(scope="module")
def exported(small_studies: SmallStudies, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("exported") / "tuned"
    export_studies([Endpoint(small_studies.tight)], small_studies.storage, out)
    return out


@pytest.fixture
def tuned(exported: Path, tmp_path: Path) -> Path:
    """A private copy of the exported repository that a test may spoil."""
    return Path(shutil.copytree(exported, tmp_path / "tuned"))


def check(repository: Path, tmp_path: Path, *extra: str, window: str = "0.5s"):
    junit, summary = tmp_path / "junit.xml", tmp_path / "summary.md"
    result = runner.invoke(
        app,
        ["check", str(repository), "--window", window, "--junit", str(junit),
         "--summary", str(summary), *extra],
    )  # fmt: skip
    return result, junit, summary


def junit_cases(path: Path) -> dict[str, ET.Element]:
    root = ET.parse(path).getroot()
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    assert suite is not None
    return {f"{c.get('classname')}.{c.get('name')}": c for c in suite.iter("testcase")}


def test_a_freshly_exported_repository_passes(tuned: Path, tmp_path: Path, own_servers: Path):
    """The export passes its own check. Held to 25 % under its lowest playoff round, not the
    default 10 %: what is under test is the whole flow (record, load, rounds, reports), and a
    busy minute on a 2-core machine moves a fresh round more than 10 % (this test failed once in
    a CI run whose output was not kept). The tests below show the default 10 % catching what it
    must."""
    table = tmp_path / "rounds.csv"
    result, junit, summary = check(tuned, tmp_path, "--csv", str(table), "--tolerance", "25%")
    assert result.exit_code == 0, result.output
    with open(table, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) >= 3 and {r["Measured"] for r in rows} >= {"check round 1", "check round 3"}
    record = yaml.safe_load((tuned / "mlp" / RECORD_FILE).read_text())
    assert {r["Model"] for r in rows} == {"mlp"}
    assert {r["Max Batch Size"] for r in rows} == {str(record["knobs"]["max_batch_size"])}
    assert {r["Model Config Path"] for r in rows} == {str(tuned / "mlp")}
    assert all(r["Satisfies Constraints"] in ("Yes", "No") for r in rows)
    assert "check passed: 1/1 models pass" in result.output
    cases = junit_cases(junit)
    assert set(cases) == {"mlp.loads", "mlp.p99", "mlp.throughput", "mlp.errors"}
    assert all(c.find("failure") is None for c in cases.values())
    assert "rounds agree" in (cases["mlp.p99"].findtext("system-out") or "")
    text = summary.read_text()
    assert text.startswith("## tritontune check: passed")
    assert "| mlp | concurrency" in text
    assert not tritonserver_processes(own_servers)


def test_a_tightened_slo_fails_on_p99(tuned: Path, tmp_path: Path):
    path = tuned / "mlp" / RECORD_FILE
    record = yaml.safe_load(path.read_text())
    record["slo"]["p99_ms"] = 0.05  # 50 us: no real request is that fast
    path.write_text(yaml.safe_dump(record))
    # A gross failure (it takes the 2 extra rounds): short windows are enough to see it.
    result, junit, summary = check(tuned, tmp_path, window="0.3s")
    assert result.exit_code == 1, result.output
    assert "mlp failed: p99" in result.output and "> SLO 0.05 ms" in result.output
    assert "high confidence" in result.output
    cases = junit_cases(junit)
    failure = cases["mlp.p99"].find("failure")
    assert failure is not None and "> SLO 0.05 ms" in (failure.get("message") or "")
    assert cases["mlp.loads"].find("failure") is None
    assert "## tritontune check: FAILED" in summary.read_text()


def test_removing_dynamic_batching_is_caught(tuned: Path, tmp_path: Path):
    config_path = tuned / "mlp" / "config.pbtxt"
    config = read_config(config_path)
    config.ClearField("dynamic_batching")
    write_config(config, config_path)
    result, junit, _ = check(tuned, tmp_path, window="0.3s")
    assert result.exit_code == 1, result.output
    assert "config.pbtxt changed since export (dynamic_batching: True -> False" in result.output
    cases = junit_cases(junit)
    failed = {name for name, case in cases.items() if case.find("failure") is not None}
    assert failed & {"mlp.throughput", "mlp.p99"}, result.output


def test_an_invalid_config_fails_before_any_measurement(tuned: Path, tmp_path: Path):
    config_path = tuned / "mlp" / "config.pbtxt"
    config = read_config(config_path)
    config.dynamic_batching.preferred_batch_size.append(config.max_batch_size * 2)
    write_config(config, config_path)
    result, junit, _ = check(tuned, tmp_path)
    assert result.exit_code == 1, result.output
    assert "preferred_batch_size" in result.output and "above max_batch_size" in result.output
    assert junit_cases(junit)["mlp.loads"].find("failure") is not None
    assert "round 1" not in result.output


def test_bad_repositories_are_clear_errors(tuned: Path, tmp_path: Path):
    record_path = tuned / "mlp" / RECORD_FILE
    record = yaml.safe_load(record_path.read_text())
    record["load"]["value"] = "lots"
    record_path.write_text(yaml.safe_dump(record))
    result, _, _ = check(tuned, tmp_path)
    assert result.exit_code == 2
    assert f"{record_path}: load.value: 'lots' is not of type 'number'" in result.output

    record_path.unlink()
    result, _, _ = check(tuned, tmp_path)
    assert result.exit_code == 2 and "no tuned models (no tritontune.lock.yaml" in result.output

    result, _, _ = check(tmp_path / "nowhere", tmp_path)
    assert result.exit_code == 2 and "model repository not found" in result.output

    result, _, _ = check(tuned, tmp_path, "--tolerance", "150%")
    assert result.exit_code == 2 and "--tolerance: '150%' must be" in result.output
    assert "Traceback" not in result.output
