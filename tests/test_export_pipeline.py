"""Export of a pipeline study from an in-memory study of the test pipeline, and how ``check``
reads the exported repository back: no server."""

import shutil
from pathlib import Path

import pytest
import yaml

from tests.studies import make_pipeline_study, read_study
from tritontune.check.gate import find_models, static_warnings
from tritontune.config.model_config import config_digest, read_config, write_config
from tritontune.config.pipeline import configs_from_text
from tritontune.config.repository import load_model_source
from tritontune.config.variant import describe_config
from tritontune.errors import InputError
from tritontune.export.single_class import Endpoint, export_records
from tritontune.hostinfo import HostInfo
from tritontune.study.verdict import best_point
from tritontune.tuning_record import PIPELINE_RECORD_VERSION, RECORD_FILE, read_record

STEPS = ("scale", "shift")


def export(repository: Path, out: Path, *, step_files: bool = True, force: bool = False):
    """Export the winner of a study of the test pipeline (trial 1 of 2) into ``out``."""
    study = make_pipeline_study(repository, [3000, 6000], step_files=step_files)
    return export_records([Endpoint("p")], {"p": read_study(study)}, out, storage="memory", force=force)


def test_the_ensemble_and_every_composing_model_are_exported_under_one_record(
    pipeline_repository: Path, tmp_path: Path
):
    out = tmp_path / "out"
    result = export(pipeline_repository, out)
    assert [m.name for m in result.models] == ["pipe"]  # the one record
    assert sorted(p.name for p in out.iterdir()) == ["pipe", "scale", "shift"]

    ensemble = out / "pipe"
    assert (ensemble / "config.pbtxt").read_bytes() == (
        pipeline_repository / "pipe" / "config.pbtxt"
    ).read_bytes()
    assert (ensemble / "1").is_dir() and not any((ensemble / "1").iterdir())

    winner = best_point(read_study(make_pipeline_study(pipeline_repository, [3000, 6000])))
    assert winner is not None and winner.result.number == 1
    tuned = configs_from_text(winner.result.config_pbtxt, source="the winner")
    for model in STEPS:
        assert read_config(out / model / "config.pbtxt") == tuned[model]
        copied, measured = out / model / "1" / "model.py", pipeline_repository / model / "1" / "model.py"
        assert copied.read_bytes() == measured.read_bytes() and not copied.is_symlink()
        assert not (out / model / RECORD_FILE).exists()
    assert read_config(out / "shift" / "config.pbtxt").instance_group[0].count == 2

    record = read_record(ensemble / RECORD_FILE)
    assert (
        yaml.safe_load((ensemble / RECORD_FILE).read_text())["record_version"] == PIPELINE_RECORD_VERSION
    )
    assert record.model == "pipe" and record.knobs == winner.result.knobs
    assert record.operating_point.throughput == 6000 and record.tuned_from["trial"] == 1
    assert record.config_sha256 == config_digest(load_model_source(out, "pipe").base_config)
    pipeline = record.pipeline
    assert pipeline is not None and pipeline.names == STEPS
    for listed in pipeline.models:
        exported = load_model_source(out, listed.model)
        assert listed.knobs == describe_config(tuned[listed.model])
        assert listed.config_sha256 == config_digest(exported.base_config)  # as check reads it
        assert (
            listed.model_files
            == exported.file_digests()
            == {"1/model.py": listed.model_files["1/model.py"]}
        )
    assert [s.model for s in pipeline.steps] == list(STEPS)
    assert pipeline.steps_figures == "operating point" and pipeline.steps_load == 8
    assert pipeline.steps[1].queue_ms == pytest.approx(7.5)
    assert not list(out.glob(".tritontune-export-*")), "the staging directory is removed"


