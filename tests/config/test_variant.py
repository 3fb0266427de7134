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


def test_precision_points_the_config_at_the_variant_file():
    from tritontune.config.variant import precision_of, variant_filename

    fp16 = apply_variant(BASE, Variant(precision="fp16"))
    assert fp16.default_model_filename == "model.fp16.onnx"
    assert precision_of(fp16) == "fp16" and describe_config(fp16)["precision"] == "fp16"
    assert fp16.input[0].data_type == BASE.input[0].data_type  # FP32 I/O kept
    io = apply_variant(BASE, Variant(precision="fp16_io"))
    assert io.input[0].data_type == io.output[0].data_type != BASE.input[0].data_type
    # fp32 is the base config's own model file
    back = apply_variant(BASE, Variant(precision="fp32"))
    assert back.default_model_filename == "" and "precision" not in describe_config(back)
    assert variant_filename("net.onnx", "int8_static") == "net.int8_static.onnx"
    assert precision_of(apply_variant(BASE, Variant(precision="int8_static"))) == "int8_static"


def test_tensorrt_precision_is_written_as_an_accelerator():
    from tritontune.config.validate import TargetCapabilities, config_problems

    gpu = apply_variant(BASE, Variant(instance_kind="gpu", tensorrt_precision="fp16"))
    (trt,) = gpu.optimization.execution_accelerators.gpu_execution_accelerator
    assert trt.name == "tensorrt" and trt.parameters["precision_mode"] == "FP16"
    assert describe_config(gpu)["tensorrt_precision"] == "FP16"
    again = apply_variant(gpu, Variant(tensorrt_precision="INT8"))
    assert len(again.optimization.execution_accelerators.gpu_execution_accelerator) == 1
    assert config_problems(gpu, TargetCapabilities(gpu_count=1)) == []
    problems = " ".join(config_problems(gpu, TargetCapabilities(gpu_count=0)))
    assert "needs a GPU, and the server has none" in problems
    cpu = apply_variant(BASE, Variant(tensorrt_precision="FP16"))  # BASE has KIND_CPU
    assert "need KIND_GPU instances" in " ".join(config_problems(cpu))
    with pytest.raises(ConfigError, match="tensorrt precision 'fp8'"):
        apply_variant(BASE, Variant(tensorrt_precision="fp8"))


def test_graph_optimization_is_the_onnxruntime_backends_level():
    from tritontune.config.variant import knobs_summary

    for name, level in (("basic", -1), ("extended", 1), ("disabled", 2)):
        config = apply_variant(BASE, Variant(graph_optimization=name))
        assert config.optimization.graph.level == level
        assert describe_config(config)["graph_optimization"] == name
        assert f"graph={name}" in knobs_summary(describe_config(config))
    # "all" is the backend's default: no graph block at all, and nothing to describe
    every = apply_variant(
        apply_variant(BASE, Variant(graph_optimization="basic")), Variant(graph_optimization="all")
    )
    assert not every.optimization.HasField("graph")
    assert "graph_optimization" not in describe_config(every)
    with pytest.raises(ConfigError, match="graph optimization 'max' is not one of all, extended"):
        apply_variant(BASE, Variant(graph_optimization="max"))
