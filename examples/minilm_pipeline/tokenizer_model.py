"""The ``tokenizer`` model of the MiniLM pipeline: raw text in, all-MiniLM-L6-v2's inputs out.

A Triton Python-backend model (``make_pipeline.py`` copies this file to
``model_repository/tokenizer/1/model.py``, beside the model's own ``tokenizer.json``). Each
request carries one text per row of ``TEXT`` (BYTES, shape ``[batch, 1]``, UTF-8); the outputs
``input_ids``, ``attention_mask`` and ``token_type_ids`` (INT64, ``[batch, L]``) are what the
encoder reads, truncated and padded to ``L`` tokens (``[PAD]``) as ``make_minilm.py`` tokenizes,
``L`` being the outputs' dims in the config.

Every text of every request that the dynamic batcher hands over together is tokenized in one
``encode_batch`` call (the tokenizers library spreads it over its threads), which is what makes
batching this model worth tuning. A request whose text is not UTF-8 gets an error of its own; the
others of its batch are answered.
"""

import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils
from tokenizers import Tokenizer

TEXT = "TEXT"
PAD_TOKEN = "[PAD]"


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.outputs = [output["name"] for output in config["output"]]
        lengths = {int(output["dims"][-1]) for output in config["output"]}
        if len(lengths) != 1:
            raise pb_utils.TritonModelException(
                f"tokenizer: the outputs' dims must give one sequence length, not {sorted(lengths)}"
            )
        length = lengths.pop()
        here = os.path.join(args["model_repository"], args["model_version"])
        self.tokenizer = Tokenizer.from_file(os.path.join(here, "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=length)
        pad_id = self.tokenizer.token_to_id(PAD_TOKEN)
        self.tokenizer.enable_padding(length=length, pad_id=pad_id, pad_token=PAD_TOKEN)

    def execute(self, requests):
        responses = [None] * len(requests)
        texts, counts = [], []  # the batch's texts; how many each decodable request gave
        for i, request in enumerate(requests):
            rows = pb_utils.get_input_tensor_by_name(request, TEXT).as_numpy().reshape(-1)
            try:
                decoded = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in rows]
            except UnicodeDecodeError as err:
                responses[i] = pb_utils.InferenceResponse(
                    error=pb_utils.TritonError(f"tokenizer: {TEXT} is not UTF-8 text ({err})")
                )
                continue
            texts.extend(decoded)
            counts.append((i, len(decoded)))
        encodings = self.tokenizer.encode_batch(texts) if texts else []
        tensors = {
            "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
            "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
            "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
        }
        start = 0
        for i, count in counts:
            responses[i] = pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(name, np.ascontiguousarray(tensors[name][start : start + count]))
                    for name in self.outputs
                ]
            )
            start += count
        return responses

    def finalize(self):
        self.tokenizer = None
