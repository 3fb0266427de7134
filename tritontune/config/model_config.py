"""Reading and writing Triton's ``config.pbtxt`` as a real protobuf ``ModelConfig``.

Configs are always parsed into tritonclient's ``model_config_pb2.ModelConfig`` and written back with
protobuf's ``text_format``: tritontune never builds a config by pasting strings, so a field name that
Triton would reject is caught here, with the file and line.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

from google.protobuf import json_format, text_format
from tritonclient.grpc import model_config_pb2

from tritontune.errors import ConfigError

if TYPE_CHECKING:
    # tritonclient ships its generated protobuf classes without type information: to the type
    # checker a ModelConfig is Any (protobuf itself checks every field at run time).
    ModelConfig: TypeAlias = Any
else:
    ModelConfig = model_config_pb2.ModelConfig

#: Triton's data types as written in config.pbtxt, mapped from the short names used in metadata.
DATA_TYPES = {
    name.removeprefix("TYPE_"): value
    for name, value in model_config_pb2.DataType.items()
    if name != "TYPE_INVALID"
}


def parse_config_text(text: str, *, source: str = "config.pbtxt") -> ModelConfig:
    """Parse config.pbtxt text; a syntax or field error names ``source`` and the line."""
    config = ModelConfig()
    try:
        text_format.Parse(text, config)
    except text_format.ParseError as err:
        line = err.GetLine()
        where = f"{source}:{line}" if line else source
        reason = str(err).split(" : ", 1)[-1]
        raise ConfigError(f"{where}: {reason}") from None
    return config


def read_config(path: Path) -> ModelConfig:
    """Read a ``config.pbtxt`` file."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"{path}: cannot read the model config ({err.strerror})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not a text file (expected protobuf text format)") from None
    return parse_config_text(text, source=str(path))


def config_to_text(config: ModelConfig) -> str:
    """The config in protobuf text format, as Triton reads it from ``config.pbtxt``."""
    return text_format.MessageToString(config)


def config_digest(config: ModelConfig) -> str:
    """sha256 of the config's canonical text: whitespace, comments and field order don't count."""
    return hashlib.sha256(config_to_text(config).encode("utf-8")).hexdigest()


def write_config(config: ModelConfig, path: Path) -> None:
    """Write ``config`` to ``path`` in text format (the directory must exist)."""
    path.write_text(config_to_text(config), encoding="utf-8")


def config_to_json(config: ModelConfig) -> str:
    """The config as JSON, the form Triton's ``load_model(config=...)`` override takes."""
    return json_format.MessageToJson(config, preserving_proto_field_name=True, indent=None)


def config_from_json(data: str | dict) -> ModelConfig:
    """Parse a config from Triton's JSON form (e.g. what ``get_model_config`` returns)."""
    text = data if isinstance(data, str) else json.dumps(data)
    config = ModelConfig()
    try:
        json_format.Parse(text, config, ignore_unknown_fields=True)
    except json_format.ParseError as err:
        raise ConfigError(f"model config JSON: {err}") from None
    return config


def copy_config(config: ModelConfig) -> ModelConfig:
    """A deep copy, so variants never share sub-messages with their base."""
    clone = ModelConfig()
    clone.CopyFrom(config)
    return clone


def set_parameter(config: ModelConfig, key: str, value: str | int) -> None:
    """Set a backend parameter, e.g. onnxruntime's ``intra_op_thread_count``."""
    config.parameters[key].string_value = str(value)


def backend_of(config: ModelConfig) -> str:
    """The backend a config asks for, whether named by ``backend`` or by the older ``platform``."""
    if config.backend:
        return config.backend
    platform_backends = {
        "onnxruntime_onnx": "onnxruntime",
        "tensorrt_plan": "tensorrt",
        "pytorch_libtorch": "pytorch",
        "tensorflow_savedmodel": "tensorflow",
        "tensorflow_graphdef": "tensorflow",
        "ensemble": "ensemble",
    }
    return platform_backends.get(config.platform, config.platform)
