"""--csv: one row per measured load level, Model Analyzer's column names where they mean the same."""

import csv
from pathlib import Path

import pytest

from tests.search.test_operating_point import measurement
from tests.studies import SLO, make_study, read_study
from tests.test_tuning_record import make_record
from tritontune.check.gate import CheckReport, ModelCheck
from tritontune.config.variant import Variant
from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.profile import ProfileResult
from tritontune.report.inference_csv import (
    COLUMNS,
    check_rows,
    profile_rows,
    search_rows,
    write_inference_csv,
)
from tritontune.study.figures import PlayoffEntry, PlayoffResult, RoundFigure

#: Model Analyzer's own headers (its ResultTableManager.headers and the records' header()).
MODEL_ANALYZER = (
    "Model",
    "Batch",
    "Concurrency",
    "Request Rate",
    "Model Config Path",
    "Instance Group",
    "Max Batch Size",
    "Satisfies Constraints",
    "Throughput (infer/sec)",
    "p90 Latency (ms)",
    "p95 Latency (ms)",
    "p99 Latency (ms)",
    "Avg Latency (ms)",
    "Server Queue time (ms)",
)

KNOBS = {
    "max_batch_size": 64,
    "dynamic_batching": True,
    "instance_group": [{"count": 2, "kind": "KIND_CPU"}],
    "max_queue_delay_us": 2000,
    "preferred_batch_sizes": [8, 16],
    "parameters": {"intra_op_thread_count": "1"},
}


def read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or ()), list(reader)


def profile_result(loads: list[LoadSpec]) -> ProfileResult:
    return ProfileResult(
        model="mlp",
        launch="local",
        server_version="2.51.0",
        served_via_python=True,
        variant=Variant(),
        knobs=KNOBS,
        config_text="",
        switch_s=1.0,
        measurements=[measurement(ld, 100.0 * (i + 1), 0.004 * (i + 1)) for i, ld in enumerate(loads)],
    )


def test_profile_has_one_row_per_level_and_model_analyzers_columns(tmp_path: Path):
    out = tmp_path / "levels.csv"
    loads = [LoadSpec.concurrency(c) for c in (1, 4, 16)]
    write_inference_csv(profile_rows(profile_result(loads)), out)
    header, rows = read(out)
    assert header == [*COLUMNS, "backend_parameter/intra_op_thread_count"]
    assert set(MODEL_ANALYZER) <= set(header)
    assert [r["Concurrency"] for r in rows] == ["1", "4", "16"]
    first = rows[0]
    assert first["Model"] == "mlp" and first["Measured"] == "profile" and first["Batch"] == "1"
    assert first["Request Rate"] == "" and first["Model Config Path"] == ""
    assert first["Instance Group"] == "2:CPU" and first["Max Batch Size"] == "64"
    assert first["Dynamic Batching"] == "Enabled" and first["Max Queue Delay (us)"] == "2000"
    assert first["Preferred Batch Sizes"] == "8 16" and first["Precision"] == "fp32"
    assert first["Satisfies Constraints"] == ""  # profile has no SLO
    assert first["Throughput (infer/sec)"] == "100.000"
    assert first["p99 Latency (ms)"] == "4.000" and first["p50 Latency (ms)"] == "2.000"
    assert first["Server Queue time (ms)"] == "1.000" and first["Avg Server Batch"] == "2.000"
    assert first["Errors"] == "0" and first["Stable"] == "Yes"
    assert first["backend_parameter/intra_op_thread_count"] == "1"


def test_open_loop_levels_fill_request_rate(tmp_path: Path):
    out = tmp_path / "rate.csv"
    write_inference_csv(profile_rows(profile_result([LoadSpec.rate(250), LoadSpec.rate(1500)])), out)
    _, rows = read(out)
    assert [(r["Concurrency"], r["Request Rate"]) for r in rows] == [("", "250"), ("", "1500")]


def test_search_rows_cover_baseline_trials_and_playoff(example_repository: Path, tmp_path: Path):
    rounds = tuple(RoundFigure(t, 0.01, 0.02, 0.01, 1000, 0, True, True, 4.0) for t in (3000, 3100))
    playoff = PlayoffResult(
        SLO,
        LoadMode.CONCURRENCY,
        2,
        (PlayoffEntry(1, 8, True, rounds, 3000), PlayoffEntry(None, 8, True, rounds, 1000)),
        winner=1,
    )
    study = read_study(make_study(example_repository, [2000, 3000], playoff=playoff))
    out = tmp_path / "search.csv"
    write_inference_csv(search_rows(study), out)
    _, rows = read(out)
    assert [r["Measured"] for r in rows] == [
        "baseline",
        "trial 0",
        "trial 1",
        "playoff round 1 (trial 1)",
        "playoff round 2 (trial 1)",
        "playoff round 1 (baseline)",
        "playoff round 2 (baseline)",
    ]
    assert {r["Concurrency"] for r in rows} == {"8"}
    assert [r["Max Batch Size"] for r in rows[1:3]] == ["4", "8"]
    assert rows[2]["Throughput (infer/sec)"] == "3000.000" and rows[2]["Satisfies Constraints"] == "Yes"
    assert rows[2]["p90 Latency (ms)"] == ""  # a study keeps no p90
    assert [r["Throughput (infer/sec)"] for r in rows[3:5]] == ["3000.000", "3100.000"]
    assert rows[3]["Max Batch Size"] == "8"  # the trial's knobs beside its playoff rounds


def test_check_rows_one_per_round_with_the_records_slo(tmp_path: Path):
    record = make_record()  # SLO 50 ms at concurrency 12
    load = LoadSpec.concurrency(12)
    rounds = [measurement(load, 1200.0, p99) for p99 in (0.030, 0.060, 0.040)]
    check = ModelCheck("mlp", record, measurements=rounds, knobs=KNOBS)
    unmeasured = ModelCheck("other", None)
    report = CheckReport(tmp_path / "tuned", 0.1, HostInfo("Test CPU", 2), models=[check, unmeasured])
    out = tmp_path / "check.csv"
    write_inference_csv(check_rows(report), out)
    _, rows = read(out)
    assert [r["Measured"] for r in rows] == ["check round 1", "check round 2", "check round 3"]
    assert [r["Satisfies Constraints"] for r in rows] == ["Yes", "No", "Yes"]
    assert {r["Model Config Path"] for r in rows} == {str(tmp_path / "tuned" / "mlp")}
    assert {r["Concurrency"] for r in rows} == {"12"}


def test_an_unwritable_file_is_a_one_line_error(tmp_path: Path):
    with pytest.raises(InputError, match=r"^--csv: cannot write .*missing/levels.csv: No such file"):
        write_inference_csv([], tmp_path / "missing" / "levels.csv")
