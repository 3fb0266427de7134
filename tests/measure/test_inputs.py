import json

import numpy as np
import pytest

from tritontune.errors import InputError
from tritontune.measure.inputs import (
    TensorSpec,
    build_requests,
    input_data_from_samples,
    input_specs,
    read_input_data,
    synthesize_payloads,
)

METADATA = {
    "name": "m",
    "inputs": [
        {"name": "x", "datatype": "FP32", "shape": ["-1", "4"]},
        {"name": "ids", "datatype": "INT64", "shape": ["-1", "-1"]},
    ],
}


def test_specs_drop_the_batch_dim():
    specs = input_specs(METADATA, batching=True)
    assert specs == [TensorSpec("x", "FP32", (4,)), TensorSpec("ids", "INT64", (-1,))]
    assert input_specs(METADATA, batching=False)[0].shape == (-1, 4)


def test_synthesized_shapes_and_types():
    specs = input_specs(METADATA, batching=True)
    payloads = synthesize_payloads(specs, batch_size=3, batching=True, dynamic_dim=7, count=2)
    assert len(payloads) == 2
    assert payloads[0]["x"].shape == (3, 4) and payloads[0]["x"].dtype == np.float32
    assert payloads[0]["ids"].shape == (3, 7) and payloads[0]["ids"].dtype == np.int64
    assert not np.array_equal(payloads[0]["x"], payloads[1]["x"])


def test_requests_carry_raw_bytes():
    specs = [TensorSpec("x", "FP32", (4,))]
    payload = {"x": np.arange(8, dtype=np.float32).reshape(2, 4)}
    (request,) = build_requests("m", [payload], specs)
    assert request.model_name == "m"
    assert list(request.inputs[0].shape) == [2, 4]
    assert np.frombuffer(request.raw_input_contents[0], np.float32).tolist() == list(range(8))


def test_bytes_inputs():
    specs = [TensorSpec("s", "BYTES", (2,))]
    (payload,) = synthesize_payloads(specs, batch_size=1, batching=True, count=1)
    (request,) = build_requests("m", [payload], specs)
    assert request.inputs[0].datatype == "BYTES"
    assert len(request.raw_input_contents[0]) > 8


def test_perf_analyzer_input_data(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(
        json.dumps(
            {
                "data": [
                    {"x": [1, 2, 3, 4], "ids": {"content": [5, 6], "shape": [2]}},
                    {"x": {"content": [0, 0, 0, 0], "shape": [4]}, "ids": [1, 2, 3]},
                ]
            }
        )
    )
    with pytest.raises(InputError, match="dynamic dims"):
        read_input_data(path, input_specs(METADATA, True), batch_size=2, batching=True)
    path.write_text(
        json.dumps({"data": [{"x": [1, 2, 3, 4], "ids": {"content": [5, 6], "shape": [2]}}]})
    )
    (payload,) = read_input_data(path, input_specs(METADATA, True), batch_size=2, batching=True)
    assert payload["x"].shape == (2, 4)
    assert payload["x"][1].tolist() == [1, 2, 3, 4]
    assert payload["ids"].shape == (2, 2)


def test_input_data_errors(tmp_path):
    specs = [TensorSpec("x", "FP32", (4,))]
    path = tmp_path / "data.json"
    path.write_text('{"data": [{"x": [1, 2, 3]}]}')
    with pytest.raises(InputError, match=r"data\[0\]\.x: 3 values do not fill shape \[4\]"):
        read_input_data(path, specs, batch_size=1, batching=True)
    path.write_text('{"data": [{"y": [1]}]}')
    with pytest.raises(InputError, match="no value for input 'x'"):
        read_input_data(path, specs, batch_size=1, batching=True)
    path.write_text("{not json")
    with pytest.raises(InputError, match=r"data.json:1: not valid JSON"):
        read_input_data(path, specs, batch_size=1, batching=True)
    path.write_text('{"data": [{"x": ["a sentence", "b", "c", "d"]}]}')
    with pytest.raises(InputError, match=r"data\[0\]\.x: not FP32 values \(could not convert"):
        read_input_data(path, specs, batch_size=1, batching=True)
    path.write_text('{"data": [{"x": {"b64": "not base64!", "shape": [4]}}]}')
    with pytest.raises(InputError, match=r"data\[0\]\.x: not FP32 values"):
        read_input_data(path, specs, batch_size=1, batching=True)


def test_samples_written_as_input_data_read_back_exactly(tmp_path):
    rng = np.random.default_rng(0)
    samples = [
        {
            "x": rng.standard_normal(4).astype(np.float32),
            "ids": rng.integers(0, 30000, (2, 3)).astype(np.int64),
            "text": np.array([b"hello", "w\u00f6rld".encode()], dtype=np.object_),
        }
        for _ in range(3)
    ]
    path = tmp_path / "captured.json"
    path.write_text(json.dumps(input_data_from_samples(samples)))
    specs = [
        TensorSpec("x", "FP32", (4,)),
        TensorSpec("ids", "INT64", (-1, -1)),
        TensorSpec("text", "BYTES", (2,)),
    ]
    back = read_input_data(path, specs, batch_size=1, batching=False)
    for got, wrote in zip(back, samples, strict=True):
        np.testing.assert_array_equal(got["x"], wrote["x"])
        np.testing.assert_array_equal(got["ids"], wrote["ids"])  # dynamic dims: the shape is kept
        assert list(got["text"]) == list(wrote["text"])
    with pytest.raises(InputError, match="tensor 'raw': BYTES values that are not text"):
        input_data_from_samples([{"raw": np.array([b"\xff\xfe"], dtype=np.object_)}])
