import ast

from tritontune.config.templates import render, render_config


def test_python_model_template_is_valid_python():
    source = render("python_onnx/model.py.j2", name="m", onnx_file="model.onnx", tritontune_version="x")
    ast.parse(source)
    assert "intra_op_thread_count" in source
    assert "np.concatenate" in source  # batches really run as one call


def test_config_templates_parse_into_model_configs():
    python = render_config("python_onnx/config.pbtxt.j2", name="m", onnx_file="w.onnx")
    assert python.backend == "python"
    assert python.parameters["onnx_model_file"].string_value == "w.onnx"
    native = render_config("onnxruntime/config.pbtxt.j2", name="m", max_batch_size=8)
    assert (native.backend, native.max_batch_size) == ("onnxruntime", 8)


def test_python_model_reads_the_graph_level_as_the_onnxruntime_backend_does():
    source = render("python_onnx/model.py.j2", name="m", onnx_file="model.onnx", tritontune_version="x")
    assert '.get("optimization", {}).get("graph", {}).get("level", 0)' in source
    for level, name in ((0, "ORT_ENABLE_ALL"), (-1, "ORT_ENABLE_BASIC"), (1, "ORT_ENABLE_EXTENDED"),
                        (2, "ORT_DISABLE_ALL")):  # fmt: skip
        assert f"{level}: ort.GraphOptimizationLevel.{name}" in source
