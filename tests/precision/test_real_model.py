"""Precision variants of a real pretrained model: all-MiniLM-L6-v2 with real tokenized sentences.

The example MLP is ours; this model is not. Its INT8 variants are built by the recipes for
transformers and judged as the sentence embeddings they are, on held-out sentences.
"""

import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from tests.conftest import MINILM_DIR, RealModel, load_minilm_example
from tritontune.config.repository import load_model_source
from tritontune.config.variant import Precision
from tritontune.errors import InputError
from tritontune.precision.accuracy import OutputKind, compare_models, judge
from tritontune.precision.convert import build_variant, cache_dir
from tritontune.precision.prepare import AccuracySettings, precision_data, prepare_precisions
from tritontune.precision.recipe import Calibration, KeepFloat, ModelFamily, Recipe, model_family

pytestmark = pytest.mark.real_model
REFERENCE = Path(__file__).parent / "data" / "minilm_reference.json"


@pytest.fixture(scope="module")
def source(real_model: RealModel):
    return load_model_source(real_model.repository, real_model.name)


@pytest.fixture(scope="module")
def cache() -> Path:
    """The cache a search uses: the variants built here (this model, its data, the recipes a
    search tries first) are the ones the searches of the real model in this suite build too, and
    each takes up to 20 s to build, so each is built once a run. Its keys are the model's, the
    recipe's and the calibration data's digests: a variant found there is the one asked for."""
    return cache_dir()


def test_the_onnx_export_gives_the_reference_embeddings(real_model: RealModel, source):
    """The graph make_minilm.py writes against the PyTorch implementation's own embeddings."""
    reference = json.loads(REFERENCE.read_text())
    example = load_minilm_example()
    tokens = example.tokenize(reference["sentences"], example.model_dir())
    ids = [[int(t) for t in row if t != 0] for row in tokens["input_ids"]]
    assert ids == reference["input_ids"]  # the same tokenizer, the same ids
    session = onnxruntime.InferenceSession(str(source.model_file), providers=["CPUExecutionProvider"])
    got = session.run(None, tokens)[0]
    expected = np.array(reference["embeddings"], dtype=np.float32)
    assert np.abs(got - expected).max() < 1e-4
    assert (got * expected).sum(axis=1).min() > 0.99999
    # and it is a sentence encoder: paraphrases are closer than unrelated sentences
    assert got[0] @ got[1] > 0.5 > 0.1 > got[0] @ got[2]


def test_the_model_and_its_data_are_what_the_recipes_expect(real_model: RealModel, source):
    import onnx

    assert model_family(onnx.load(str(source.model_file), load_external_data=False)) == (
        ModelFamily.TRANSFORMER
    )
    data = precision_data(source.base_config, real_model.inputs)
    assert data.calibration_samples == data.evaluation_samples == 128  # disjoint halves of 256
    assert data.calibration[0]["input_ids"].shape == (16, 128)


def test_per_channel_int8_passes_the_gate_and_per_tensor_fails(real_model: RealModel, source, cache):
    checks = prepare_precisions(
        source.model_file, source.base_config, ["fp32", "int8_dynamic"],
        input_data=real_model.inputs, cache=cache,
    )  # fmt: skip
    check = checks["int8_dynamic"]
    assert check.accepted, check.reason
    assert check.recipe is not None and check.recipe.per_channel and not check.recipe.keep_float
    output = check.figures.outputs[0]
    assert (output.name, output.kind, output.kind_source) == (
        "sentence_embedding", OutputKind.EMBEDDING, "graph: L2-normalized"
    )  # fmt: skip
    assert output.top1_agreement is None and output.samples == 128
    assert 0.985 <= output.cosine <= 1.0 and output.cosine_p5 >= 0.97
    assert "per-channel" in check.summary() and "cos mean" in check.summary()

    # The old recipe (per-tensor weights, every op type) is measurably worse and the gate says so.
    per_tensor = Recipe(Precision.INT8_DYNAMIC, per_channel=False, weights_only_matmul=False)
    path = build_variant(source.model_file, per_tensor, cache=cache)
    data = precision_data(source.base_config, real_model.inputs)
    figures = compare_models(source.model_file, path, data.evaluation)
    assert figures.cosine < output.cosine
    problems = judge("int8_dynamic", figures)
    assert problems and all(p.startswith("sentence_embedding: cosine") for p in problems), problems


def test_static_int8_keeps_the_gelu_fed_matmul_in_float(real_model: RealModel, source, cache):
    """Every MatMul in INT8 breaks this encoder (its GELU outputs are heavy-tailed); the second
    graph keeps those MatMuls in float and passes, before any 7-bit-weight candidate is built."""
    checks = prepare_precisions(
        source.model_file, source.base_config, ["int8_static"], input_data=real_model.inputs,
        accuracy=AccuracySettings(calibrations=(Calibration.MINMAX,)), cache=cache,
    )  # fmt: skip
    check = checks["int8_static"]
    assert check.accepted, check.reason
    assert check.recipe is not None and check.recipe.keep_float == (KeepFloat.GELU_FED_MATMUL,)
    assert len(check.tried) == 1 and "cosine" in check.tried[0]
    assert check.figures.calibration_samples == 128 and check.figures.samples == 128
    assert "128 held-out samples" in check.summary()


def test_static_int8_refuses_made_up_token_ids(source, cache):
    checks = prepare_precisions(source.model_file, source.base_config, ["int8_static"], cache=cache)
    check = checks["int8_static"]
    assert not check.accepted and check.path is None
    assert "needs real calibration inputs" in check.reason and "input_ids" in check.reason


def test_too_few_samples_to_split_and_data_that_does_not_fit(source, cache, tmp_path):
    few = tmp_path / "few.json"
    document = json.loads((MINILM_DIR / "inputs.json").read_text())
    few.write_text(json.dumps({"data": document["data"][:3]}))
    checks = prepare_precisions(
        source.model_file, source.base_config, ["int8_static"], input_data=few, cache=cache
    )
    assert not checks["int8_static"].accepted
    assert "3 samples: too few to split" in checks["int8_static"].reason
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps({"data": [{"INPUT": [0.5] * 256}]}))
    with pytest.raises(InputError, match=r"data\[0\] has no value for input 'input_ids'"):
        prepare_precisions(
            source.model_file, source.base_config, ["int8_dynamic"], input_data=wrong, cache=cache
        )
