"""Derive a base ``ModelConfig`` from an ONNX file, as Triton's auto-complete does.

Used when a model directory holds ``model.onnx`` but no ``config.pbtxt``: inputs and outputs with
their dtypes and dims come from the graph, and a leading dynamic dimension shared by every input and
output is taken as the batch dimension.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import TensorProto

from tritontune.config.model_config import DATA_TYPES, ModelConfig
from tritontune.errors import ConfigError

#: Triton's auto-complete default when a model can batch (tritonserver --default-max-batch-size).
DEFAULT_MAX_BATCH_SIZE = 4

_ONNX_TO_TRITON: dict[int, str] = {
    TensorProto.FLOAT: "FP32",
    TensorProto.FLOAT16: "FP16",
    TensorProto.BFLOAT16: "BF16",
    TensorProto.DOUBLE: "FP64",
    TensorProto.INT8: "INT8",
    TensorProto.INT16: "INT16",
    TensorProto.INT32: "INT32",
    TensorProto.INT64: "INT64",
    TensorProto.UINT8: "UINT8",
    TensorProto.UINT16: "UINT16",
    TensorProto.UINT32: "UINT32",
    TensorProto.UINT64: "UINT64",
    TensorProto.BOOL: "BOOL",
    TensorProto.STRING: "STRING",
}


def _dims(value_info: onnx.ValueInfoProto) -> list[int]:
    """Dims with -1 for every dynamic (named or unknown) dimension."""
    shape = value_info.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else -1 for d in shape.dim]


def _triton_type(value_info: onnx.ValueInfoProto, path: Path) -> int:
    elem = int(value_info.type.tensor_type.elem_type)
    if elem not in _ONNX_TO_TRITON:
        name = TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else elem
        raise ConfigError(f"{path}: tensor {value_info.name!r} has unsupported type {name}")
    return DATA_TYPES[_ONNX_TO_TRITON[elem]]


def load_onnx_graph(path: Path) -> onnx.ModelProto:
    """Load an ONNX file (weights not needed, so external data is not loaded)."""
    try:
        return onnx.load(str(path), load_external_data=False)
    except Exception as err:  # onnx raises DecodeError, OSError, ... for a broken file
        raise ConfigError(f"{path}: not a readable ONNX model ({err})") from None


def derive_onnx_config(path: Path, name: str) -> ModelConfig:
    """A base config for the ONNX model at ``path`` served by the onnxruntime backend."""
    model = load_onnx_graph(path)
    initializers = {init.name for init in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    outputs = list(model.graph.output)
    if not inputs or not outputs:
        raise ConfigError(f"{path}: the ONNX graph has no inputs or no outputs")

    all_dims = [_dims(vi) for vi in inputs + outputs]
    batchable = all(dims and dims[0] == -1 for dims in all_dims)

    config = ModelConfig(name=name, backend="onnxruntime")
    config.max_batch_size = DEFAULT_MAX_BATCH_SIZE if batchable else 0
    for field, tensors in ((config.input, inputs), (config.output, outputs)):
        for vi in tensors:
            dims = _dims(vi)[1:] if batchable else _dims(vi)
            tensor = field.add(name=vi.name, data_type=_triton_type(vi, path))
            tensor.dims.extend(dims or [1])
    return config


def onnx_io_shapes(path: Path) -> dict[str, list[int]]:
    """Every graph input and output with its full shape (-1 for dynamic dims)."""
    model = load_onnx_graph(path)
    initializers = {init.name for init in model.graph.initializer}
    tensors = [vi for vi in model.graph.input if vi.name not in initializers]
    return {vi.name: _dims(vi) for vi in tensors + list(model.graph.output)}


def onnx_io_problems(config: ModelConfig, shapes: dict[str, list[int]], filename: str) -> list[str]:
    """Where ``config``'s inputs/outputs disagree with the ONNX graph (``onnx_io_shapes``).

    Catches a ``max_batch_size`` change that drops or adds the batch dimension, which Triton
    would accept and every request would then fail on.
    """
    problems = []
    batch = [-1] if config.max_batch_size > 0 else []
    for field, tensors in (("input", config.input), ("output", config.output)):
        for tensor in tensors:
            if tensor.name not in shapes:
                problems.append(f"{field} {tensor.name!r}: not in {filename}")
                continue
            expected = shapes[tensor.name]
            declared = batch + [int(d) for d in tensor.dims]
            compatible = len(expected) == len(declared) and all(
                e < 0 or d < 0 or e == d for e, d in zip(expected, declared, strict=True)
            )
            if not compatible:
                problems.append(
                    f"{field} {tensor.name!r}: dims {list(tensor.dims)} with max_batch_size "
                    f"{config.max_batch_size} mean shape {declared}, but {filename} has {expected}"
                )
    return problems
