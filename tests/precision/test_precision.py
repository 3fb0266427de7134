"""Precision variants of the example model: built with onnxruntime's tools, cached, gated."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest

from tritontune.config.repository import load_model_source
from tritontune.errors import InputError
from tritontune.precision.accuracy import compare_models, parse_tolerance
from tritontune.precision.convert import PRECISIONS, build_variant
from tritontune.precision.prepare import AccuracySettings, precision_data, prepare_precisions
from tritontune.precision.recipe import Calibration

EXPECTED_TYPES = {
    "fp16": (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT),  # weights FP16, I/O kept FP32
    "fp16_io": (onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT16),
    "int8_dynamic": (onnx.TensorProto.INT8, onnx.TensorProto.FLOAT),
    "int8_static": (onnx.TensorProto.INT8, onnx.TensorProto.FLOAT),
}


@pytest.fixture(scope="module")
def source(example_repository: Path):
    return load_model_source(example_repository, "mlp")


@pytest.fixture(scope="module")
def checks(source, tmp_path_factory):
    """Every precision of the example, built into a private cache and checked with defaults."""
    cache = tmp_path_factory.mktemp("cache")
    return cache, prepare_precisions(source.model_file, source.base_config, PRECISIONS, cache=cache)


def test_each_variant_is_built_with_the_expected_types(checks):
    _, found = checks
    for precision, (weight_type, io_type) in EXPECTED_TYPES.items():
        check = found[precision]
        assert check.path is not None and check.path.is_file(), check.reason
        model = onnx.load(str(check.path))
        weight_types = {init.data_type for init in model.graph.initializer}
        assert weight_type in weight_types, (precision, weight_types)
        assert model.graph.input[0].type.tensor_type.elem_type == io_type
        assert model.graph.output[0].type.tensor_type.elem_type == io_type


def test_sane_tolerances_accept_every_variant_with_figures(checks):
    _, found = checks
    assert found["fp32"].accepted and found["fp32"].figures is None
    for precision in EXPECTED_TYPES:
        check = found[precision]
        assert check.accepted, f"{precision}: {check.reason}"
        figures = check.figures
        assert figures is not None and figures.samples == 128
        assert figures.top1_agreement is not None  # 16 class scores per sample
        assert 0.99 <= figures.cosine <= 1.0 + 1e-9
        # FP16 is near exact; INT8 is further off: the figures tell them apart
    assert found["fp16"].figures.max_abs_error < found["int8_dynamic"].figures.max_abs_error


def test_an_absurd_tolerance_rejects_with_the_reason(source, checks):
    cache, _ = checks
    tight = parse_tolerance("cosine=1.0,rel=0,max_abs=0")
    found = prepare_precisions(
        source.model_file, source.base_config, ["fp16", "int8_static"], cache=cache,
        accuracy=AccuracySettings(tolerance=tight),
    )  # fmt: skip
    for check in found.values():
        assert not check.accepted
        assert "relative error" in check.reason and "max abs error" in check.reason
        assert check.summary().startswith("rejected: ")


def test_variants_are_cached_by_content(source, checks):
    cache, found = checks
    path = found["int8_dynamic"].path
    built_at = path.stat().st_mtime_ns
    again = build_variant(source.model_file, "int8_dynamic", cache=cache)
    assert again == path and again.stat().st_mtime_ns == built_at
    # other calibration data is another int8_static variant
    data = precision_data(source.base_config)
    other = [{k: v * 3 for k, v in batch.items()} for batch in data.calibration]
    assert build_variant(source.model_file, "int8_static", calibration=other, cache=cache) != (
        found["int8_static"].path
    )


def test_accuracy_figures_are_computed_not_assumed(source, checks, tmp_path):
    # A model whose weights were damaged must score worse than the model itself.
    model = onnx.load(str(source.model_file))
    weights = onnx.numpy_helper.to_array(model.graph.initializer[0]).copy()
    weights *= -1
    model.graph.initializer[0].CopyFrom(
        onnx.numpy_helper.from_array(weights, model.graph.initializer[0].name)
    )
    damaged = tmp_path / "damaged.onnx"
    onnx.save(model, str(damaged))
    batches = precision_data(source.base_config).evaluation
    same = compare_models(source.model_file, source.model_file, batches)
    assert same.max_abs_error == 0 and same.cosine == pytest.approx(1.0) and same.top1_agreement == 1
    worse = compare_models(source.model_file, damaged, batches)
    assert worse.cosine < 0.9 and worse.top1_agreement < 0.9


def test_bad_input(source, tmp_path):
    with pytest.raises(InputError, match="precision 'fp8' is not one of"):
        prepare_precisions(source.model_file, source.base_config, ["fp8"])
    with pytest.raises(InputError, match="need an ONNX model"):
        prepare_precisions(tmp_path / "model.pt", source.base_config, ["fp16"])
    bad = tmp_path / "calibration.json"
    bad.write_text(json.dumps({"data": [{"INPUT": [0.5] * 10}]}))
    with pytest.raises(InputError, match=r"data\[0\].INPUT: 10 values do not fill shape \[256\]"):
        prepare_precisions(source.model_file, source.base_config, ["int8_static"], input_data=bad)
    with pytest.raises(InputError, match="cosine='high' is not a number"):
        parse_tolerance("cosine=high")
    with pytest.raises(InputError, match="KEY one of cosine, cosine_p5, top1, kl, rel, max_abs"):
        parse_tolerance("speed=1")


def test_a_converter_failure_is_a_reason_not_a_crash(source, tmp_path):
    broken = tmp_path / "model.onnx"
    broken.write_bytes(b"not an onnx file")
    found = prepare_precisions(broken, source.base_config, ["fp16"], cache=tmp_path / "cache")
    assert not found["fp16"].accepted
    assert found["fp16"].reason.startswith("conversion failed: ")
    assert not list((tmp_path / "cache").glob("*.onnx")), "no half-built variant is left"


def test_user_inputs_are_split_into_calibration_and_evaluation(source, tmp_path):
    rng = np.random.default_rng(0)
    data = tmp_path / "inputs.json"
    entries = [{"INPUT": rng.standard_normal(256).round(4).tolist()} for _ in range(8)]
    data.write_text(json.dumps({"data": entries}))
    found = prepare_precisions(
        source.model_file, source.base_config, ["int8_static"], input_data=data,
        cache=tmp_path / "cache",
    )  # fmt: skip
    check = found["int8_static"]
    # held out: half the samples calibrate, the other half judge
    assert check.figures is not None and check.figures.samples == 4
    assert check.figures.calibration_samples == 4
    assert str(data) in check.data and "disjoint halves" in check.data


def test_calibration_data_of_its_own_and_one_that_does_not_fit(source, tmp_path):
    rng = np.random.default_rng(3)
    data, calibration, wrong = tmp_path / "data.json", tmp_path / "calib.json", tmp_path / "wrong.json"
    data.write_text(
        json.dumps({"data": [{"INPUT": rng.standard_normal(256).round(4).tolist()} for _ in range(6)]})
    )
    calibration.write_text(
        json.dumps({"data": [{"INPUT": rng.standard_normal(256).round(4).tolist()} for _ in range(5)]})
    )
    wrong.write_text(json.dumps({"data": [{"OTHER": [0.0] * 256}]}))
    both = precision_data(source.base_config, data, calibration_data=calibration)
    assert (both.calibration_samples, both.evaluation_samples) == (5, 6)  # every input sample judges
    found = prepare_precisions(
        source.model_file, source.base_config, ["fp16", "int8_static"], input_data=data,
        accuracy=AccuracySettings(calibration_data=wrong), cache=tmp_path / "cache",
    )  # fmt: skip
    assert found["fp16"].accepted  # only the variant that calibrates leaves the space
    static = found["int8_static"]
    assert not static.accepted and static.reason.startswith("calibration data: ")
    assert "has no value for input 'INPUT'" in static.reason


def test_pre_processing_leaves_nothing_in_the_working_directory(source, tmp_path, monkeypatch):
    """onnxruntime's symbolic shape inference writes a debug model into the working directory when
    it fails; tritontune runs it elsewhere, then falls back to ONNX's shape inference."""
    import onnxruntime.quantization.shape_inference as shape_inference

    from tritontune.precision.convert import preprocessed

    real = shape_inference.quant_pre_process
    calls = []

    def failing_symbolic(model, out, **options):
        calls.append(options)
        if not options.get("skip_symbolic_shape"):
            Path("sym_shape_infer_temp.onnx").write_bytes(b"debug model")  # what onnxruntime does
            raise RuntimeError("Incomplete symbolic shape inference")
        return real(model, out, **options)

    monkeypatch.setattr(shape_inference, "quant_pre_process", failing_symbolic)
    user_dir = tmp_path / "user"
    user_dir.mkdir()
    monkeypatch.chdir(user_dir)
    result = preprocessed(source.model_file, tmp_path)
    assert result.is_file() and [c.get("skip_symbolic_shape", False) for c in calls] == [False, True]
    assert list(user_dir.iterdir()) == []
    assert Path.cwd() == user_dir


