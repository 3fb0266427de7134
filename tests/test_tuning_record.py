"""Tuning records: written, read back, and refused with the field named when edited wrongly."""

import re
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo, describe_host
from tritontune.measure.gpu_metrics import NO_GPUS, GpuFigures
from tritontune.measure.loadgen import LoadMode
from tritontune.tuning_record import (
    RECORD_FILE,
    ComposingModel,
    PipelineRecord,
    RecordedLoad,
    RecordedPoint,
    RecordedStep,
    TuningRecord,
    read_record,
    write_record,
)


def make_record(**changes) -> TuningRecord:
    values = dict(
        model="mlp",
        slo_p99_ms=50.0,
        load=RecordedLoad(LoadMode.CONCURRENCY, 12),
        operating_point=RecordedPoint(throughput=1234.5, p50_ms=8.0, p99_ms=41.0, confirmed=True),
        knobs={"max_batch_size": 64, "dynamic_batching": True},
        config_sha256="ab" * 32,
        triton_version="2.51.0",
        hardware=HostInfo("Test CPU", 2),
    )
    values.update(changes)
    return TuningRecord(**values)


def test_round_trip(tmp_path: Path):
    record = make_record(routing={"note": "interactive here", "endpoint": "mlp"})
    path = write_record(record, tmp_path)
    assert path.name == RECORD_FILE
    assert path.read_text().startswith("# tritontune tuning record")
    again = read_record(path)
    assert again == record
    assert again.slo_p99_s == pytest.approx(0.050)


def edit(path: Path, change) -> None:
    data = yaml.safe_load(path.read_text())
    change(data)
    path.write_text(yaml.safe_dump(data))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d["slo"].update(p99_ms="fast"), "slo.p99_ms: 'fast' is not of type 'number'"),
        (lambda d: d["slo"].update(p99_ms=0), "slo.p99_ms: 0 is less than or equal to the minimum"),
        (lambda d: d["load"].update(mode="burst"), "load.mode: 'burst' is not one of"),
        (
            lambda d: d["operating_point"].pop("throughput"),
            "operating_point: 'throughput' is a required",
        ),
        (lambda d: d.pop("hardware"), "(top level): 'hardware' is a required property"),
        (lambda d: d.update(record_version=7), "record_version: 7 is not one of [1, 2]"),
    ],
)
def test_hand_edits_that_break_the_record_name_the_field(tmp_path: Path, change, message):
    path = write_record(make_record(), tmp_path)
    edit(path, change)
    with pytest.raises(InputError) as err:
        read_record(path)
    assert str(err.value).startswith(f"{path}: ")
    assert message in str(err.value)


def test_a_tightened_slo_is_a_valid_edit(tmp_path: Path):
    path = write_record(make_record(), tmp_path)
    edit(path, lambda d: d["slo"].update(p99_ms=0.5))
    assert read_record(path).slo_p99_ms == 0.5


def test_unreadable_records(tmp_path: Path):
    path = tmp_path / RECORD_FILE
    path.write_text("slo: [unclosed\n")
    with pytest.raises(InputError, match=r"tritontune.lock.yaml:\d+: not valid YAML"):
        read_record(path)
    path.write_text("- a list\n")
    with pytest.raises(InputError, match="expected a tuning record"):
        read_record(path)
    with pytest.raises(InputError, match="cannot read the tuning record"):
        read_record(tmp_path / "missing.yaml")


def test_host_differences():
    here = describe_host()
    assert here.cpu_count >= 1 and here.cpu_model
    assert here.differences(here) == []
    other = HostInfo("Other CPU", here.cpu_count + 2, ("NVIDIA H100",))
    found = " ".join(here.differences(other))
    assert "Other CPU" in found and "CPUs" in found and "H100" in found


def test_a_gpu_driver_change_makes_hosts_differ():
    here = HostInfo("CPU", 16, ("NVIDIA H100",), gpu_driver="550.54")
    assert here.differences(HostInfo("CPU", 16, ("NVIDIA H100",), gpu_driver="550.54")) == []
    other = HostInfo("CPU", 16, ("NVIDIA H100",), gpu_driver="560.35")
    assert here.differences(other) == ["GPU driver 550.54 vs 560.35"]
    assert HostInfo.from_dict(other.to_dict()) == other  # kept in studies and records


def test_check_holds_a_record_to_the_lowest_playoff_round():
    from dataclasses import replace

    from tritontune.tuning_record import RecordedPoint

    base = make_record(
        operating_point=RecordedPoint(throughput=5000, p50_ms=10, p99_ms=30, confirmed=True)
    )
    assert base.reference_throughput == 5000  # no playoff: the recorded figure
    ranged = replace(base, playoff={"throughput": {"median": 5000, "low": 4600, "high": 5300}})
    assert ranged.reference_throughput == 4600


