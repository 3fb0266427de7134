"""Build a model's precision variants and let through only those that stay accurate.

Inputs for calibration (``int8_static``) and for the accuracy check come from the user's data file
(perf_analyzer's ``--input-data`` format) or are synthesized from the model's inputs; synthesized
calibration and evaluation inputs are drawn separately, so a variant is never judged on the data
it was calibrated on. A user file serves both (said in the result).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from tritontune.config.model_config import ModelConfig
from tritontune.errors import InputError
from tritontune.measure.inputs import TensorSpec, read_input_data, synthesize_payloads
from tritontune.precision.accuracy import (
    AccuracyFigures,
    compare_models,
    tolerance_for,
)
from tritontune.precision.convert import FP32, ConversionError, build_variant, check_precision


@dataclass(frozen=True)
class PrecisionCheck:
    """One precision variant: built or not, accurate enough or not, and why."""

    precision: str
    accepted: bool
    path: Path | None
    figures: AccuracyFigures | None = None
    reason: str | None = None
    """Why it was rejected (the converter's error, or the figures out of tolerance)."""
    build_s: float = 0.0
    data: str = "synthesized"
    """Where the calibration and evaluation inputs came from."""

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "accepted": self.accepted,
            "accuracy": self.figures.to_dict() if self.figures else None,
            "reason": self.reason,
            "data": self.data,
        }

    def summary(self) -> str:
        if self.precision == FP32:
            return "reference"
        if not self.accepted:
            return f"rejected: {self.reason}"
        return self.figures.summary() if self.figures else "accepted"


@dataclass(frozen=True)
class PrecisionData:
    calibration: list[dict]
    evaluation: list[dict]
    source: str


def config_input_specs(config: ModelConfig) -> list[TensorSpec]:
    """Input specs from a model config (shape without the batch dimension)."""
    return [
        TensorSpec(
            tensor.name,
            model_config_pb2.DataType.Name(tensor.data_type).removeprefix("TYPE_"),
            tuple(int(d) for d in tensor.dims),
        )
        for tensor in config.input
    ]


def precision_data(
    config: ModelConfig, input_data: Path | None = None, *, dynamic_dim: int = 16
) -> PrecisionData:
    specs = config_input_specs(config)
    batching = config.max_batch_size > 0
    if input_data is not None:
        entries = read_input_data(input_data, specs, batch_size=1, batching=batching)
        return PrecisionData(entries, entries, f"{input_data} (calibration and evaluation)")

    def draw(batch: int, count: int, seed: int) -> list[dict]:
        return synthesize_payloads(
            specs, batch_size=batch, batching=batching, dynamic_dim=dynamic_dim, count=count, seed=seed
        )

    return PrecisionData(draw(8, 16, seed=101), draw(32, 4, seed=202), "synthesized")


def prepare_precisions(
    model_file: Path,
    config: ModelConfig,
    precisions: Iterable[str],
    *,
    input_data: Path | None = None,
    tolerance_overrides: dict[str, float] | None = None,
    cache: Path | None = None,
) -> dict[str, PrecisionCheck]:
    """Build and check each of ``precisions``; FP32 (the model itself) is always accepted."""
    wanted = [check_precision(p) for p in precisions]
    if any(p != FP32 for p in wanted) and not str(model_file).endswith(".onnx"):
        raise InputError(
            f"precision variants need an ONNX model; {model_file.name} is not one "
            "(the precision dimension is not available for this backend)"
        )
    data = precision_data(config, input_data) if any(p != FP32 for p in wanted) else None
    checks: dict[str, PrecisionCheck] = {}
    for precision in wanted:
        if precision == FP32:
            checks[precision] = PrecisionCheck(FP32, True, Path(model_file))
            continue
        assert data is not None
        started = time.monotonic()
        try:
            path = build_variant(model_file, precision, calibration=data.calibration, cache=cache)
            figures = compare_models(Path(model_file), path, data.evaluation)
        except ConversionError as err:
            checks[precision] = PrecisionCheck(
                precision, False, None, reason=f"conversion failed: {err}", data=data.source
            )
            continue
        except Exception as err:  # onnxruntime can't run the variant (e.g. no kernel here)
            reason = " ".join(f"{type(err).__name__}: {err}".split())[:300]
            checks[precision] = PrecisionCheck(
                precision, False, None, reason=f"cannot run: {reason}", data=data.source
            )
            continue
        problems = tolerance_for(precision, tolerance_overrides).problems(figures)
        checks[precision] = PrecisionCheck(
            precision,
            accepted=not problems,
            path=path,
            figures=figures,
            reason="; ".join(problems) or None,
            build_s=time.monotonic() - started,
            data=data.source,
        )
    return checks
