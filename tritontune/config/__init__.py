"""Model configs: read/write as protobuf, derive from ONNX, apply variants, validate, templates.

This layer knows nothing of servers or load.
"""

from tritontune.config.model_config import (
    ModelConfig,
    config_to_json,
    config_to_text,
    parse_config_text,
    read_config,
    write_config,
)
from tritontune.config.onnx_model import derive_onnx_config
from tritontune.config.repository import (
    ModelSource,
    ServedModel,
    WorkingRepository,
    load_model_source,
)
from tritontune.config.validate import TargetCapabilities, config_problems, validate_config
from tritontune.config.variant import Variant, apply_variant, describe_config

__all__ = [
    "ModelConfig",
    "ModelSource",
    "ServedModel",
    "TargetCapabilities",
    "Variant",
    "WorkingRepository",
    "apply_variant",
    "config_problems",
    "config_to_json",
    "config_to_text",
    "derive_onnx_config",
    "describe_config",
    "load_model_source",
    "parse_config_text",
    "read_config",
    "validate_config",
    "write_config",
]