def test_the_operating_points_gpu_figures_are_kept_or_their_absence_said(tmp_path: Path):
    gpus = (GpuFigures("GPU-1f7e2a9c", 6, 0.73, 5637144576.0, 85899345920.0, 245.31),)
    point = RecordedPoint(throughput=1234.5, p50_ms=8.0, p99_ms=41.0, confirmed=True, gpu=gpus)
    path = write_record(make_record(operating_point=point), tmp_path)
    assert read_record(path).operating_point.gpu == gpus
    assert yaml.safe_load(path.read_text())["operating_point"]["gpu"][0]["utilization_mean"] == 0.73
    (tmp_path / "cpu").mkdir()
    path = write_record(make_record(), tmp_path / "cpu")
    assert yaml.safe_load(path.read_text())["operating_point"]["gpu"] == NO_GPUS
    assert read_record(path).operating_point.gpu is None


def make_pipeline_record() -> TuningRecord:
    knobs = {"max_batch_size": 8, "dynamic_batching": True}
    return make_record(
        model="pipe",
        knobs={"pipeline": {"scale": knobs, "shift": {**knobs, "max_batch_size": 16}}},
        pipeline=PipelineRecord(
            models=(
                ComposingModel("scale", knobs, "cd" * 32, {"1/model.py": "ef" * 32}),
                ComposingModel("shift", {**knobs, "max_batch_size": 16}, "01" * 32),
            ),
            steps=(RecordedStep("scale", 0.25, 0.5, 3.5), RecordedStep("shift", 40.0, 3.0, 8.0)),
            steps_load=16,
            steps_figures="screening",
        ),
    )


def test_a_pipeline_record_lists_its_composing_models_as_version_2(tmp_path: Path):
    record = make_pipeline_record()
    path = write_record(record, tmp_path)
    data = yaml.safe_load(path.read_text())
    assert data["record_version"] == 2 and "# This model is a pipeline" in path.read_text()
    assert [m["model"] for m in data["pipeline"]["models"]] == ["scale", "shift"]
    assert data["pipeline"]["steps"]["figures"] == "screening"
    again = read_record(path)
    assert again == record and again.pipeline is not None
    assert again.pipeline.names == ("scale", "shift")

    (tmp_path / "one").mkdir()
    single = yaml.safe_load(write_record(make_record(), tmp_path / "one").read_text())
    assert single["record_version"] == 1 and "pipeline" not in single  # as before pipelines


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.update(record_version=1), "record_version: 2 was expected"),
        (lambda d: d["pipeline"].update(models=[]), "pipeline.models: [] should be non-empty"),
        (
            lambda d: d["pipeline"]["models"][1].pop("config_sha256"),
            "pipeline.models.1: 'config_sha256'",
        ),
        (
            lambda d: d["pipeline"]["steps"].update(figures="guessed"),
            "pipeline.steps.figures: 'guessed'",
        ),
    ],
)
def test_a_broken_pipeline_section_names_the_field(tmp_path: Path, change, message):
    path = write_record(make_pipeline_record(), tmp_path)
    edit(path, change)
    with pytest.raises(InputError, match=re.escape(message)):
        read_record(path)


def test_a_pipeline_record_without_step_figures_reads(tmp_path: Path):
    record = make_pipeline_record()
    assert record.pipeline is not None
    bare = replace(record, pipeline=PipelineRecord(models=record.pipeline.models))
    path = write_record(bare, tmp_path)
    assert yaml.safe_load(path.read_text())["pipeline"]["steps"] is None
    assert read_record(path) == bare


def test_a_bls_models_record_says_so_and_an_ensembles_does_not(tmp_path: Path):
    record = make_pipeline_record()
    assert record.pipeline is not None
    bls = replace(record, pipeline=replace(record.pipeline, bls=True))
    path = write_record(bls, tmp_path)
    assert yaml.safe_load(path.read_text())["pipeline"]["bls"] is True
    assert read_record(path) == bls
    (tmp_path / "ensemble").mkdir()
    ensemble = write_record(record, tmp_path / "ensemble")
    assert "bls" not in yaml.safe_load(ensemble.read_text())["pipeline"]
    edit(path, lambda d: d["pipeline"].update(bls="yes"))
    with pytest.raises(InputError, match=re.escape("pipeline.bls: 'yes'")):
        read_record(path)
