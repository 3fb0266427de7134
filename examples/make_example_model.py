"""Build the bundled example: a small MLP in ONNX whose cost per call drops with batching on a CPU.

A few wide dense layers (seeded weights): at batch 1 each call streams every weight from memory for
one row of work, so larger batches amortize that and the fixed per-call overhead. Run it again to
rebuild ``examples/model_repository/mlp`` bit for bit.

    python examples/make_example_model.py [--out examples/model_repository]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

WIDTHS = (256, 1024, 1024, 16)  # input features, two hidden layers, 16 class scores
SEED = 20261121

CONFIG = """\
name: "mlp"
backend: "onnxruntime"
max_batch_size: 64
input [
  {
    name: "INPUT"
    data_type: TYPE_FP32
    dims: [ 256 ]
  }
]
output [
  {
    name: "SCORES"
    data_type: TYPE_FP32
    dims: [ 16 ]
  }
]
instance_group [
  {
    count: 1
    kind: KIND_CPU
  }
]
parameters {
  key: "intra_op_thread_count"
  value { string_value: "1" }
}
"""


def build_mlp(widths: tuple[int, ...] = WIDTHS, seed: int = SEED) -> onnx.ModelProto:
    """An MLP: Gemm + Relu per hidden layer, a final Gemm to class scores."""
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    current = "INPUT"
    for i, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:], strict=False)):
        weight = (rng.standard_normal((fan_in, fan_out)) / np.sqrt(fan_in)).astype(np.float32)
        bias = (0.01 * rng.standard_normal(fan_out)).astype(np.float32)
        inits += [numpy_helper.from_array(weight, f"W{i}"), numpy_helper.from_array(bias, f"B{i}")]
        last = i == len(widths) - 2
        gemm_out = "SCORES" if last else f"H{i}"
        nodes.append(helper.make_node("Gemm", [current, f"W{i}", f"B{i}"], [gemm_out]))
        if not last:
            nodes.append(helper.make_node("Relu", [gemm_out], [f"A{i}"]))
            current = f"A{i}"
    graph = helper.make_graph(
        nodes,
        "mlp",
        [helper.make_tensor_value_info("INPUT", TensorProto.FLOAT, ["batch", widths[0]])],
        [helper.make_tensor_value_info("SCORES", TensorProto.FLOAT, ["batch", widths[-1]])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # readable by onnxruntime releases from 1.10 on
    onnx.checker.check_model(model)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "model_repository")
    args = parser.parse_args()
    model_dir = args.out / "mlp"
    (model_dir / "1").mkdir(parents=True, exist_ok=True)
    onnx.save(build_mlp(), str(model_dir / "1" / "model.onnx"))
    (model_dir / "config.pbtxt").write_text(CONFIG, encoding="utf-8")
    print(f"wrote {model_dir}")


if __name__ == "__main__":
    main()
