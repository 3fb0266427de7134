"""A small real pipeline for the tests: an ensemble of two Python-backend models.

``scale`` doubles its input; ``shift`` adds one and works for ``--sleep-ms`` per execution (so
it is the bottleneck, and batching it pays); ``pipe`` is the ensemble ``shift(scale(x))``. Both
models batch (``max_batch_size`` 8) like the ensemble, so every knob of the default space is in
play, and each loads in about a second on the local server.
"""

from __future__ import annotations

from pathlib import Path

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