def opset_12_conv(path: Path) -> Path:
    """A convolution with a bias, in ONNX opset 12 (PP-OCRv4's text detector's opset)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = numpy_helper.from_array(rng.standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(4).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
        "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, 8, 8])],
        [weights, bias],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    model.ir_version = 7
    onnx.save(model, str(path))
    return path


def test_a_graph_older_than_opset_13_gets_per_channel_static_int8_that_runs(tmp_path):
    """Per-channel QDQ needs DequantizeLinear's axis (opset 13): on the opset-12 text detector
    every static INT8 recipe built a graph onnxruntime refused to load."""
    import onnxruntime as ort

    from tritontune.config.variant import Precision
    from tritontune.precision.convert import default_opset
    from tritontune.precision.recipe import Calibration, Recipe

    model = opset_12_conv(tmp_path / "conv.onnx")
    recipe = Recipe(Precision.INT8_STATIC, ("Conv",), calibration=Calibration.MINMAX)
    rng = np.random.default_rng(1)
    batches = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]
    variant = build_variant(model, recipe, calibration=batches, cache=tmp_path / "cache")
    session = ort.InferenceSession(str(variant), providers=["CPUExecutionProvider"])
    built = onnx.load(str(variant))
    assert default_opset(built) == 13
    assert any(n.op_type == "DequantizeLinear" for n in built.graph.node)
    (out,) = session.run(None, batches[0])
    (expected,) = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"]).run(
        None, batches[0]
    )
    assert out.shape == (2, 4, 8, 8)
    assert np.abs(out - expected).mean() < 0.05 * np.abs(expected).mean()  # INT8, not noise


def test_a_configs_string_inputs_are_read_as_bytes():
    from tritontune.config.model_config import parse_config_text
    from tritontune.precision.prepare import config_input_specs

    config = parse_config_text(
        'name: "e" platform: "ensemble" max_batch_size: 4 '
        'input [{ name: "TEXT" data_type: TYPE_STRING dims: [1] }, '
        '{ name: "IDS" data_type: TYPE_INT64 dims: [-1] }]',
        source="test",
    )
    specs = config_input_specs(config)
    assert [(s.name, s.datatype, s.shape) for s in specs] == [
        ("TEXT", "BYTES", (1,)),
        ("IDS", "INT64", (-1,)),
    ]


def test_calibration_batches_have_one_size_so_every_calibration_method_runs(source, tmp_path):
    """onnxruntime's histogram calibrators (percentile, entropy) fail on batches of different
    shapes: 26 VGG16 images as 16 + 10 did. 52 samples: 26 calibrate, as 2 batches of 13."""
    rng = np.random.default_rng(0)
    data = tmp_path / "inputs.json"
    entries = [{"INPUT": rng.standard_normal(256).round(4).tolist()} for _ in range(52)]
    data.write_text(json.dumps({"data": entries}))
    split = precision_data(source.base_config, data)
    assert [batch["INPUT"].shape for batch in split.calibration] == [(13, 256)] * 2
    assert split.calibration_samples == 26
    found = prepare_precisions(
        source.model_file, source.base_config, ["int8_static"], input_data=data,
        accuracy=AccuracySettings(calibrations=(Calibration.PERCENTILE,)), cache=tmp_path / "cache",
    )  # fmt: skip
    assert found["int8_static"].accepted, found["int8_static"].reason


def test_7_bit_weights_reach_the_quantizer(tmp_path):
    """A 7-bit recipe's INT8 weights stay within +-64; an 8-bit one's use the whole range."""
    from tritontune.config.variant import Precision
    from tritontune.precision.recipe import Recipe

    model = opset_12_conv(tmp_path / "conv.onnx")
    rng = np.random.default_rng(1)
    batches = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]

    def weights_range(reduce_range: bool) -> tuple[int, int]:
        recipe = Recipe(Precision.INT8_STATIC, ("Conv",), calibration=Calibration.MINMAX,
                        reduce_range=reduce_range)  # fmt: skip
        built = onnx.load(str(build_variant(model, recipe, calibration=batches, cache=tmp_path)))
        ints = [
            onnx.numpy_helper.to_array(t)
            for t in built.graph.initializer
            if t.data_type == onnx.TensorProto.INT8 and t.dims and len(t.dims) == 4
        ]
        return min(int(w.min()) for w in ints), max(int(w.max()) for w in ints)

    assert max(map(abs, weights_range(reduce_range=True))) <= 64
    assert max(map(abs, weights_range(reduce_range=False))) > 64
