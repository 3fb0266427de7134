"""The GPU check's model: a transformer encoder served by Triton's Python backend.

``gpu/check.py`` copies this file to ``encoder/1/model.py`` beside a config whose ``parameters``
give its size (``layers``, ``d_model``, ``heads``, ``vocab``). The weights are initialised in code
from a fixed seed: no download, and what the measurements say about batching and instances does not
depend on the weights' values.

Each instance runs on the device Triton gives it: with PyTorch and a ``KIND_GPU`` instance, on that
GPU in FP16 (``model_instance_kind``/``model_instance_device_id``); with PyTorch and ``KIND_CPU``, on
the CPU in FP32; without PyTorch (the CPU rehearsal in CI), the same layers in numpy. The batch the
dynamic batcher hands over runs as one forward pass, which is what makes batching worth tuning.

Input ``INPUT_IDS`` (INT64, ``[batch, sequence]``; ids are taken modulo the vocabulary, so any
integers are valid tokens); output ``EMBEDDING`` (FP32, ``[batch, d_model]``), the mean over the
sequence of the last layer.
"""

import json

import numpy as np
import triton_python_backend_utils as pb_utils

INPUT = "INPUT_IDS"
OUTPUT = "EMBEDDING"
SEED = 0


def _parameter(config, name, default):
    value = config.get("parameters", {}).get(name, {}).get("string_value")
    return int(value) if value else default


class _TorchEncoder:
    """``torch.nn.TransformerEncoder`` in inference mode (its fused fast path on GPU)."""

    def __init__(self, torch, device, layers, d_model, heads, vocab):
        self.torch = torch
        self.device = device
        self.vocab = vocab
        dtype = torch.float16 if device.type == "cuda" else torch.float32
        torch.manual_seed(SEED)
        # Built on the device in its dtype: no copy of 150M parameters from the host per load.
        made = {"device": device, "dtype": dtype}
        layer = torch.nn.TransformerEncoderLayer(
            d_model, heads, dim_feedforward=4 * d_model, batch_first=True, dropout=0.0, **made
        )
        self.embedding = torch.nn.Embedding(vocab, d_model, **made).eval()
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()

    def __call__(self, ids):
        torch = self.torch
        with torch.inference_mode():
            tokens = torch.from_numpy(np.abs(ids) % self.vocab).to(self.device, non_blocking=True)
            hidden = self.encoder(self.embedding(tokens))
            return hidden.float().mean(dim=1).cpu().numpy()


class _NumpyEncoder:
    """The same layers in numpy (post-norm, ReLU), for a host without PyTorch."""

    def __init__(self, layers, d_model, heads, vocab):
        rng = np.random.default_rng(SEED)
        scale = 1.0 / np.sqrt(d_model)
        self.heads = heads
        self.vocab = vocab
        self.embedding = rng.standard_normal((vocab, d_model), dtype=np.float32)

        def weight(rows, cols):
            return rng.standard_normal((rows, cols), dtype=np.float32) * scale

        self.layers = [
            {
                "qkv": weight(d_model, 3 * d_model),
                "out": weight(d_model, d_model),
                "up": weight(d_model, 4 * d_model),
                "down": weight(4 * d_model, d_model),
            }
            for _ in range(layers)
        ]

    @staticmethod
    def _norm(x):
        return (x - x.mean(-1, keepdims=True)) / (x.std(-1, keepdims=True) + 1e-5)

    def __call__(self, ids):
        x = self.embedding[np.abs(ids) % self.vocab]
        batch, length, width = x.shape
        head = width // self.heads
        for layer in self.layers:
            q, k, v = np.split(x @ layer["qkv"], 3, axis=-1)

            def split(t):
                return t.reshape(batch, length, self.heads, head).transpose(0, 2, 1, 3)

            scores = split(q) @ split(k).transpose(0, 1, 3, 2) / np.sqrt(head)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            scores /= scores.sum(-1, keepdims=True)
            attended = (scores @ split(v)).transpose(0, 2, 1, 3).reshape(batch, length, width)
            x = self._norm(x + attended @ layer["out"])
            x = self._norm(x + np.maximum(x @ layer["up"], 0.0) @ layer["down"])
        return x.mean(axis=1).astype(np.float32)


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        layers = _parameter(config, "layers", 2)
        d_model = _parameter(config, "d_model", 64)
        heads = _parameter(config, "heads", 4)
        vocab = _parameter(config, "vocab", 1000)
        try:
            import torch
        except ImportError:
            torch = None
        gpu = args.get("model_instance_kind") == "GPU"
        if torch is not None:
            if gpu:
                device = torch.device(f"cuda:{int(args['model_instance_device_id'])}")
                torch.cuda.set_device(device)
            else:
                device = torch.device("cpu")
            self.encoder = _TorchEncoder(torch, device, layers, d_model, heads, vocab)
            self.runs_on = f"torch {torch.__version__} on {device}"
        elif gpu:
            raise pb_utils.TritonModelException("encoder: a KIND_GPU instance needs PyTorch")
        else:
            self.encoder = _NumpyEncoder(layers, d_model, heads, vocab)
            self.runs_on = "numpy on the CPU"
        pb_utils.Logger.log_info(f"encoder: {layers} layers, d_model {d_model}, {self.runs_on}")

    def execute(self, requests):
        arrays = [pb_utils.get_input_tensor_by_name(r, INPUT).as_numpy() for r in requests]
        sizes = [len(a) for a in arrays]
        embeddings = self.encoder(np.concatenate(arrays) if len(arrays) > 1 else arrays[0])
        responses, start = [], 0
        for size in sizes:
            out = np.ascontiguousarray(embeddings[start : start + size])
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(OUTPUT, out)]))
            start += size
        return responses

    def finalize(self):
        self.encoder = None
