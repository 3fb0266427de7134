"""Build a model's precision variants and let through only those that stay accurate.

For each precision, the candidate recipes for the model's family (:mod:`.recipe`) are built in
order and judged against FP32 on held-out inputs; the first that passes the accuracy gate is the
variant, named by its recipe. Inputs come from the user's data file (perf_analyzer's
``--input-data`` format), split into disjoint halves: every other sample calibrates static INT8,
the rest judge every variant, so no variant is judged on what it was calibrated on. Without a
file, inputs are synthesized (separate draws for calibration and evaluation), and static INT8 is
refused for models with integer inputs: random token ids are not text, and scales calibrated on
them would be wrong for real requests.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import onnx
from tritonclient.grpc import model_config_pb2

from tritontune.config.model_config import ModelConfig
from tritontune.errors import InputError
from tritontune.measure.inputs import (
    TensorSpec,
    input_data_from_samples,
    read_input_data,
    synthesize_payloads,
)
from tritontune.precision.accuracy import (
    AccuracyFigures,
    OutputKind,
    compare_models,
    judge,
    run_model,
)
from tritontune.precision.convert import (
    FP32,
    ConversionError,
    build_variant,
    cache_dir,
    check_precision,
)
from tritontune.precision.recipe import Calibration, Precision, Recipe, candidates, model_family

#: Fewest samples of a data file that can be split into calibration and evaluation halves.
MIN_SPLIT_SAMPLES = 4
#: Most samples run together when calibrating or judging (faster than one by one; same figures).
_BATCH = 16


@dataclass(frozen=True)
class PrecisionCheck:
    """One precision variant: built or not, accurate enough or not, and why."""

    precision: str
    accepted: bool
    path: Path | None
    figures: AccuracyFigures | None = None
    reason: str | None = None
    """Why it was rejected (the converter's error, or the figures out of tolerance)."""
    data: str = "synthesized"
    """Where the calibration and evaluation inputs came from."""
    recipe: Recipe | None = None
    """How the variant was built (the accepted candidate, else the last one tried)."""
    tried: tuple[str, ...] = ()
    """Each candidate recipe tried before it, with why it was passed over."""
    calibration_data: Path | None = None
    """The file static INT8 was calibrated on, when not half of the input data (an export
    rebuilds the variant from the same inputs)."""
    input_data: Path | None = None
    """The inputs it was calibrated and judged on, when not the request data: a pipeline's
    composing model takes what the steps before it computed (captured into this file)."""

    def to_dict(self) -> dict:
        return {
            "precision": self.precision,
            "accepted": self.accepted,
            "accuracy": self.figures.to_dict() if self.figures else None,
            "reason": self.reason,
            "data": self.data,
            "recipe": self.recipe.to_dict() if self.recipe else None,
            "recipe_label": self.recipe.label() if self.recipe else None,
            "tried": list(self.tried),
            "calibration_data": str(self.calibration_data) if self.calibration_data else None,
            "input_data": str(self.input_data) if self.input_data else None,
        }

    def summary(self) -> str:
        if self.precision == FP32:
            return "reference"
        if not self.accepted:
            return f"rejected: {self.reason}"
        recipe = f"; recipe {self.recipe.label()}" if self.recipe else ""
        return (self.figures.summary() if self.figures else "accepted") + recipe


@dataclass(frozen=True)
class AccuracySettings:
    """The user's say in how variants are built and judged (all optional; defaults per kind)."""

    tolerance: Mapping[str, float] = field(default_factory=dict)
    """Explicit bounds (``parse_tolerance``); they apply to every output."""
    output_kinds: Mapping[str, OutputKind] = field(default_factory=dict)
    """Declared kinds by output name (``*``: every output); the rest are inferred."""
    calibrations: tuple[Calibration, ...] = tuple(Calibration)
    """Static INT8 calibration methods to try, in order."""
    calibration_data: Path | None = None
    """A file of real inputs to calibrate on; then every ``--input-data`` sample judges."""


@dataclass(frozen=True)
class PrecisionData:
    calibration: list[dict]
    evaluation: list[dict]
    source: str
    calibration_samples: int = 0
    evaluation_samples: int = 0
    synthesized_integers: tuple[str, ...] = field(default=())
    """Integer inputs whose values were made up (no data file): not fit to calibrate on."""
    calibration_problem: str | None = None
    """Why the calibration file can't be used (only static INT8 needs it: it alone is refused)."""


def config_input_specs(config: ModelConfig) -> list[TensorSpec]:
    """Input specs from a model config (shape without the batch dimension)."""
    return [
        TensorSpec(
            tensor.name,
            _wire_datatype(tensor.data_type),
            tuple(int(d) for d in tensor.dims),
        )
        for tensor in config.input
    ]


def _wire_datatype(data_type: int) -> str:
    """A config's data type as the client protocol spells it (``TYPE_STRING`` is ``BYTES``)."""
    name = model_config_pb2.DataType.Name(data_type).removeprefix("TYPE_")
    return "BYTES" if name == "STRING" else name


def _batched(samples: Sequence[dict], batching: bool, *, one_size: bool = False) -> list[dict]:
    """Samples of one row each, concatenated into batches of up to ``_BATCH`` rows. ``one_size``
    (calibration): every batch of one size, the largest that divides their count, because
    onnxruntime's histogram calibrators (percentile, entropy) fail on batches of different shapes
    (onnxruntime issue 18792: 26 VGG16 images as 16 + 10 did). Judging has no such limit and keeps
    the larger batches."""
    if not batching:
        return list(samples)
    size = _BATCH
    if one_size:
        size = max(n for n in range(1, min(_BATCH, max(len(samples), 1)) + 1) if len(samples) % n == 0)
    return [
        {name: np.concatenate([s[name] for s in samples[i : i + size]]) for name in samples[0]}
        for i in range(0, len(samples), size)
    ]


def precision_data(
    config: ModelConfig,
    input_data: Path | None = None,
    *,
    calibration_data: Path | None = None,
    dynamic_dim: int = 16,
) -> PrecisionData:
    """Calibration and evaluation inputs, disjoint.

    ``input_data`` alone: every other sample calibrates, the others evaluate. ``calibration_data``
    calibrates on its own; then every sample of ``input_data`` evaluates (synthesized ones when
    there is no ``input_data``). Neither: separate synthesized draws.
    """
    specs = config_input_specs(config)
    batching = config.max_batch_size > 0

    def draw(batch: int, count: int, seed: int) -> list[dict]:
        return synthesize_payloads(
            specs, batch_size=batch, batching=batching, dynamic_dim=dynamic_dim, count=count, seed=seed
        )

    def read(path: Path) -> list[dict]:
        return read_input_data(path, specs, batch_size=1, batching=batching)

    if input_data is None and calibration_data is None:
        integers = tuple(
            s.name for s in specs if s.datatype.startswith(("INT", "UINT")) or s.datatype == "BOOL"
        )
        calibration, evaluation = draw(8, 16, seed=101), draw(32, 4, seed=202)
        return PrecisionData(
            calibration,
            evaluation,
            "synthesized",
            calibration_samples=_rows(calibration, batching),
            evaluation_samples=_rows(evaluation, batching),
            synthesized_integers=integers,
        )
    problem = None
    if calibration_data is not None:
        try:
            calibrate = read(calibration_data)
        except InputError as err:  # only static INT8 needs it: that variant alone is refused
            calibrate, problem = [], str(err)
        if input_data is not None:
            evaluation = _batched(read(input_data), batching)
            source = f"calibration {calibration_data}, evaluation {input_data}"
        else:
            evaluation = draw(32, 4, seed=202)
            source = f"calibration {calibration_data}, evaluation synthesized"
    else:
        assert input_data is not None
        samples = read(input_data)
        if len(samples) >= MIN_SPLIT_SAMPLES:
            calibrate, evaluate = samples[0::2], samples[1::2]
            source = f"{input_data} (disjoint halves)"
        else:  # too few to split: nothing to calibrate on; the others are judged on all
            calibrate, evaluate = [], samples
            source = f"{input_data} ({len(samples)} samples: too few to split)"
        evaluation = _batched(evaluate, batching)
    return PrecisionData(
        _batched(calibrate, batching, one_size=True),
        evaluation,
        source,
        calibration_samples=len(calibrate),
        evaluation_samples=_rows(evaluation, batching),
        calibration_problem=problem,
    )


def cached_input_data(name: str, samples: Sequence[Mapping[str, np.ndarray]]) -> Path:
    """``samples`` (one per entry, each tensor without a batch dimension) written in
    ``--input-data`` format to the precision cache, named ``NAME-DIGEST.json`` by their contents:
    the same inputs make the same file, so a variant built on them is a cache hit, and an export
    rebuilds it from the file the study names."""
    document = json.dumps(input_data_from_samples([dict(s) for s in samples]), sort_keys=True)
    digest = hashlib.sha256(document.encode()).hexdigest()[:16]
    path = cache_dir() / "inputs" / f"{name}-{digest}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():  # a scratch file of its own: two processes may write the same inputs
        with tempfile.NamedTemporaryFile(
            "w", dir=path.parent, prefix=".writing-", suffix=".json", delete=False, encoding="utf-8"
        ) as scratch:
            scratch.write(document)
        Path(scratch.name).replace(path)
    return path


def joined_input_data(name: str, config: ModelConfig, files: Sequence[Path]) -> Path | None:
    """One ``--input-data`` file holding every sample of ``files`` (a workload's classes each
    name their own request data; a precision is judged on all of it): the file itself when there
    is one, None when there is none."""
    distinct = list(dict.fromkeys(Path(f) for f in files))
    if len(distinct) <= 1:
        return distinct[0] if distinct else None
    specs = config_input_specs(config)
    batching = config.max_batch_size > 0
    samples = [
        {n: v[0] if batching else v for n, v in sample.items()}
        for path in distinct
        for sample in read_input_data(path, specs, batch_size=1, batching=batching)
    ]
    return cached_input_data(name, samples)


def _rows(batches: Sequence[dict], batching: bool) -> int:
    """How many samples ``batches`` hold (rows of the batch dimension, when there is one)."""
    if not batching:
        return len(batches)
    return sum(next(iter(batch.values())).shape[0] for batch in batches)


def _refusal(precision: Precision, data: PrecisionData) -> str | None:
    """Why ``precision`` can't be built on ``data`` at all (static INT8 needs real inputs)."""
    if precision != Precision.INT8_STATIC:
        return None
    if data.calibration_problem:
        return f"calibration data: {data.calibration_problem}"
    if data.synthesized_integers:
        names = ", ".join(data.synthesized_integers)
        return (
            f"int8_static needs real calibration inputs: the model takes integer inputs ({names}) "
            "and made-up values (random token ids) are not real data; give --input-data"
        )
    if not data.calibration:
        return (
            f"int8_static needs calibration inputs: {data.source}; give at least "
            f"{MIN_SPLIT_SAMPLES} samples (half calibrate, half judge)"
        )
    return None


def prepare_precisions(
    model_file: Path,
    config: ModelConfig,
    precisions: Iterable[str],
    *,
    input_data: Path | None = None,
    accuracy: AccuracySettings | None = None,
    cache: Path | None = None,
) -> dict[str, PrecisionCheck]:
    """Build and check each of ``precisions``; FP32 (the model itself) is always accepted."""
    wanted = [check_precision(p) for p in precisions]
    if any(p != FP32 for p in wanted) and not str(model_file).endswith(".onnx"):
        raise InputError(
            f"precision variants need an ONNX model; {model_file.name} is not one "
            "(the precision dimension is not available for this backend)"
        )
    checks: dict[str, PrecisionCheck] = {}
    if FP32 in wanted:
        checks[FP32] = PrecisionCheck(FP32, True, Path(model_file))
    variants = [p for p in wanted if p != FP32]
    if not variants:
        return checks
    accuracy = accuracy or AccuracySettings()
    data = precision_data(config, input_data, calibration_data=accuracy.calibration_data)
    try:
        family = model_family(onnx.load(str(model_file), load_external_data=False))
    except Exception as err:
        reason = "conversion failed: " + " ".join(f"{type(err).__name__}: {err}".split())[:300]
        return {
            **checks,
            **{p: PrecisionCheck(p, False, None, reason=reason, data=data.source) for p in variants},
        }
    for precision in variants:
        refusal = _refusal(precision, data)
        if refusal:
            checks[precision] = PrecisionCheck(precision, False, None, reason=refusal, data=data.source)
            continue
        check = _first_accurate(
            model_file, precision, candidates(precision, family, accuracy.calibrations), data,
            accuracy, cache,
        )  # fmt: skip
        if precision == Precision.INT8_STATIC:
            check = replace(check, calibration_data=accuracy.calibration_data)
        checks[precision] = check
    return checks


def _first_accurate(
    model_file: Path,
    precision: Precision,
    recipes: Sequence[Recipe],
    data: PrecisionData,
    accuracy: AccuracySettings,
    cache: Path | None,
) -> PrecisionCheck:
    """Build ``recipes`` in order; the first whose outputs pass the gate is the variant."""
    tried: list[str] = []
    last: PrecisionCheck | None = None
    expected: dict | None = None  # FP32's outputs, run once for every candidate
    for recipe in recipes:
        calibration = data.calibration if precision == Precision.INT8_STATIC else ()
        try:
            path = build_variant(model_file, recipe, calibration=calibration, cache=cache)
            if expected is None:
                expected = run_model(Path(model_file), data.evaluation)
            figures = compare_models(
                Path(model_file), path, data.evaluation, kinds=accuracy.output_kinds,
                calibration_samples=data.calibration_samples if calibration else 0,
                expected=expected,
            )  # fmt: skip
        except InputError:
            raise
        except ConversionError as err:
            reason = f"conversion failed: {err}"
            tried.append(f"{recipe.label()}: {reason}")
            last = PrecisionCheck(precision, False, None, reason=reason, data=data.source, recipe=recipe)
            continue
        except Exception as err:  # onnxruntime can't run the variant (e.g. no kernel here)
            reason = "cannot run: " + " ".join(f"{type(err).__name__}: {err}".split())[:300]
            tried.append(f"{recipe.label()}: {reason}")
            last = PrecisionCheck(precision, False, None, reason=reason, data=data.source, recipe=recipe)
            continue
        problems = judge(precision, figures, accuracy.tolerance)
        last = PrecisionCheck(
            precision,
            accepted=not problems,
            path=path,
            figures=figures,
            reason="; ".join(problems) or None,
            data=data.source,
            recipe=recipe,
            tried=tuple(tried),
        )
        if not problems:
            return last
        tried.append(f"{recipe.label()}: {last.reason}")
    assert last is not None, "every precision has at least one recipe"
    if len(tried) > 1:  # say that every candidate failed, and how the last of them fell short
        label = last.recipe.label() if last.recipe else "?"
        last = replace(
            last,
            reason=f"none of {len(tried)} recipes passed; the last ({label}): {last.reason}",
            tried=tuple(tried[:-1]),
        )
    return last
