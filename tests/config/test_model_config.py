from pathlib import Path

import pytest

from tritontune.config.model_config import (
    backend_of,
    config_from_json,
    config_to_json,
    config_to_text,
    parse_config_text,
    read_config,
    set_parameter,
)
from tritontune.errors import ConfigError


def test_example_config_round_trips(example_repository: Path):
    config = read_config(example_repository / "mlp" / "config.pbtxt")
    assert config.max_batch_size == 64
    assert [i.name for i in config.input] == ["INPUT"]
    again = parse_config_text(config_to_text(config))
    assert again == config
    assert config_from_json(config_to_json(config)) == config


def test_parse_error_names_file_and_line(tmp_path: Path):
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\nmax_batch_size: 8\nmax_batch_sise: 4\n')
    with pytest.raises(ConfigError) as err:
        read_config(path)
    message = str(err.value)
    assert message.startswith(f"{path}:3:")
    assert "max_batch_sise" in message
    assert "\n" not in message


def test_syntax_error_names_the_line(tmp_path: Path):
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "m"\ninput [ { name: "x" \n')
    with pytest.raises(ConfigError, match=r"config.pbtxt:\d+"):
        read_config(path)


def test_missing_file_is_a_clear_error(tmp_path: Path):
    with pytest.raises(ConfigError, match="cannot read the model config"):
        read_config(tmp_path / "nope.pbtxt")


def test_parameters_and_backend():
    config = parse_config_text('platform: "onnxruntime_onnx"')
    assert backend_of(config) == "onnxruntime"
    set_parameter(config, "intra_op_thread_count", 2)
    assert config.parameters["intra_op_thread_count"].string_value == "2"
