import pytest

from tritontune.config.model_config import parse_config_text
from tritontune.config.validate import TargetCapabilities, config_problems, validate_config
from tritontune.errors import ConfigError

IO = """
input { name: "x" data_type: TYPE_FP32 dims: [4] }
output { name: "y" data_type: TYPE_FP32 dims: [4] }
"""
CPU_ONLY = TargetCapabilities(gpu_count=0, response_cache=False)


def config(text: str):
    return parse_config_text('name: "m" backend: "onnxruntime" ' + IO + text)


def test_valid_config_has_no_problems():
    good = config("max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 8] }")
    assert config_problems(good, CPU_ONLY) == []
    validate_config(good, CPU_ONLY)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "max_batch_size: 8 dynamic_batching { preferred_batch_size: [16] }",
            "preferred_batch_size: 16 is above max_batch_size 8",
        ),
        ("max_batch_size: 0 dynamic_batching { }", "max_batch_size 0 (it cannot batch)"),
        (
            "max_batch_size: 8 instance_group { kind: KIND_GPU }",
            "KIND_GPU but the server has no GPU",
        ),
        ("max_batch_size: 8 response_cache { enable: true }", "without a response cache"),
        (
            "max_batch_size: 8 dynamic_batching { priority_levels: 2 default_priority_level: 3 }",
            "default_priority_level: 3 is outside 1..2",
        ),
        ("max_batch_size: 8 dynamic_batching { preferred_batch_size: [4, 4] }", "sizes repeat"),
        ("max_batch_size: -1", "max_batch_size: -1 is negative"),
    ],
)
def test_problems_name_the_field(text, expected):
    with pytest.raises(ConfigError) as err:
        validate_config(config(text), CPU_ONLY)
    assert expected in str(err.value)
    assert str(err.value).startswith("config of 'm':")


def test_gpu_is_fine_where_the_server_has_one():
    gpu = config("max_batch_size: 8 instance_group { kind: KIND_GPU gpus: [0] }")
    assert config_problems(gpu, TargetCapabilities(gpu_count=1)) == []
    assert "GPU 1 does not exist" in " ".join(
        config_problems(
            config("max_batch_size: 8 instance_group { kind: KIND_GPU gpus: [1] }"),
            TargetCapabilities(gpu_count=1),
        )
    )


def test_missing_io_is_reported():
    bare = parse_config_text('name: "m" max_batch_size: 1')
    problems = config_problems(bare)
    assert any("no inputs" in p for p in problems)
    assert any("no outputs" in p for p in problems)
