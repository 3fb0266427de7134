"""Recipes: which candidates each precision tries, in which order, and what they keep in float."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from tritontune.config.variant import Precision
from tritontune.errors import InputError
from tritontune.precision.recipe import (
    Calibration,
    KeepFloat,
    ModelFamily,
    Recipe,
    candidates,
    keep_float_nodes,
    model_family,
    parse_calibration,
)


def _block() -> onnx.ModelProto:
    """A transformer block's shape: LayerNorm, attention scores (Softmax), an FFN with erf-GELU."""
    rng = np.random.default_rng(0)

    def weight(name: str, shape: tuple[int, ...]) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    scalar = {n: numpy_helper.from_array(np.array(v, np.float32), n) for n, v in
              (("sqrt2", 2**0.5), ("one", 1.0), ("half", 0.5))}  # fmt: skip
    nodes = [
        helper.make_node("LayerNormalization", ["x", "g", "b"], ["ln"], name="ln"),
        helper.make_node("MatMul", ["ln", "wq"], ["q"], name="query"),
        helper.make_node("MatMul", ["q", "q_t"], ["scores"], name="scores"),
        helper.make_node("Softmax", ["scores"], ["probs"], name="softmax"),
        helper.make_node("MatMul", ["ln", "w_in"], ["h"], name="ffn_in"),
        helper.make_node("Div", ["h", "sqrt2"], ["hs"], name="div"),
        helper.make_node("Erf", ["hs"], ["erf"], name="erf"),
        helper.make_node("Add", ["erf", "one"], ["erf1"], name="add1"),
        helper.make_node("Mul", ["h", "erf1"], ["hx"], name="mul"),
        helper.make_node("Mul", ["hx", "half"], ["gelu"], name="gelu"),
        helper.make_node("MatMul", ["gelu", "w_out"], ["y"], name="ffn_out"),
        helper.make_node("Transpose", ["q"], ["q_t"], name="t", perm=[1, 0]),
    ]
    graph = helper.make_graph(
        nodes, "block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8]),
         helper.make_tensor_value_info("probs", TensorProto.FLOAT, [4, 4])],
        [weight("g", (8,)), weight("b", (8,)), weight("wq", (8, 8)), weight("w_in", (8, 16)),
         weight("w_out", (16, 8)), *scalar.values()],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_family_comes_from_the_operators():
    assert model_family(_block()) == ModelFamily.TRANSFORMER
    conv = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"])], "c",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")],
    )  # fmt: skip
    assert model_family(helper.make_model(conv)) == ModelFamily.CNN


def test_only_the_matmul_fed_by_gelu_is_kept_in_float():
    assert keep_float_nodes(_block(), [KeepFloat.GELU_FED_MATMUL]) == ["ffn_out"]
    assert keep_float_nodes(_block(), []) == []


def test_candidates_most_quantized_first_calibration_within_a_graph():
    static = candidates(Precision.INT8_STATIC, ModelFamily.TRANSFORMER)
    assert [(r.keep_float, r.calibration, r.reduce_range) for r in static] == [
        ((), Calibration.MINMAX, False),
        ((), Calibration.PERCENTILE, False),
        ((), Calibration.ENTROPY, False),
        ((KeepFloat.GELU_FED_MATMUL,), Calibration.MINMAX, False),
        ((KeepFloat.GELU_FED_MATMUL,), Calibration.PERCENTILE, False),
        ((KeepFloat.GELU_FED_MATMUL,), Calibration.ENTROPY, False),
        ((), Calibration.MINMAX, True),  # 7-bit weights last, with the first method only
        ((KeepFloat.GELU_FED_MATMUL,), Calibration.MINMAX, True),
    ]
    assert all(r.per_channel and r.weights_only_matmul for r in static)
    assert static[0].op_types == ("MatMul", "Gemm", "Attention")
    dynamic = candidates(Precision.INT8_DYNAMIC, ModelFamily.TRANSFORMER)
    assert [(r.keep_float, r.reduce_range) for r in dynamic] == [
        ((), False),
        ((KeepFloat.GELU_FED_MATMUL,), False),
        ((), True),
        ((KeepFloat.GELU_FED_MATMUL,), True),
    ]
    assert all(r.calibration is None for r in dynamic)
    assert candidates(Precision.INT8_DYNAMIC, ModelFamily.CNN)[0].op_types == ("Conv", "MatMul", "Gemm")
    entropy = candidates(Precision.INT8_STATIC, ModelFamily.OTHER, (Calibration.ENTROPY,))
    assert [(r.calibration, r.reduce_range) for r in entropy] == [
        (Calibration.ENTROPY, False),
        (Calibration.ENTROPY, True),
    ]
    assert len(candidates(Precision.FP16, ModelFamily.TRANSFORMER)) == 1


def test_a_recipe_round_trips_and_says_what_it_is():
    recipe = candidates(Precision.INT8_STATIC, ModelFamily.TRANSFORMER)[3]
    assert Recipe.from_dict(recipe.to_dict()) == recipe
    assert recipe.label() == (
        "int8_static: per-channel MatMul/Gemm/Attention, gelu-fed-matmul in float, minmax calibration"
    )
    assert Recipe(Precision.FP16_IO).label() == "fp16_io: FP16 weights and compute, FP16 inputs/outputs"


def test_7_bit_weights_are_said_and_kept_and_an_older_recipe_reads_unchanged():
    seven = candidates(Precision.INT8_STATIC, ModelFamily.CNN)[-1]
    assert seven.reduce_range
    assert seven.label() == (
        "int8_static: per-channel Conv/MatMul/Gemm, 7-bit weights, minmax calibration"
    )
    assert Recipe.from_dict(seven.to_dict()) == seven
    # Written only when set: an 8-bit recipe's dict (a cache key, a study's record) is as before.
    eight = candidates(Precision.INT8_STATIC, ModelFamily.CNN)[0]
    assert "reduce_range" not in eight.to_dict()
    assert Recipe.from_dict(eight.to_dict()) == eight and not eight.reduce_range


def test_calibration_choice():
    assert parse_calibration("auto") == tuple(Calibration)
    assert parse_calibration("Entropy") == (Calibration.ENTROPY,)
    with pytest.raises(InputError, match="--calibration: 'kl' is not one of auto, minmax"):
        parse_calibration("kl")
