"""Precision variants of a pipeline's ONNX model, on the real bundled tritonserver: the inputs
they are judged on are what the steps before the model compute (captured through the server),
the search measures them as ``MODEL/precision``, and export ships the variant in place of the
weights, with its accuracy in the pipeline's record."""

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.conftest import tritonserver_processes
from tests.pipelines import SCORED, SCORER, write_bls_onnx, write_onnx_pipeline, write_scored_inputs
from tritontune.cli import app
from tritontune.config.model_config import read_config
from tritontune.config.repository import file_sha256
from tritontune.errors import InputError
from tritontune.measure.inputs import read_input_data
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.request_shape import RequestShape
from tritontune.precision.prepare import config_input_specs
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.pipeline_space import PipelineSpace
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.search.strategy import Strategy
from tritontune.serving.opening import open_session
from tritontune.study.handle import TuningStudy
from tritontune.study.verdict import best_point
from tritontune.tuning_record import RECORD_FILE, read_record

pytestmark = [pytest.mark.integration, pytest.mark.functional]
runner = CliRunner()
FAST = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=30, max_windows=3)


@pytest.fixture
def scored(tmp_path: Path, example_repository: Path) -> tuple[Path, Path, np.ndarray]:
    repository = write_onnx_pipeline(tmp_path / "model_repository", example_repository)
    inputs = tmp_path / "inputs.json"
    return repository, inputs, write_scored_inputs(inputs)


def test_a_composing_models_variants_are_judged_on_what_the_steps_before_it_compute(
    scored: tuple[Path, Path, np.ndarray], own_servers: Path
):
    repository, inputs, samples = scored
    shape = RequestShape(input_data=inputs)
    with open_session(repository, SCORED, request_shape=shape, settings=FAST) as session:
        with pytest.raises(InputError, match="'scale' uses the 'python' backend"):
            session.prepare_precisions(["fp32", "fp16"], model="scale")
        with pytest.raises(InputError, match="name one of its models"):
            session.prepare_precisions(["fp32", "fp16"])
        with pytest.raises(InputError, match="fp16_io of 'mlp'"):
            session.prepare_precisions(["fp16_io"], model="mlp")
        checks = session.prepare_precisions(["fp32", "int8_dynamic", "int8_static"], model="mlp")

    dynamic = checks["int8_dynamic"]
    assert dynamic.accepted, dynamic.reason
    assert dynamic.input_data is not None and dynamic.input_data.exists()
    # What reached the MLP is what `scale` computed: every request doubled, in order.
    mlp_config = read_config(repository / "mlp" / "config.pbtxt")
    captured = read_input_data(
        dynamic.input_data, config_input_specs(mlp_config), batch_size=1, batching=True
    )
    assert len(captured) == len(samples)
    for got, sent in zip(captured, samples, strict=True):
        np.testing.assert_array_equal(got["INPUT"][0], sent * 2)
    assert f"{inputs} (through scale)" in dynamic.data
    assert "disjoint halves" in dynamic.data
    assert checks["fp32"].input_data is None  # the model itself is judged on nothing
    static = checks["int8_static"]
    assert static.input_data == dynamic.input_data  # calibrated on the captured inputs too
    assert static.reason is None or "needs" not in static.reason
    assert not tritonserver_processes(own_servers)


