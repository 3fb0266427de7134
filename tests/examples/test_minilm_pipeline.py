"""The MiniLM pipeline example (examples/minilm_pipeline): raw text in, sentence embeddings out.

``make_pipeline.py`` writes a Triton ensemble, ``tokenizer`` (a Python-backend model running the
model's own tokenizer) then ``minilm`` (the real encoder, linked from the MiniLM example). Served
through tritontune's own :class:`~tritontune.serving.server.Server` (the encoder through the
``python_onnx`` template, as the bundled server has only the Python backend), the ensemble must
give the embeddings onnxruntime gives for the same sentences tokenized in Python.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnxruntime
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.conftest import (
    RealModel,
    RealPipeline,
    load_minilm_example,
    load_pipeline_example,
    tritonserver_processes,
)
from tritontune.config.pipeline import load_pipeline
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.measure.inputs import TensorSpec, read_input_data
from tritontune.serving.server import Server

TOKENS = ("input_ids", "attention_mask", "token_type_ids")
EMBEDDING = "sentence_embedding"


def sentences(inputs: Path) -> list[str]:
    """The texts of a pipeline inputs file (perf_analyzer's format, one ``TEXT`` per entry)."""
    return [entry["TEXT"]["content"][0] for entry in json.loads(inputs.read_text())["data"]]


def files_of(directory: Path) -> dict[str, int]:
    return {str(p.relative_to(directory)): p.lstat().st_mtime_ns for p in directory.rglob("*")}


def test_the_build_writes_a_pipeline_triton_would_load(real_model: RealModel, tmp_path: Path):
    example = load_pipeline_example()
    repository, inputs = tmp_path / "model_repository", tmp_path / "inputs.json"
    example.build(repository, inputs, minilm_out=real_model.repository, minilm_inputs=real_model.inputs)

    pipeline = load_pipeline(repository, "text_encoder")  # Triton's checks, without a server
    assert [step.model for step in pipeline.steps] == ["tokenizer", "minilm"]
    assert pipeline.inputs == ("TEXT",) and pipeline.outputs == (EMBEDDING,)
    # the encoder is the MiniLM example's file, linked by a relative path, not copied
    link = repository / "minilm" / "1" / "model.onnx"
    assert link.is_symlink() and not Path(os.readlink(link)).is_absolute()
    assert link.resolve() == (real_model.repository / "minilm" / "1" / "model.onnx").resolve()
    # the tokenizer runs the model's own tokenizer file
    minilm = load_minilm_example()
    assert (repository / "tokenizer" / "1" / "tokenizer.json").read_bytes() == (
        minilm.tokenizer_file().read_bytes()
    )
    # the inputs are the MiniLM example's sentences, as tritontune reads them for TEXT
    texts = json.loads(real_model.inputs.read_text())["texts"]
    specs = [TensorSpec("TEXT", "BYTES", (1,))]
    payloads = read_input_data(inputs, specs, batch_size=3, batching=True)
    assert [p["TEXT"][0, 0].decode() for p in payloads] == texts
    assert payloads[0]["TEXT"].shape == (3, 1) and payloads[0]["TEXT"].dtype == object
    # built once: a second build without --force writes nothing
    before = files_of(tmp_path)
    example.build(repository, inputs, minilm_out=real_model.repository, minilm_inputs=real_model.inputs)
    assert files_of(tmp_path) == before


def add_ensemble(server: Server, source: ModelSource) -> None:
    """Put the ensemble in the server's working repository and load it (after its models)."""
    served = server.add_model(source)
    server.load_model(source.name, served.served_config(source.base_config))


def infer(
    client: grpcclient.InferenceServerClient, model: str, texts: list[str], outputs: Sequence[str]
) -> dict:
    """One request of ``texts`` (one per row of ``TEXT``, shape [len, 1]) to ``model``."""
    text = grpcclient.InferInput("TEXT", [len(texts), 1], "BYTES")
    text.set_data_from_numpy(np.array([[t.encode()] for t in texts], dtype=np.object_))
    result = client.infer(model, [text])
    return {name: result.as_numpy(name) for name in outputs}


def cosines(got: np.ndarray, expected: np.ndarray) -> np.ndarray:
    return (got * expected).sum(axis=1) / np.linalg.norm(got, axis=1) / np.linalg.norm(expected, axis=1)


@pytest.mark.functional
@pytest.mark.integration
def test_the_ensemble_embeds_text_as_onnxruntime_does(real_pipeline: RealPipeline, own_servers: Path):
    minilm = load_minilm_example()
    texts = sentences(real_pipeline.inputs)[::64]  # 4 sentences, from different modules' docs
    tokens = minilm.tokenize(texts, minilm.model_dir())
    encoder_file = real_pipeline.repository / real_pipeline.encoder / "1" / "model.onnx"
    direct = onnxruntime.InferenceSession(str(encoder_file), providers=["CPUExecutionProvider"])
    expected = direct.run([EMBEDDING], tokens)[0]

    with Server() as server:
        for name in (real_pipeline.tokenizer, real_pipeline.encoder):
            served = server.add_model(load_model_source(real_pipeline.repository, name))
            server.load_model(name, served.served_config(served.source.base_config))
        add_ensemble(server, load_model_source(real_pipeline.repository, real_pipeline.name))
        client = grpcclient.InferenceServerClient(server.info.grpc_url)
        try:
            by_tokenizer = infer(client, real_pipeline.tokenizer, texts, TOKENS)
            singles = [infer(client, real_pipeline.name, [t], [EMBEDDING])[EMBEDDING] for t in texts]
            batched = infer(client, real_pipeline.name, texts[:3], [EMBEDDING])[EMBEDDING]
            not_text = grpcclient.InferInput("TEXT", [1, 1], "BYTES")
            not_text.set_data_from_numpy(np.array([[b"\xff caf\xe9"]], dtype=np.object_))
            with pytest.raises(InferenceServerException, match="TEXT is not UTF-8 text"):
                client.infer(real_pipeline.name, [not_text])
        finally:
            client.close()

    # the served tokenizer gives exactly make_minilm.py's tokens (truncated and padded to 128)
    for name in TOKENS:
        np.testing.assert_array_equal(by_tokenizer[name], tokens[name], err_msg=name)
    # one sentence a request, and one request of three: the embeddings onnxruntime gives
    assert all(s.shape == (1, expected.shape[1]) for s in singles)
    assert cosines(np.concatenate(singles), expected).min() > 0.999
    assert batched.shape == (3, expected.shape[1])
    assert cosines(batched, expected[:3]).min() > 0.999
    assert tritonserver_processes(own_servers) == [], "a server was left running"


@pytest.mark.functional
@pytest.mark.integration
def test_the_encoders_int8_variant_is_judged_on_the_tokenizers_real_tokens(
    real_pipeline: RealPipeline, tmp_path: Path, own_servers: Path
):
    """The precision variants of a pipeline's encoder are checked on what the tokenizer sends it
    (captured through the served pipeline), not on made-up token ids."""
    from tritontune.config.model_config import read_config
    from tritontune.measure.measurement import MeasureSettings
    from tritontune.measure.request_shape import RequestShape
    from tritontune.precision.prepare import config_input_specs
    from tritontune.serving.opening import open_session

    minilm = load_minilm_example()
    entries = json.loads(real_pipeline.inputs.read_text())["data"][::8]  # 32 sentences
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"data": entries}))
    shape = RequestShape(input_data=inputs)
    settings = MeasureSettings(warmup_s=0.2, window_s=0.3)
    with open_session(
        real_pipeline.repository, real_pipeline.name, request_shape=shape, settings=settings
    ) as session:
        checks = session.prepare_precisions(["fp32", "int8_dynamic"], model=real_pipeline.encoder)

    check = checks["int8_dynamic"]
    assert check.accepted, check.reason
    assert check.figures is not None and check.figures.cosine > 0.98
    assert f"{inputs} (through {real_pipeline.tokenizer})" in check.data
    assert check.input_data is not None
    encoder = read_config(real_pipeline.repository / real_pipeline.encoder / "config.pbtxt")
    captured = read_input_data(
        check.input_data, config_input_specs(encoder), batch_size=1, batching=True
    )
    tokens = minilm.tokenize(sentences(inputs), minilm.model_dir())
    assert len(captured) == len(entries)
    for name in TOKENS:
        got = np.concatenate([sample[name] for sample in captured])
        np.testing.assert_array_equal(got, tokens[name], err_msg=name)
    assert tritonserver_processes(own_servers) == [], "a server was left running"
