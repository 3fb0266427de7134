"""Milliseconds per image of each ONNX file given, onnxruntime alone, one thread, batch 1."""

import sys
import time

import numpy as np
import onnxruntime as ort


def ms_per_run(path: str, runs: int = 6) -> float:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    (given,) = session.get_inputs()
    shape = [d if isinstance(d, int) else 1 for d in given.shape]
    feed = {given.name: np.random.default_rng(0).random(shape, dtype=np.float32)}
    session.run(None, feed)  # warm-up
    start = time.perf_counter()
    for _ in range(runs):
        session.run(None, feed)
    return (time.perf_counter() - start) / runs * 1e3


for model in sys.argv[1:]:
    print(f"{ms_per_run(model):8.1f} ms  {model}")
