"""A small real pipeline for the tests: an ensemble of two Python-backend models.

``scale`` doubles its input; ``shift`` adds one and works for ``--sleep-ms`` per execution (so
it is the bottleneck, and batching it pays); ``pipe`` is the ensemble ``shift(scale(x))``. Both
models batch (``max_batch_size`` 8) like the ensemble, so every knob of the default space is in
play, and each loads in about a second on the local server.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

_MODEL_PY = """
import time

import triton_python_backend_utils as pb


class TritonPythonModel:
    def execute(self, requests):
        time.sleep({sleep_s})  # one execution, whatever its batch: batching pays
        replies = []
        for request in requests:
            x = pb.get_input_tensor_by_name(request, "X").as_numpy()
            replies.append(pb.InferenceResponse([pb.Tensor("Y", {expression})]))
        return replies
"""

_STEP_CONFIG = """name: "{name}"
backend: "python"
max_batch_size: 8
input [{{ name: "X" data_type: TYPE_FP32 dims: [4] }}]
output [{{ name: "Y" data_type: TYPE_FP32 dims: [4] }}]
dynamic_batching {{}}
"""

_ENSEMBLE_CONFIG = """name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [4] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [4] }]
ensemble_scheduling {
  step [
    { model_name: "scale" model_version: -1
      input_map { key: "X" value: "IN" } output_map { key: "Y" value: "scaled" } },
    { model_name: "shift" model_version: -1
      input_map { key: "X" value: "scaled" } output_map { key: "Y" value: "OUT" } }
  ]
}
"""

PIPELINE = "pipe"
STEPS = ("scale", "shift")


def write_pipeline(repository: Path, *, shift_sleep_ms: float = 2.0) -> Path:
    """Write ``pipe``, ``scale`` and ``shift`` into ``repository``; returns it."""
    models = {"scale": ("x * 2", 0.0), "shift": ("x + 1", shift_sleep_ms / 1e3)}
    for name, (expression, sleep_s) in models.items():
        (repository / name / "1").mkdir(parents=True, exist_ok=True)
        (repository / name / "config.pbtxt").write_text(_STEP_CONFIG.format(name=name))
        code = _MODEL_PY.format(sleep_s=sleep_s, expression=expression)
        (repository / name / "1" / "model.py").write_text(code)
    (repository / PIPELINE / "1").mkdir(parents=True, exist_ok=True)
    (repository / PIPELINE / "config.pbtxt").write_text(_ENSEMBLE_CONFIG)
    return repository


_BLS_PY = '''
import triton_python_backend_utils as pb


class TritonPythonModel:
    """shift(scale(x)), called from code (Business Logic Scripting), one request at a time."""

    def execute(self, requests):
        replies = []
        for request in requests:
            x = pb.get_input_tensor_by_name(request, "X").as_numpy()
            for model in ("scale", "shift"):
                call = pb.InferenceRequest(
                    model_name=model, requested_output_names=["Y"], inputs=[pb.Tensor("X", x)]
                )
                reply = call.exec()
                if reply.has_error():
                    raise pb.TritonModelException(reply.error().message())
                x = pb.get_output_tensor_by_name(reply, "Y").as_numpy()
            replies.append(pb.InferenceResponse([pb.Tensor("Y", x)]))
        return replies
'''

BLS = "chain"


def write_bls(repository: Path, *, shift_sleep_ms: float = 2.0) -> Path:
    """The pipeline's two models and ``chain``, a BLS model calling them; returns ``repository``."""
    write_pipeline(repository, shift_sleep_ms=shift_sleep_ms)
    (repository / BLS / "1").mkdir(parents=True, exist_ok=True)
    (repository / BLS / "config.pbtxt").write_text(_STEP_CONFIG.format(name=BLS))
    (repository / BLS / "1" / "model.py").write_text(_BLS_PY)
    return repository


_SCALE_WIDE_CONFIG = """name: "scale"
backend: "python"
max_batch_size: 8
input [{ name: "X" data_type: TYPE_FP32 dims: [256] }]
output [{ name: "Y" data_type: TYPE_FP32 dims: [256] }]
dynamic_batching {}
"""

_SCORED_CONFIG = """name: "scored"
platform: "ensemble"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [256] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [16] }]
ensemble_scheduling {
  step [
    { model_name: "scale" model_version: -1
      input_map { key: "X" value: "IN" } output_map { key: "Y" value: "scaled" } },
    { model_name: "mlp" model_version: -1
      input_map { key: "INPUT" value: "scaled" } output_map { key: "SCORES" value: "OUT" } }
  ]
}
"""

SCORED = "scored"
"""An ensemble whose second step is an ONNX model (the example MLP) behind a Python step that
doubles the request: the MLP's inputs are not the client's, so its precision variants must be
judged on what ``scale`` computes."""


def write_onnx_pipeline(repository: Path, example_repository: Path) -> Path:
    """Write ``scored`` = mlp(scale(x)), with a copy of the example MLP, into ``repository``."""
    (repository / "scale" / "1").mkdir(parents=True, exist_ok=True)
    (repository / "scale" / "config.pbtxt").write_text(_SCALE_WIDE_CONFIG)
    code = _MODEL_PY.format(sleep_s=0.0, expression="x * 2")
    (repository / "scale" / "1" / "model.py").write_text(code)
    shutil.copytree(example_repository / "mlp", repository / "mlp")
    (repository / SCORED / "1").mkdir(parents=True, exist_ok=True)
    (repository / SCORED / "config.pbtxt").write_text(_SCORED_CONFIG)
    return repository


_SCORER_PY = '''
import triton_python_backend_utils as pb


class TritonPythonModel:
    """mlp(x), called from code (Business Logic Scripting), one request at a time."""

    def execute(self, requests):
        replies = []
        for request in requests:
            x = pb.get_input_tensor_by_name(request, "IN").as_numpy()
            call = pb.InferenceRequest(
                model_name="mlp", requested_output_names=["SCORES"], inputs=[pb.Tensor("INPUT", x)]
            )
            reply = call.exec()
            if reply.has_error():
                raise pb.TritonModelException(reply.error().message())
            scores = pb.get_output_tensor_by_name(reply, "SCORES").as_numpy()
            replies.append(pb.InferenceResponse([pb.Tensor("OUT", scores)]))
        return replies
'''

_SCORER_CONFIG = """name: "scorer"
backend: "python"
max_batch_size: 8
input [{ name: "IN" data_type: TYPE_FP32 dims: [256] }]
output [{ name: "OUT" data_type: TYPE_FP32 dims: [16] }]
"""

SCORER = "scorer"
"""A BLS model calling the example MLP (an ONNX model, so it has precision variants), whose
calls are in its code: the MLP's inputs are synthesized, not captured."""


def write_bls_onnx(repository: Path, example_repository: Path) -> Path:
    """Write ``scorer``, a BLS model calling a copy of the example MLP, into ``repository``."""
    shutil.copytree(example_repository / "mlp", repository / "mlp")
    (repository / SCORER / "1").mkdir(parents=True, exist_ok=True)
    (repository / SCORER / "config.pbtxt").write_text(_SCORER_CONFIG)
    (repository / SCORER / "1" / "model.py").write_text(_SCORER_PY)
    return repository


def write_scored_inputs(path: Path, count: int = 16, seed: int = 0) -> np.ndarray:
    """``count`` requests for ``scored`` in ``--input-data`` format; returns them (count x 256)."""
    samples = np.random.default_rng(seed).standard_normal((count, 256)).astype(np.float32)
    path.write_text(json.dumps({"data": [{"IN": [float(v) for v in row]} for row in samples]}))
    return samples
