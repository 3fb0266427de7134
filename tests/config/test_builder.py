"""Variant -> validated config, with no server (what a trial would load)."""

from pathlib import Path

import pytest

from tritontune.config.builder import ConfigBuilder
from tritontune.config.repository import load_model_source
from tritontune.config.validate import TargetCapabilities
from tritontune.config.variant import Precision, Variant
from tritontune.errors import ConfigError, InputError

CPU = TargetCapabilities(backends=frozenset({"onnxruntime"}))


@pytest.fixture
def builder(example_repository: Path) -> ConfigBuilder:
    return ConfigBuilder(load_model_source(example_repository, "mlp"), CPU, batch_size=4)


def test_a_variant_becomes_the_users_config_with_its_knobs(builder: ConfigBuilder):
    config = builder.build(Variant(max_batch_size=32, max_queue_delay_us=500, instance_count=2))
    assert config.backend == "onnxruntime" and config.max_batch_size == 32
    assert config.dynamic_batching.max_queue_delay_microseconds == 500
    assert config.instance_group[0].count == 2
    assert builder.batch_dim_dynamic  # the example's ONNX graph takes any batch size


def test_configs_triton_would_refuse_are_refused_before_loading(builder: ConfigBuilder):
    with pytest.raises(InputError, match="--batch-size 4 exceeds max_batch_size 2"):
        builder.build(Variant(max_batch_size=2))
    with pytest.raises(ConfigError, match="GPU"):
        builder.build(Variant(instance_kind="gpu"))  # this server has no GPU


def test_only_accepted_precisions_are_built(builder: ConfigBuilder):
    with pytest.raises(ConfigError, match="precision 'int8_static' of 'mlp': not prepared"):
        builder.build(Variant(precision=Precision.INT8_STATIC))
    builder.allow_precisions({"fp16": None, "int8_static": "cosine 0.33 < 0.99"})
    assert builder.build(Variant(precision=Precision.FP16)).default_model_filename == "model.fp16.onnx"
    with pytest.raises(ConfigError, match="cosine 0.33 < 0.99"):
        builder.build(Variant(precision=Precision.INT8_STATIC))