def test_check_reads_the_pipeline_as_one_model(pipeline_repository: Path, tmp_path: Path):
    out = tmp_path / "out"
    export(pipeline_repository, out)
    models = {m.name: m for m in find_models(out)}
    assert {n: m.part_of for n, m in models.items()} == {"pipe": None, "scale": "pipe", "shift": "pipe"}
    assert [m.name for m in models["pipe"].composing] == list(STEPS)
    here = HostInfo("test cpu", 2)
    assert not [w for w in static_warnings(models["pipe"], here) if "changed" in w]

    config = read_config(out / "shift" / "config.pbtxt")
    config.instance_group[0].count = 1
    write_config(config, out / "shift" / "config.pbtxt")
    (out / "scale" / "1" / "model.py").write_text("# edited\n")
    warnings = static_warnings({m.name: m for m in find_models(out)}["pipe"], here)
    assert any(
        w.startswith("composing model shift: config.pbtxt changed since export (instance_group:")
        for w in warnings
    ), warnings
    assert "composing model scale: model files changed since export: 1/model.py" in warnings


def test_check_refuses_a_pipeline_record_that_does_not_match_the_repository(
    pipeline_repository: Path, tmp_path: Path
):
    out = tmp_path / "out"
    export(pipeline_repository, out)
    spare = tmp_path / "shift"
    shutil.move(out / "shift", spare)
    with pytest.raises(InputError, match=r"pipeline.models.1.model: model 'shift' is not in the"):
        find_models(out)
    shutil.move(spare, out / "shift")
    shutil.copy2(out / "pipe" / RECORD_FILE, out / "shift" / RECORD_FILE)
    with pytest.raises(InputError, match=r"model: 'pipe' differs from the directory name 'shift'"):
        find_models(out)
    record = yaml.safe_load((out / "pipe" / RECORD_FILE).read_text())
    record["model"] = "shift"
    (out / "shift" / RECORD_FILE).write_text(yaml.safe_dump(record))
    with pytest.raises(InputError, match="'shift' has a tuning record of its own"):
        find_models(out)


def test_options_that_rename_models_are_refused_for_a_pipeline(
    pipeline_repository: Path, tmp_path: Path
):
    out = tmp_path / "out"
    studies = {"p": read_study(make_pipeline_study(pipeline_repository, [3000, 6000]))}
    for endpoints, top_k in (([Endpoint("p")], 2), ([Endpoint("p", role="interactive")], 1)):
        with pytest.raises(InputError, match=r"tuned pipeline 'pipe': export it alone"):
            export_records(endpoints, studies, out, storage="memory", top_k=top_k)
    assert not out.exists()


def test_changed_composing_model_files_are_refused(pipeline_repository: Path, tmp_path: Path):
    studies = {"p": read_study(make_pipeline_study(pipeline_repository, [6000]))}
    with open(pipeline_repository / "shift" / "1" / "model.py", "a") as handle:
        handle.write("# changed\n")
    with pytest.raises(InputError, match=r"shift: 1/model.py changed since study 'p' measured it"):
        export_records([Endpoint("p")], studies, tmp_path / "out", storage="memory")
    assert not (tmp_path / "out").exists()


def test_a_study_without_the_composing_files_digests_is_exported_with_a_warning(
    pipeline_repository: Path, tmp_path: Path
):
    result = export(pipeline_repository, tmp_path / "out", step_files=False)
    assert any("did not record its composing models' files" in w for w in result.warnings)
    assert (tmp_path / "out" / "shift" / "1" / "model.py").is_file()


def test_a_non_empty_output_is_only_written_with_force(pipeline_repository: Path, tmp_path: Path):
    out = tmp_path / "out"
    (out / "mine").mkdir(parents=True)
    with pytest.raises(InputError, match="pass --force to replace pipe, scale, shift in it"):
        export(pipeline_repository, out)
    assert sorted(p.name for p in out.iterdir()) == ["mine"]
    export(pipeline_repository, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["mine", "pipe", "scale", "shift"]


def test_a_pipeline_study_whose_model_is_no_longer_an_ensemble_is_refused(
    pipeline_repository: Path, tmp_path: Path
):
    studies = {"p": read_study(make_pipeline_study(pipeline_repository, [6000]))}
    step = (pipeline_repository / "shift" / "config.pbtxt").read_text()
    (pipeline_repository / "pipe" / "config.pbtxt").write_text(step.replace('"shift"', '"pipe"'))
    with pytest.raises(InputError, match=r"measured a pipeline, but .*pipe is no longer an ensemble"):
        export_records([Endpoint("p")], studies, tmp_path / "out", storage="memory")
