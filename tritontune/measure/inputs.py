"""Request payloads: synthesized from a model's metadata, or read from perf_analyzer's JSON format.

Payloads are built once, as ready gRPC ``ModelInferRequest`` messages (or, for HTTP, tritonclient
``InferInput`` objects holding their binary tensor bytes), so the load generator's hot path only
sends them.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import service_pb2
from tritonclient.utils import serialize_byte_tensor, triton_to_np_dtype

from tritontune.errors import InputError
from tritontune.measure.loadgen import HttpInferRequest
from tritontune.server.endpoint import ClientProtocol


@dataclass(frozen=True)
class TensorSpec:
    """One model input as the server describes it (shape without the batch dimension)."""

    name: str
    datatype: str
    shape: tuple[int, ...]


def input_specs(metadata: dict, batching: bool) -> list[TensorSpec]:
    """Input specs from ``get_model_metadata`` (JSON form); drops the batch dim when batching."""
    specs = []
    for tensor in metadata.get("inputs", []):
        shape = tuple(int(d) for d in tensor.get("shape", []))
        if batching and shape:
            shape = shape[1:]
        specs.append(TensorSpec(tensor["name"], tensor["datatype"], shape))
    if not specs:
        raise InputError(f"model {metadata.get('name', '?')!r} has no inputs to send")
    return specs


def synthesize_payloads(
    specs: list[TensorSpec],
    *,
    batch_size: int,
    batching: bool,
    dynamic_dim: int = 16,
    count: int = 4,
    seed: int = 0,
) -> list[dict[str, np.ndarray]]:
    """``count`` distinct random payloads; every dynamic dim (-1) becomes ``dynamic_dim``."""
    rng = np.random.default_rng(seed)
    payloads = []
    for _ in range(count):
        payload = {}
        for spec in specs:
            shape = tuple(dynamic_dim if d < 0 else d for d in spec.shape)
            if batching:
                shape = (batch_size, *shape)
            payload[spec.name] = _random_tensor(rng, spec.datatype, shape)
        payloads.append(payload)
    return payloads


def _random_tensor(rng: np.random.Generator, datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    if datatype == "BYTES":
        digits = rng.integers(0, 10**6, size=shape)
        return np.vectorize(lambda v: str(v).encode())(digits).astype(np.object_)
    dtype = np.dtype(triton_to_np_dtype(datatype))
    if dtype == np.bool_:
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        return rng.integers(0, 100, size=shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def read_input_data(
    path: Path, specs: list[TensorSpec], *, batch_size: int, batching: bool
) -> list[dict[str, np.ndarray]]:
    """Payloads from a perf_analyzer ``--input-data`` JSON file.

    Accepted per input: a flat list of values, ``{"content": [...], "shape": [...]}``, or
    ``{"b64": "..."}``. Each entry is one sample; with batching it is repeated ``batch_size`` times,
    as perf_analyzer does.
    """
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise InputError(f"{path}: cannot read input data ({err.strerror})") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}:{err.lineno}: not valid JSON ({err.msg})") from None
    entries = document.get("data") if isinstance(document, dict) else None
    if not isinstance(entries, list) or not entries:
        raise InputError(f'{path}: expected {{"data": [{{"<input name>": [...]}}, ...]}}')
    payloads = []
    for i, entry in enumerate(entries):
        payload = {}
        for spec in specs:
            if spec.name not in entry:
                raise InputError(f"{path}: data[{i}] has no value for input {spec.name!r}")
            sample = _sample(path, i, spec, entry[spec.name])
            payload[spec.name] = (
                np.repeat(sample[np.newaxis], batch_size, axis=0) if batching else sample
            )
        payloads.append(payload)
    return payloads


def input_data_from_samples(samples: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """``samples`` (one per entry, each tensor without a batch dimension) in the format
    :func:`read_input_data` reads: perf_analyzer's ``--input-data`` JSON. Numbers are written
    exactly (base64 of their bytes); BYTES values as text."""
    entries = []
    for index, sample in enumerate(samples):
        entry: dict[str, Any] = {}
        for name, value in sample.items():
            array = np.asarray(value)
            shape = [int(d) for d in array.shape]
            if array.dtype == np.object_ or array.dtype.kind in "SU":
                try:
                    texts = [_text(v) for v in array.ravel()]
                except UnicodeDecodeError:
                    raise InputError(
                        f"sample {index}, tensor {name!r}: BYTES values that are not text cannot "
                        "be written as input data"
                    ) from None
                entry[name] = {"content": texts, "shape": shape}
            else:
                raw = np.ascontiguousarray(array).tobytes()
                entry[name] = {"b64": base64.b64encode(raw).decode("ascii"), "shape": shape}
        entries.append(entry)
    return {"data": entries}


def _text(value: object) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _sample(path: Path, index: int, spec: TensorSpec, value: object) -> np.ndarray:
    where = f"{path}: data[{index}].{spec.name}"
    dtype = np.object_ if spec.datatype == "BYTES" else np.dtype(triton_to_np_dtype(spec.datatype))
    shape: tuple[int, ...] | None = None
    try:
        if isinstance(value, dict) and "b64" in value:
            if spec.datatype == "BYTES":
                raise InputError(f"{where}: b64 data is not supported for BYTES inputs")
            array = np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype)
            shape = tuple(value.get("shape", ())) or None
        elif isinstance(value, dict) and "content" in value:
            array = np.asarray(value["content"], dtype=dtype)
            shape = tuple(value.get("shape", ())) or None
        elif isinstance(value, list):
            array = np.asarray(value, dtype=dtype)
        else:
            raise InputError(f"{where}: expected a list, {{'content': ...}} or {{'b64': ...}}")
    except (ValueError, TypeError, binascii.Error) as err:
        detail = " ".join(str(err).split())[:160]
        raise InputError(f"{where}: not {spec.datatype} values ({detail})") from None
    if shape is None:
        if any(d < 0 for d in spec.shape):
            raise InputError(f"{where}: input has dynamic dims {list(spec.shape)}; give a shape")
        shape = spec.shape
    if spec.datatype == "BYTES":
        array = np.array([str(v).encode() for v in array.ravel()], dtype=np.object_)
    expected = int(np.prod(shape)) if shape else 1
    if array.size != expected:
        raise InputError(
            f"{where}: {array.size} values do not fill shape {list(shape)} ({expected} values)"
        )
    return array.reshape(shape)


def build_requests(
    model: str,
    payloads: list[dict[str, np.ndarray]],
    specs: list[TensorSpec],
    protocol: ClientProtocol = ClientProtocol.GRPC,
    *,
    priority: int = 0,
    timeout_us: int = 0,
) -> list[Any]:
    """One ready-to-send request per payload for ``protocol`` (raw tensor bytes, no per-send
    encoding of the tensors). ``priority`` and ``timeout_us`` (0: unset) are Triton's per-request
    parameters: the priority level the scheduler queues the request at, and how long it may wait
    there (honoured when the level's queue policy allows the override)."""
    if protocol == ClientProtocol.HTTP:
        return _http_requests(model, payloads, specs, priority, timeout_us)
    requests = []
    for payload in payloads:
        request = service_pb2.ModelInferRequest(model_name=model)
        if priority:
            request.parameters["priority"].uint64_param = priority
        if timeout_us:
            request.parameters["timeout"].int64_param = timeout_us
        for spec in specs:
            array = payload[spec.name]
            tensor = request.inputs.add(name=spec.name, datatype=spec.datatype)
            tensor.shape.extend(array.shape)
            if spec.datatype == "BYTES":
                raw = serialize_byte_tensor(array)
                request.raw_input_contents.append(raw.item() if raw.size else b"")
            else:
                request.raw_input_contents.append(np.ascontiguousarray(array).tobytes())
        requests.append(request)
    return requests


def _http_requests(
    model: str,
    payloads: list[dict[str, np.ndarray]],
    specs: list[TensorSpec],
    priority: int,
    timeout_us: int,
) -> list[HttpInferRequest]:
    """HTTP requests whose tensors travel as binary data (Triton's binary tensor extension), the
    HTTP counterpart of gRPC's raw contents; outputs come back binary too (tritonclient asks for
    that when no outputs are named)."""
    import tritonclient.http as httpclient

    requests = []
    for payload in payloads:
        inputs = []
        for spec in specs:
            array = payload[spec.name]
            tensor = httpclient.InferInput(spec.name, list(array.shape), spec.datatype)
            tensor.set_data_from_numpy(array, binary_data=True)
            inputs.append(tensor)
        requests.append(HttpInferRequest(model, tuple(inputs), priority, timeout_us or None))
    return requests
