import pytest

from tritontune.config.model_config import parse_config_text
from tritontune.config.variant import Variant, apply_variant, describe_config
from tritontune.errors import ConfigError

BASE = parse_config_text(
    """
    name: "m" backend: "onnxruntime" max_batch_size: 8
    input { name: "x" data_type: TYPE_FP32 dims: [4] }
    output { name: "y" data_type: TYPE_FP32 dims: [4] }
    instance_group { count: 1 kind: KIND_CPU }
    """
)


def test_empty_variant_is_the_base():
    assert apply_variant(BASE, Variant()) == BASE


def test_all_knobs_applied_and_base_untouched():
    before = BASE.SerializeToString()
    config = apply_variant(
        BASE,
        Variant(
            max_batch_size=32,
            max_queue_delay_us=2000,
            preferred_batch_sizes=(8, 16),
            max_queue_size=64,
            timeout_action="reject",
            queue_timeout_us=100_000,
            instance_count=3,
            response_cache=True,
            backend_parameters={"intra_op_thread_count": "1"},
        ),
    )
    assert BASE.SerializeToString() == before
    assert config.max_batch_size == 32
    db = config.dynamic_batching
    assert db.max_queue_delay_microseconds == 2000
    assert list(db.preferred_batch_size) == [8, 16]
    assert db.default_queue_policy.max_queue_size == 64
    assert db.default_queue_policy.default_timeout_microseconds == 100_000
    assert len(config.instance_group) == 1
    assert config.instance_group[0].count == 3
    assert describe_config(config)["instance_group"] == [{"count": 3, "kind": "KIND_CPU"}]
    assert config.response_cache.enable
    assert config.parameters["intra_op_thread_count"].string_value == "1"


def test_dynamic_batching_switches():
    on = apply_variant(BASE, Variant(dynamic_batching=True))
    assert on.HasField("dynamic_batching")
    off = apply_variant(on, Variant(dynamic_batching=False))
    assert not off.HasField("dynamic_batching")
    assert describe_config(off)["dynamic_batching"] is False


def test_queue_knob_with_batching_off_is_refused():
    with pytest.raises(ConfigError, match="max_queue_delay_us set while dynamic batching is off"):
        apply_variant(BASE, Variant(dynamic_batching=False, max_queue_delay_us=100))


def test_instance_kind_names():
    gpu = apply_variant(BASE, Variant(instance_kind="gpu"))
    assert describe_config(gpu)["instance_group"] == [{"count": 1, "kind": "KIND_GPU"}]
    with pytest.raises(ConfigError, match="instance kind 'tpu'"):
        apply_variant(BASE, Variant(instance_kind="tpu"))


def test_to_dict_lists_only_set_knobs():
    assert Variant(instance_count=2).to_dict() == {"instance_count": 2}
