"""Precision variants served by the real tritonserver: profiled, searched over, exported."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.measuring import FAST
from tritontune.cli import app
from tritontune.config.model_config import read_config
from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.export.single_class import Endpoint
from tritontune.export.studies import export_studies
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.request_shape import RequestShape
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.space import Choice, SearchSpace
from tritontune.serving.session import TuningSession
from tritontune.tuning_record import RECORD_FILE, read_record

pytestmark = pytest.mark.integration
runner = CliRunner()


@pytest.mark.functional
def test_a_variant_is_what_the_server_runs(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    with TuningSession(source, settings=FAST) as session:
        checks = session.prepare_precisions(["fp32", "int8_dynamic"])
        assert checks["int8_dynamic"].accepted
        session.load(Variant(precision="int8_dynamic", max_queue_delay_us=1000))
        served = session.server.client.model_config("mlp")
        assert served.parameters["onnx_model_file"].string_value == "model.int8_dynamic.onnx"
        m = session.measure(LoadSpec.concurrency(4))
        assert m.error_count == 0 and m.throughput > 0


@pytest.mark.functional
def test_search_over_precisions_then_export_the_winner(example_repository: Path, tmp_path: Path):
    space = SearchSpace(
        {
            "max_batch_size": Choice((64,)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((1000,)),
            "instance_count": Choice((1,)),
            "intra_op_thread_count": Choice((1,)),
            "precision": Choice(("fp32", "int8_dynamic")),
        }
    )
    storage = f"sqlite:///{tmp_path / 'p.db'}"
    source = load_model_source(example_repository, "mlp")
    with TuningSession(source, settings=FAST) as session:
        result = run_search(
            session, space,
            SearchSettings(slo_p99_s=0.05, trials=2, seed=0, storage=storage, study_name="p",
                           # ramps of 1 and 8 (to 64 they bisected back, 5 levels each): both
                           # variants hold the SLO there with room, so both reach the export
                           measure=FAST, max_load=8,
                           # one round and no extra ones (one ratio decides no order: the
                           # higher median wins): what is under test is the variant's way to
                           # the export
                           playoff=PlayoffSettings(top=2, rounds=1, measure=FAST, extra_rounds=0)),
        )  # fmt: skip
    assert set(result.precisions) == {"fp32", "int8_dynamic"}
    assert result.precisions["int8_dynamic"].accepted
    by_precision = {r.knobs.get("precision", "fp32"): r for r in result.results}
    assert set(by_precision) == {"fp32", "int8_dynamic"}
    assert by_precision["fp32"].accuracy is None
    assert by_precision["int8_dynamic"].accuracy["cosine"] > 0.99  # accuracy beside the speed

    # Export the int8 trial: the variant's file replaces the FP32 weights, its accuracy is kept.
    out = tmp_path / "tuned"
    export_studies([Endpoint("p")], storage, out, top_k=2)
    exported = {}
    # The top 2 are exported when both held their SLO in the playoff; on a busy machine the
    # slower FP32 one may miss it there and only the winner is exported (export warns).
    for name in ("mlp", "mlp_rank2"):
        if not (out / name).is_dir():
            continue
        record = read_record(out / name / RECORD_FILE)
        exported[(record.precision or {}).get("precision", "fp32")] = name
    assert "int8_dynamic" in exported, exported
    int8 = out / exported["int8_dynamic"]
    files = sorted(p.name for p in (int8 / "1").iterdir())
    assert files == ["model.int8_dynamic.onnx"]
    assert read_config(int8 / "config.pbtxt").default_model_filename == "model.int8_dynamic.onnx"
    record = read_record(int8 / RECORD_FILE)
    assert record.precision["accuracy"]["cosine"] > 0.99
    assert set(record.model_files) == {"1/model.int8_dynamic.onnx"}
    if "fp32" in exported:
        assert sorted(p.name for p in (out / exported["fp32"] / "1").iterdir()) == ["model.onnx"]


@pytest.mark.functional
def test_profile_cli_shows_accuracy_and_refuses_an_inaccurate_variant(example_repository: Path):
    base = ["profile", "-r", str(example_repository), "-m", "mlp", "--concurrency", "2",
            "--window", "0.3s", "--warmup", "0.2s", "--max-queue-delay", "1ms"]  # fmt: skip
    ok = runner.invoke(app, [*base, "--precision", "fp16"])
    assert ok.exit_code == 0, ok.output
    # SCORES holds class scores: judged by top-1 agreement (the gate's figure for a classifier)
    assert re.search(r"accuracy of fp16 against fp32: SCORES \(classifier\): top-1 \d+\.\d%", ok.output)
    assert "recipe: fp16: FP16 weights and compute, FP32 inputs/outputs" in ok.output
    assert "fp16" in ok.output  # in the knobs line of the table title
    refused = runner.invoke(app, [*base, "--precision", "fp16", "--accuracy", "rel=0,max_abs=0"])
    assert refused.exit_code == 2
    assert "precision fp16: rejected, not measured: SCORES: relative error" in refused.output
    bad = runner.invoke(app, [*base, "--precision", "fp8"])
    assert bad.exit_code == 2 and "precision 'fp8' is not one of" in bad.output


def test_real_model_int8_measured_beside_fp32_through_triton_and_exported(real_model, tmp_path: Path):
    """all-MiniLM-L6-v2 with real tokenized sentences: per-channel INT8 passes the gate, is served
    by the real server and measured in the playoff's interleaved rounds beside FP32.

    Whether it wins depends on the CPU: with an int8 dot-product instruction (VNNI) it out-ran
    FP32 by ~1.8x on a quiet 2-core machine, and must win; on an AVX2-only one (an AMD EPYC
    here, 2026-11-25) it was 1.05-1.2x, which a busy round flips (it lost 2 runs of 3), so
    there the verdict is held to the figures instead: the winner has the best median."""
    space = SearchSpace(
        {
            "max_batch_size": Choice((8,)),
            "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((2000,)),
            "instance_count": Choice((1,)),
            "intra_op_thread_count": Choice((2,)),
            "inter_op_thread_count": Choice((1,)),
            "precision": Choice(("fp32", "int8_dynamic")),
        }
    )
    storage = f"sqlite:///{tmp_path / 'minilm.db'}"
    source = load_model_source(real_model.repository, real_model.name)
    # Windows of 0.4 s (15 replies at least, 3 at most a level; 0.5 s, 20 and 4 took 44 s in CI):
    # INT8's lead on a VNNI host (~1.8x) is far outside what a shorter window's noise can flip.
    settings = MeasureSettings(warmup_s=0.2, window_s=0.4, min_window_requests=15, max_windows=3)
    shape = RequestShape(input_data=real_model.inputs)
    with TuningSession(source, settings=settings, request_shape=shape) as session:
        result = run_search(
            session, space,
            SearchSettings(slo_p99_s=0.5, trials=2, seed=0, storage=storage, study_name="minilm",
                           # ramps of 1 and 4, capped there (to 8 they bisected back to 6-7 when
                           # a busy level missed, 5 levels each): the verdict under test is the
                           # playoff's, measured at the load each held, and INT8's lead is per
                           # batch, at 4 requests in flight as at 8
                           measure=settings, max_load=4,
                           # no extra rounds where the order is uncertain (3 more of each
                           # entry, ~20 s on AVX2): the verdict is held to the medians there
                           playoff=PlayoffSettings(top=2, rounds=3, measure=settings,
                                                   extra_rounds=0)),
        )  # fmt: skip
    check = result.precisions["int8_dynamic"]
    assert check.accepted and check.recipe_label and "per-channel" in check.recipe_label
    assert check.accuracy and check.accuracy["outputs"][0]["kind"] == "embedding"
    assert result.winner is not None and result.playoff is not None
    precision_of = {r.number: r.knobs.get("precision") or "fp32" for r in result.results}
    measured = {precision_of.get(e.trial, "baseline"): e for e in result.playoff.entries}
    assert measured["int8_dynamic"].held
    assert len(measured["int8_dynamic"].rounds) == 3
    won = result.winner.result.knobs.get("precision") or "fp32"
    if cpu_has_int8_dot_product():
        assert won == "int8_dynamic", result.to_dict()["playoff"]
    else:
        best = max(measured.values(), key=lambda e: e.throughput.median)
        assert measured[won] is best, result.to_dict()["playoff"]
    export_studies([Endpoint("minilm")], storage, tmp_path / "tuned")
    record = read_record(tmp_path / "tuned" / "minilm" / RECORD_FILE)
    if won == "int8_dynamic":
        assert record.precision["recipe"] == check.recipe_label
        assert record.precision["accuracy"]["cosine"] >= 0.985


def cpu_has_int8_dot_product() -> bool:
    """Whether this CPU has an int8 dot-product instruction (AVX512-VNNI, AVX-VNNI, AMX)."""
    try:
        flags = Path("/proc/cpuinfo").read_text().split()
    except OSError:
        return False
    return bool({"avx512_vnni", "avx_vnni", "amx_int8"} & set(flags))


@pytest.mark.functional
def test_profile_cli_on_the_real_model_names_kind_and_recipe(real_model):
    result = runner.invoke(
        app,
        ["profile", "-r", str(real_model.repository), "-m", real_model.name, "--concurrency", "2",
         "--window", "0.5s", "--warmup", "0.3s", "--input-data", str(real_model.inputs),
         "--precision", "int8_dynamic", "--graph-optimization", "extended"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert re.search(r"sentence_embedding \(embedding\): cos mean 0\.9\d+, p5 0\.9\d+", result.output)
    assert "recipe: int8_dynamic: per-channel MatMul/Gemm/Attention" in result.output
    assert "graph=extended" in result.output
