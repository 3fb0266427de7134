"""`tritontune export` from real (small) studies of the example model."""

import shutil
from pathlib import Path

import optuna
import pytest
from typer.testing import CliRunner

from tests.conftest import SmallStudies
from tests.studies import read_study
from tritontune.cli import app
from tritontune.config.model_config import read_config
from tritontune.errors import InputError
from tritontune.export.single_class import Endpoint, parse_endpoint
from tritontune.export.studies import export_studies
from tritontune.search.playoff import MAX_EXTRA_ROUNDS
from tritontune.study.verdict import best_point, ranked
from tritontune.tuning_record import RECORD_FILE, read_record

pytestmark = pytest.mark.integration
runner = CliRunner()


def test_export_writes_the_best_config_its_model_and_its_record(
    small_studies: SmallStudies, example_repository: Path, tmp_path: Path
):
    out = tmp_path / "tuned"
    result = export_studies([Endpoint(small_studies.tight)], small_studies.storage, out)
    assert [m.name for m in result.models] == ["mlp"]
    model_dir = out / "mlp"

    study = optuna.load_study(study_name=small_studies.tight, storage=small_studies.storage)
    record = read_study(study)
    winner = best_point(record)
    assert winner is not None and winner.figures == "playoff" and winner.point.feasible
    best, confirmed = winner.result, winner.point

    config = read_config(model_dir / "config.pbtxt")
    assert config.name == "mlp" and config.backend == "onnxruntime"  # the user's backend
    assert config.max_batch_size == best.knobs["max_batch_size"]
    assert config.dynamic_batching.max_queue_delay_microseconds == best.knobs["max_queue_delay_us"]
    measured = example_repository / "mlp" / "1" / "model.onnx"
    assert (model_dir / "1" / "model.onnx").read_bytes() == measured.read_bytes()
    assert not (model_dir / "1" / "model.onnx").is_symlink()

    record = read_record(model_dir / RECORD_FILE)
    assert record.slo_p99_ms == pytest.approx(small_studies.tight_slo_s * 1e3)
    assert record.load.mode == "concurrency" and record.load.value == confirmed.load
    assert record.operating_point.confirmed
    assert record.operating_point.throughput == pytest.approx(confirmed.throughput, rel=1e-6)
    assert record.operating_point.p99_ms == pytest.approx(confirmed.p99_s * 1e3, abs=1e-3)
    assert record.knobs == best.knobs
    assert record.triton_version == "2.51.0" and record.served_via_python_backend
    assert record.tuned_from == {
        "model": "mlp", "study": small_studies.tight, "storage": small_studies.storage,
        "trial": best.number, "rank": 1,
    }  # fmt: skip
    assert record.playoff is not None and record.playoff["winner"]
    assert 3 <= record.playoff["rounds"] <= 3 + MAX_EXTRA_ROUNDS  # extra rounds where uncertain
    assert record.playoff["throughput"]["median"] == pytest.approx(confirmed.throughput, rel=1e-3)
    assert record.hardware.cpu_count >= 1 and record.baseline["feasible"]
    assert record.model_files == {"1/model.onnx": record.model_files["1/model.onnx"]}
    assert not list(out.glob(".tritontune-export-*")), "the staging directory is removed"


def test_top_k_exports_runners_up_under_their_own_names(small_studies: SmallStudies, tmp_path: Path):
    out = tmp_path / "tuned"
    result = export_studies([Endpoint(small_studies.tight)], small_studies.storage, out, top_k=2)
    study = optuna.load_study(study_name=small_studies.tight, storage=small_studies.storage)
    verdict = ranked(read_study(study))  # what held in the playoff, the winner first
    assert [m.name for m in result.models] == ["mlp", "mlp_rank2"][: len(verdict)]
    first = read_record(out / "mlp" / RECORD_FILE)
    assert first.operating_point.confirmed and first.tuned_from["trial"] == verdict[0].result.number
    if len(verdict) == 2:  # the runner-up held too: exported under its own name, its own figures
        assert read_config(out / "mlp_rank2" / "config.pbtxt").name == "mlp_rank2"
        runner_up = read_record(out / "mlp_rank2" / RECORD_FILE)
        assert runner_up.tuned_from["rank"] == 2 and runner_up.operating_point.confirmed
        assert runner_up.operating_point.throughput == pytest.approx(verdict[1].point.throughput)
    else:
        assert any("held its SLO in the playoff" in w for w in result.warnings)


