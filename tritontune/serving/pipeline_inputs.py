"""What reaches a pipeline's composing model: the inputs its precision variants are judged on.

A composing model does not take the client's requests: it takes what the steps before it
computed (token ids, not text). So with request data, its inputs are *captured*: every sample is
run through the steps before it on the running server (each model in its own config) and what
reaches the model is written to a file (:func:`captured_inputs`), on which the variants are
calibrated and judged as a model searched alone is on the user's file. A BLS model's calls are
in its code, so nothing is captured for its models (their inputs are synthesized).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from tritontune.config.pipeline import LATEST_VERSION, Pipeline
from tritontune.measure.inputs import read_input_data
from tritontune.precision.prepare import cached_input_data, config_input_specs

Infer = Callable[..., dict[str, np.ndarray]]
"""One untimed request: ``infer(model, inputs, outputs, version=...)`` (the server's)."""


def models_before(pipeline: Pipeline, model: str) -> tuple[str, ...]:
    """The composing models whose steps run before ``model``'s first step."""
    before: list[str] = []
    for step in pipeline.steps:
        if step.model == model:
            break
        before.append(step.model)
    return tuple(dict.fromkeys(before))


def captured_inputs(infer: Infer, pipeline: Pipeline, model: str, request_data: Path) -> Path:
    """``model``'s inputs for every sample of ``request_data`` (the ensemble's inputs, in
    ``--input-data`` format), as the steps before it compute them through ``infer``, written to
    a file of the same format in the precision cache (named by its contents, so the same inputs
    make the same file and a variant built on them is a cache hit)."""
    config = pipeline.config
    batching = config.max_batch_size > 0
    samples = read_input_data(request_data, config_input_specs(config), batch_size=1, batching=batching)
    first = next(i for i, step in enumerate(pipeline.steps) if step.model == model)
    steps = pipeline.steps[: first + 1]
    inputs: list[dict[str, np.ndarray]] = []
    for sample in samples:
        tensors: dict[str, np.ndarray] = dict(sample)
        for step in steps[:-1]:
            outputs = infer(
                step.model,
                {name: tensors[tensor] for name, tensor in step.input_map.items()},
                list(step.output_map),
                version="" if step.version == LATEST_VERSION else str(step.version),
            )
            tensors.update({step.output_map[name]: value for name, value in outputs.items()})
        reached = {name: tensors[tensor] for name, tensor in steps[-1].input_map.items()}
        inputs.append({n: v[0] if batching else v for n, v in reached.items()})
    return cached_input_data(model, inputs)


def described(data: str, captured: Mapping[Path, str], before: Sequence[str], *, bls: bool) -> str:
    """Where a composing model's inputs came from, in words: a captured file is named by the
    request data it came from and the models it went through."""
    for path, origin in captured.items():
        through = f"through {', '.join(before)}" if before else "as sent to the pipeline"
        data = data.replace(str(path), f"{origin} ({through})")
    if bls and not captured:
        data += " (a BLS model's calls are in its code: its models' inputs are not captured)"
    return data
