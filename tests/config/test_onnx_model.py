from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from tritontune.config.model_config import DATA_TYPES
from tritontune.config.onnx_model import DEFAULT_MAX_BATCH_SIZE, derive_onnx_config
from tritontune.errors import ConfigError


def test_derives_batched_config_from_example(example_repository: Path):
    config = derive_onnx_config(example_repository / "mlp" / "1" / "model.onnx", "mlp")
    assert config.backend == "onnxruntime"
    assert config.max_batch_size == DEFAULT_MAX_BATCH_SIZE
    assert [(t.name, list(t.dims)) for t in config.input] == [("INPUT", [256])]
    assert [(t.name, list(t.dims)) for t in config.output] == [("SCORES", [16])]
    assert config.input[0].data_type == DATA_TYPES["FP32"]


def test_fixed_first_dim_means_no_batching(tmp_path: Path):
    graph = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.INT64, [3, "n"])],
        [helper.make_tensor_value_info("y", TensorProto.INT64, [3, "n"])],
    )
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph), str(path))
    config = derive_onnx_config(path, "ident")
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [3, -1]
    assert config.input[0].data_type == DATA_TYPES["INT64"]


def test_broken_onnx_file(tmp_path: Path):
    path = tmp_path / "model.onnx"
    path.write_bytes(b"not an onnx model")
    with pytest.raises(ConfigError, match="not a readable ONNX model"):
        derive_onnx_config(path, "broken")


def test_io_check_catches_a_dropped_batch_dimension(example_repository: Path):
    from tritontune.config.model_config import read_config
    from tritontune.config.onnx_model import onnx_io_problems, onnx_io_shapes

    shapes = onnx_io_shapes(example_repository / "mlp" / "1" / "model.onnx")
    assert shapes == {"INPUT": [-1, 256], "SCORES": [-1, 16]}
    config = read_config(example_repository / "mlp" / "config.pbtxt")
    assert onnx_io_problems(config, shapes, "model.onnx") == []
    config.max_batch_size = 0
    problems = onnx_io_problems(config, shapes, "model.onnx")
    assert "input 'INPUT': dims [256] with max_batch_size 0 mean shape [256]" in problems[0]
    config.max_batch_size = 8
    config.input[0].dims[0] = 128
    config.input[0].name = "X"
    assert onnx_io_problems(config, shapes, "model.onnx") == ["input 'X': not in model.onnx"]