def test_interactive_and_batch_endpoints_carry_a_routing_note(
    small_studies: SmallStudies, tmp_path: Path
):
    out = tmp_path / "tuned"
    endpoints = [
        parse_endpoint(f"interactive={small_studies.tight}"),
        parse_endpoint(f"batch={small_studies.loose}"),
    ]
    result = export_studies(endpoints, small_studies.storage, out)
    assert sorted(m.name for m in result.models) == ["mlp_batch", "mlp_interactive"]
    interactive = read_record(out / "mlp_interactive" / RECORD_FILE)
    batch = read_record(out / "mlp_batch" / RECORD_FILE)
    assert interactive.slo_p99_ms == 50 and batch.slo_p99_ms == 200
    for record in (interactive, batch):
        note = record.routing["note"]
        assert "latency-sensitive (user-facing) requests to mlp_interactive" in note
        assert "offline scoring to mlp_batch" in note
        assert set(record.routing["endpoints"]) == {"mlp_interactive", "mlp_batch"}
    assert interactive.routing["endpoint"] == "mlp_interactive"


def test_a_non_empty_output_is_only_written_with_force(small_studies: SmallStudies, tmp_path: Path):
    out = tmp_path / "tuned"
    out.mkdir()
    (out / "other_model").mkdir()
    (out / "other_model" / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="directory is not empty; pass --force"):
        export_studies([Endpoint(small_studies.tight)], small_studies.storage, out)
    assert sorted(p.name for p in out.iterdir()) == ["other_model"]

    export_studies([Endpoint(small_studies.tight)], small_studies.storage, out, force=True)
    (out / "mlp" / "stale.txt").write_text("from an earlier export")
    export_studies([Endpoint(small_studies.tight)], small_studies.storage, out, force=True)
    assert (out / "other_model" / "keep.txt").read_text() == "mine"
    assert not (out / "mlp" / "stale.txt").exists(), "the exported model is replaced whole"


def test_changed_model_files_are_refused(
    small_studies: SmallStudies, example_repository: Path, tmp_path: Path
):
    copy = tmp_path / "repo"
    shutil.copytree(example_repository, copy)
    with open(copy / "mlp" / "1" / "model.onnx", "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(InputError, match=r"1/model.onnx changed since study 'mlp-tight' measured"):
        export_studies(
            [Endpoint(small_studies.tight)],
            small_studies.storage,
            tmp_path / "out",
            model_repository=copy,
        )
    assert not (tmp_path / "out").exists()


def test_export_cli_and_its_bad_input(small_studies: SmallStudies, tmp_path: Path):
    out = tmp_path / "tuned"
    ok = runner.invoke(
        app, ["export", "--study", small_studies.tight, "--storage", small_studies.storage,
              "--out", str(out)],
    )  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "exported to" in ok.output and "tritontune check" in ok.output

    cases = [
        (["--study", "nope", "--storage", small_studies.storage],
         "study 'nope' not found in", "mlp-loose, mlp-tight"),
        (["--study", "x", "--storage", f"sqlite:///{tmp_path / 'none.db'}"], "no such file", ""),
        (["--endpoint", "interactive", "--storage", small_studies.storage],
         "expected ROLE=STUDY", ""),
        (["--storage", small_studies.storage], "nothing to export", ""),
        (["--endpoint", f"a={small_studies.tight}", "--endpoint", f"a={small_studies.loose}",
          "--storage", small_studies.storage], "both be named mlp_a", ""),
    ]  # fmt: skip
    for args, message, extra in cases:
        result = runner.invoke(app, ["export", *args, "--out", str(tmp_path / "other")])
        assert result.exit_code == 2, result.output
        assert message in result.output and extra in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "none.db").exists(), "a mistyped storage is not created"