def test_a_pipeline_search_serves_the_variant_and_export_ships_it(
    scored: tuple[Path, Path, np.ndarray], tmp_path: Path, own_servers: Path
):
    repository, inputs, _ = scored
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    settings = SearchSettings(
        slo_p99_s=0.2,
        trials=2,
        seed=1,
        storage=storage,
        study_name="scored",
        measure=FAST,
        max_load=8,
        playoff=PlayoffSettings(top=0),
        strategy=Strategy.AUTO,  # a pipeline is not predicted: auto chooses TPE
    )
    # Only the MLP's precision and instances are searched: every trial serves INT8.
    space = PipelineSpace.of(
        {
            "scale": SearchSpace({}),
            "mlp": SearchSpace(
                {"precision": Choice(("int8_dynamic",)), "instance_count": IntRange(1, 2)}
            ),
        }
    )
    shape = RequestShape(input_data=inputs)
    with open_session(repository, SCORED, request_shape=shape, settings=FAST) as session:
        result = run_search(session, space, settings)
    best = best_point(result.study)
    assert best is not None
    assert best.result.knobs["pipeline"]["mlp"]["precision"] == "int8_dynamic"
    assert TuningStudy.open_existing(storage, "scored").saved_strategy() == Strategy.TPE.value
    study = TuningStudy.open_existing(storage, "scored").read()
    check = study.precision_check("int8_dynamic", "mlp")
    assert check is not None and check.accepted and check.input_data

    out = tmp_path / "tuned"
    export = ["export", "--study", "scored", "--storage", storage, "--out", str(out)]
    exported = runner.invoke(app, export)
    assert exported.exit_code == 0, exported.output
    variant = out / "mlp" / "1" / "model.int8_dynamic.onnx"
    assert variant.is_file() and not (out / "mlp" / "1" / "model.onnx").exists()
    assert read_config(out / "mlp" / "config.pbtxt").default_model_filename == variant.name
    record = read_record(out / SCORED / RECORD_FILE)
    assert record.pipeline is not None
    listed = {m.model: m for m in record.pipeline.models}
    assert listed["mlp"].model_files == {"1/model.int8_dynamic.onnx": file_sha256(variant)}
    assert listed["mlp"].precision is not None
    assert listed["mlp"].precision["precision"] == "int8_dynamic"
    assert listed["mlp"].precision["accuracy"]["cosine"] > 0.9
    assert listed["scale"].precision is None

    # One round: what is under test is that the exported variant is served end to end, not the
    # figures (a throughput miss on a busy machine is allowed below, so more rounds buy nothing).
    checked = runner.invoke(app, ["check", str(out), "--window", "0.5s", "--rounds", "1"])
    assert "changed since export" not in checked.output, checked.output
    assert "scored (pipeline: scale, mlp)" in checked.output, checked.output
    # It served the exported variant end to end; its throughput figure may miss on a busy
    # machine (the check then says so), never the files or the loads.
    assert checked.exit_code in (0, 1), checked.output
    assert "check passed" in checked.output or "throughput" in checked.output, checked.output
    assert not tritonserver_processes(own_servers)


def test_a_bls_models_callee_is_searched_in_int8_on_synthesized_inputs(
    example_repository: Path, tmp_path: Path, own_servers: Path
):
    """A BLS model calling the example MLP: the MLP's INT8 variant is built and judged on
    synthesized inputs (the calls are in the BLS model's code, so nothing is captured, and the
    check's data says so), then the trials past the bottleneck's first ones (the BLS model's own,
    whose space is empty here) serve it behind the BLS model."""
    repository = write_bls_onnx(tmp_path / "model_repository", example_repository)
    storage = f"sqlite:///{tmp_path / 'studies.db'}"
    settings = SearchSettings(
        slo_p99_s=0.2,
        trials=4,  # the bottleneck's 3 first, then every model's knobs
        seed=1,
        storage=storage,
        study_name="bls",
        measure=FAST,
        max_load=4,
        playoff=PlayoffSettings(top=0),
        strategy=Strategy.AUTO,  # a BLS model is a pipeline too: TPE
    )
    space = PipelineSpace.of(
        {
            SCORER: SearchSpace({}),
            "mlp": SearchSpace(
                {"precision": Choice(("int8_dynamic",)), "instance_count": IntRange(1, 2)}
            ),
        }
    )
    with open_session(repository, SCORER, composing=("mlp",), settings=FAST) as session:
        result = run_search(session, space, settings)
    assert not result.failed
    trial = max(result.results, key=lambda r: r.number)
    assert trial.knobs["pipeline"]["mlp"]["precision"] == "int8_dynamic"
    assert trial.operating_point is not None
    assert {s.model for s in trial.operating_point.steps} == {SCORER, "mlp"}
    bls = TuningStudy.open_existing(storage, "bls")
    assert bls.saved_strategy() == Strategy.TPE.value
    check = bls.read().precision_check("int8_dynamic", "mlp")
    assert check is not None and check.accepted and check.input_data is None
    assert "synthesized" in check.data and "its models' inputs are not captured" in check.data
