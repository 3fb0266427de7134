"""The accuracy gate judges each output by its kind; kinds come from the user, the graph or the name."""

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tritontune.errors import InputError
from tritontune.precision.accuracy import (
    AccuracyFigures,
    OutputKind,
    compare_models,
    infer_output_kinds,
    judge,
    output_figures,
    parse_output_kinds,
)


def _graph(last_op: str, output: str = "out") -> onnx.ModelProto:
    """x [N, 4] -> MatMul -> (last_op) -> out."""
    weights = helper.make_tensor("w", TensorProto.FLOAT, [4, 4], np.eye(4, dtype=np.float32).ravel())
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"])]
    if last_op == "Softmax":
        nodes.append(helper.make_node("Softmax", ["h"], [output], axis=-1))
    elif last_op == "L2":
        nodes += [
            helper.make_node("ReduceL2", ["h"], ["norm"], axes=[-1], keepdims=1),
            helper.make_node("Max", ["norm", "eps"], ["clipped"]),
            helper.make_node("Div", ["h", "clipped"], [output]),
        ]
    else:
        nodes.append(helper.make_node("Identity", ["h"], [output]))
    eps = helper.make_tensor("eps", TensorProto.FLOAT, [], [1e-12])
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["n", 4])],
        [weights, eps],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_graph_says_what_an_output_is():
    assert infer_output_kinds(_graph("Softmax"))["out"] == (
        OutputKind.CLASSIFIER,
        "graph: ends in Softmax",
    )
    assert infer_output_kinds(_graph("L2"))["out"] == (OutputKind.EMBEDDING, "graph: L2-normalized")
    assert infer_output_kinds(_graph("none", "logits"))["logits"][0] == OutputKind.CLASSIFIER
    assert infer_output_kinds(_graph("none", "pooled_embedding"))["pooled_embedding"][0] == (
        OutputKind.EMBEDDING
    )
    assert infer_output_kinds(_graph("none", "y"))["y"] == (OutputKind.REGRESSION, "default")


def test_a_declared_kind_wins_and_a_wrong_name_is_refused():
    declared = parse_output_kinds("out=regression")
    assert infer_output_kinds(_graph("Softmax"), declared)["out"] == (OutputKind.REGRESSION, "declared")
    assert infer_output_kinds(_graph("L2"), parse_output_kinds("classifier"))["out"][0] == (
        OutputKind.CLASSIFIER
    )
    with pytest.raises(InputError, match=r"names 'scores', not outputs of the model \(outputs: out\)"):
        infer_output_kinds(_graph("L2"), parse_output_kinds("scores=classifier"))
    with pytest.raises(InputError, match="'vector' is not an output kind"):
        parse_output_kinds("vector")
    assert parse_output_kinds({"a": "Embedding", "b": "classifier"}) == {
        "a": OutputKind.EMBEDDING,
        "b": OutputKind.CLASSIFIER,
    }


def test_an_embedding_is_judged_by_cosine_not_by_top1():
    rng = np.random.default_rng(0)
    reference = rng.standard_normal((200, 384))
    close = reference + 0.1 * rng.standard_normal(reference.shape)  # cos ~0.995 per row
    figures = AccuracyFigures(
        (output_figures("emb", OutputKind.EMBEDDING, "declared", reference, close),)
    )
    only = figures.outputs[0]
    assert only.top1_agreement is None  # "top-1" of an embedding means nothing: not computed
    assert only.cosine > 0.99 and only.cosine_p5 <= only.cosine
    assert judge("int8_dynamic", figures) == []
    # The same noise judged as class scores: top-1 of 384 near-equal "classes" flips often.
    as_scores = output_figures("emb", OutputKind.CLASSIFIER, "declared", reference, close)
    assert as_scores.top1_agreement is not None and as_scores.top1_agreement < 0.95
    # A broken embedding (a tenth of the vectors scrambled) fails on the 5th percentile.
    broken = close.copy()
    broken[:20] = rng.standard_normal((20, 384))
    bad = AccuracyFigures((output_figures("emb", OutputKind.EMBEDDING, "x", reference, broken),))
    problems = judge("int8_dynamic", bad)
    assert any("cosine p5" in p for p in problems), problems


def test_probabilities_are_judged_by_top1_and_kl():
    rng = np.random.default_rng(1)
    logits = rng.standard_normal((500, 10)) * 3
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    shifted = np.exp(logits * 0.5) / np.exp(logits * 0.5).sum(axis=1, keepdims=True)  # same argmax
    figures = output_figures("probs", OutputKind.CLASSIFIER, "graph", p, shifted)
    assert figures.top1_agreement == 1.0
    assert figures.kl_divergence is not None and figures.kl_divergence > 0.05
    problems = judge("int8_static", AccuracyFigures((figures,)))
    assert problems == [f"probs: KL divergence {figures.kl_divergence:.3g} > 0.05"]


def test_a_regression_output_is_judged_by_relative_error():
    a = np.linspace(1, 2, 100).reshape(50, 2)
    figures = AccuracyFigures((output_figures("y", OutputKind.REGRESSION, "default", a, a * 1.2),))
    assert figures.outputs[0].top1_agreement is None
    assert judge("int8_dynamic", figures) == ["y: relative error 0.2 > 0.1"]
    assert judge("int8_dynamic", figures, {"max_relative_error": 0.25}) == []


def test_figures_round_trip_and_old_records_read():
    a = np.eye(3)
    figures = AccuracyFigures(
        (output_figures("s", OutputKind.CLASSIFIER, "name 's'", a, a),), calibration_samples=7
    )
    again = AccuracyFigures.from_dict(figures.to_dict())
    assert again.outputs[0].kind == OutputKind.CLASSIFIER and again.calibration_samples == 7
    assert again.summary() == figures.summary()
    old = {"max_abs_error": 0.1, "relative_error": 0.02, "cosine": 0.999, "top1_agreement": 1.0}
    assert AccuracyFigures.from_dict(old).summary().startswith("top-1 100.0%")


def test_compare_models_uses_the_graphs_kind(tmp_path: Path):
    model = _graph("L2")
    path = tmp_path / "m.onnx"
    onnx.save(model, str(path))
    batches = [{"x": np.random.default_rng(2).standard_normal((8, 4)).astype(np.float32)}]
    same = compare_models(path, path, batches)
    assert same.outputs[0].kind == OutputKind.EMBEDDING
    assert same.cosine == pytest.approx(1.0) and same.max_abs_error == 0
