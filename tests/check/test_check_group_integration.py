"""`tritontune export` of a real search of two models on one server, then `tritontune check` of
what it wrote: one server serving both models with their exported configs, each class of the
workload sent to its own model and judged against its objective (the search is ``group_study``'s,
shared with tests/search/test_group_search_integration.py)."""

from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import GroupStudy, tritonserver_processes
from tests.groups import MODELS
from tritontune.check.gate import CHECK_MEASURE, CheckSettings, run_check
from tritontune.cli import app
from tritontune.config.model_config import parse_config_text, read_config
from tritontune.measure.traffic import read_traffic
from tritontune.tuning_record import RECORD_FILE, WORKLOAD_FILE, WorkloadRecord, read_record

pytestmark = pytest.mark.integration
runner = CliRunner()


def test_an_exported_group_is_checked_as_one_workload(
    group_study: GroupStudy, tmp_path: Path, own_servers: Path
):
    out = tmp_path / "tuned"
    exported = runner.invoke(
        app, ["export", "--study", group_study.name, "--storage", group_study.storage,
              "--out", str(out)],
    )  # fmt: skip
    assert exported.exit_code == 0, exported.output
    assert "each class calling its own model: chat -> mlp_a; embed -> mlp_b" in exported.output
    assert sorted(p.name for p in out.iterdir()) == list(MODELS)

    winner = group_study.result.winner
    assert winner is not None and winner.trial is not None
    for model in MODELS:
        # each model's config is the winner's config of it, beside its own files and record
        tuned = parse_config_text(winner.models[model], source="the winner")
        assert read_config(out / model / "config.pbtxt") == tuned
        # mlp_b was searched in INT8: its variant is exported in place of its weights
        weights = "model.int8_dynamic.onnx" if model == "mlp_b" else "model.onnx"
        assert sorted(p.name for p in (out / model / "1").iterdir()) == [weights]
        record = read_record(out / model / RECORD_FILE)
        assert set(record.model_files) == {f"1/{weights}"}
        assert (record.precision or {}).get("precision") == (
            "int8_dynamic" if model == "mlp_b" else None
        )
        assert isinstance(record, WorkloadRecord) and record.model == model
        assert record.routes == {"chat": "mlp_a", "embed": "mlp_b"}
        assert record.tuned_from["trial"] == winner.trial
        assert read_traffic(out / model / WORKLOAD_FILE).routes("") == record.routes

    settings = CheckSettings(min_rounds=1, max_rounds=1, measure=replace(CHECK_MEASURE, window_s=0.5))
    report = run_check(out, settings)
    # one check, of the workload: neither model is checked alone
    assert report.models == [] and len(report.workloads) == 1
    (check,) = report.workloads
    assert check.models == MODELS and check.problems == [], check.problems
    assert check.serving == "several models on one server"
    assert [c.name for c in check.criteria] == ["chat", "embed"]
    assert not any("changed since export" in w for w in check.warnings), check.warnings
    assert len(check.rounds) == 1
    for measured in check.rounds:
        # Triton's statistics of each model: the requests it counted are its own class's
        assert set(measured.server) == set(MODELS)
        for name, model in check.record.routes.items():
            sent = measured.figures(name).request_rate * measured.span_s
            assert measured.server[model].requests == pytest.approx(sent, rel=0.2, abs=5)
        assert measured.server["mlp_b"].avg_batch_size >= 4  # embed's batches of 4
    assert not tritonserver_processes(own_servers)
