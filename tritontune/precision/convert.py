"""Precision variants of an ONNX model, built with onnxruntime's own tools and cached.

* ``fp16``: weights and compute in FP16, inputs and outputs kept FP32 (clients change nothing);
* ``fp16_io``: FP16 through and through, inputs and outputs included (config data types follow);
* ``int8_dynamic``: INT8 weights, activations quantized on the fly (no calibration);
* ``int8_static``: INT8 weights and activations (QDQ), calibrated on real inputs.

How each is built is a :class:`~tritontune.precision.recipe.Recipe` (per-channel weights, which ops,
what stays in float, the calibration method). FP16 comes from ``onnxruntime.transformers.float16``,
INT8 from ``onnxruntime.quantization`` after its ``quant_pre_process``: no graph surgery of ours.
A variant is cached under a key made of the model's content, the recipe, the calibration data and
the onnxruntime version, so it is built once per model and recipe.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import logging
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx

from tritontune.config.repository import file_sha256
from tritontune.config.variant import FP32, Precision
from tritontune.errors import InputError
from tritontune.precision.recipe import (
    Calibration,
    Recipe,
    candidates,
    keep_float_nodes,
    model_family,
)
from tritontune.precision.runtime import onnxruntime_module

#: Every precision tritontune can build, in the order they are shown.
PRECISIONS = tuple(Precision)
#: Those a search tries by default (``fp16_io`` changes what clients send: opt in with a space file).
DEFAULT_PRECISIONS = (
    Precision.FP32,
    Precision.FP16,
    Precision.INT8_DYNAMIC,
    Precision.INT8_STATIC,
)

Batch = dict[str, np.ndarray]


class ConversionError(Exception):
    """A converter failed; the message is the converter's own reason, on one line."""


def cache_dir() -> Path:
    """``$TRITONTUNE_CACHE/precision``, else ``~/.cache/tritontune/precision``."""
    root = os.environ.get("TRITONTUNE_CACHE") or Path.home() / ".cache" / "tritontune"
    return Path(root) / "precision"


def check_precision(name: str) -> Precision:
    """``name`` as a :class:`Precision`, or a one-line error listing the valid ones."""
    try:
        return Precision(str(name).strip().lower())
    except ValueError:
        known = ", ".join(p.value for p in Precision)
        raise InputError(f"precision {name!r} is not one of {known}") from None


def _calibration_digest(batches: Sequence[Batch]) -> str:
    digest = hashlib.sha256()
    for batch in batches:
        for name in sorted(batch):
            digest.update(name.encode())
            digest.update(np.ascontiguousarray(batch[name]).tobytes())
    return digest.hexdigest()


def default_recipe(model: Path, precision: Precision) -> Recipe:
    """The first candidate recipe of ``precision`` for this model's family."""
    family = model_family(onnx.load(str(model), load_external_data=False))
    return candidates(precision, family)[0]


def build_variant(
    model: Path,
    recipe: Recipe | str,
    *,
    calibration: Sequence[Batch] = (),
    cache: Path | None = None,
) -> Path:
    """The variant of the ONNX file ``model`` that ``recipe`` builds (FP32: ``model`` itself).

    A precision name stands for that precision's first recipe for the model (see
    :func:`tritontune.precision.recipe.candidates`).
    """
    if not isinstance(recipe, Recipe):
        precision = check_precision(recipe)
        if precision == FP32:
            return Path(model)
        try:
            recipe = default_recipe(Path(model), precision)
        except Exception as err:
            raise ConversionError(_one_line(err)) from None
    if recipe.precision == FP32:
        return Path(model)
    if recipe.precision == Precision.INT8_STATIC and not calibration:
        raise InputError("int8_static needs calibration inputs")
    key = hashlib.sha256(
        "|".join(
            (
                file_sha256(model),
                f"opset>={QUANTIZE_MIN_OPSET}",  # variants built before the upgrade are rebuilt
                json.dumps(recipe.to_dict(), sort_keys=True),
                onnxruntime_module("precision variants").__version__,
                _calibration_digest(calibration) if recipe.precision == Precision.INT8_STATIC else "",
            )
        ).encode()
    ).hexdigest()[:32]
    folder = cache or cache_dir()
    target = folder / f"{key}.{recipe.precision}.onnx"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(suffix=".onnx", dir=folder, prefix=".building-")
    os.close(handle)
    try:
        with _quantizer_chatter_to_log():
            _convert(Path(model), Path(scratch), recipe, calibration, folder)
        os.replace(scratch, target)  # complete files only: a crash never leaves half a variant
    except Exception as err:
        Path(scratch).unlink(missing_ok=True)
        if isinstance(err, (InputError, ConversionError)):
            raise
        raise ConversionError(_one_line(err)) from None
    return target


def _one_line(err: BaseException) -> str:
    return " ".join(f"{type(err).__name__}: {err}".split())[:400]


@contextlib.contextmanager
def _quantizer_chatter_to_log() -> Iterator[None]:
    """onnxruntime's quantizer logs advice through the root logger and prints progress; both
    go to tritontune's log (debug level), not into the middle of a search's output."""
    root = logging.getLogger()
    handlers = root.handlers[:]
    root.handlers = [_ForwardToLog()]
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer):
            yield
    finally:
        root.handlers = handlers
        for line in buffer.getvalue().splitlines():
            if line.strip():
                _LOG.debug("quantizer: %s", line)


_LOG = logging.getLogger("tritontune.precision")


class _ForwardToLog(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if not record.name.startswith("tritontune"):
            _LOG.debug("quantizer: %s", record.getMessage())


#: The ONNX opset a graph is converted to, at least, before it is quantized. Per-channel weights
#: in the QDQ format need DequantizeLinear's ``axis`` (opset 13); onnxruntime's quantizer writes
#: it into an older graph all the same, which then cannot be loaded: PP-OCRv4's text detector
#: (opset 12) failed every static INT8 recipe with "Unrecognized attribute: axis for operator
#: DequantizeLinear". ONNX's version converter upgrades such a graph exactly (the detector's
#: outputs were bit for bit the same).
QUANTIZE_MIN_OPSET = 13


def default_opset(model: onnx.ModelProto) -> int | None:
    """The version of the default (``ai.onnx``) operator set ``model`` imports."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def preprocessed(model: Path, folder: Path) -> Path:
    """``model`` after onnxruntime's quantization pre-processing (shape inference and basic graph
    optimization), cached beside the variants. A graph below :data:`QUANTIZE_MIN_OPSET` is
    upgraded to it first. Symbolic shape inference (what transformers need) is tried first; a
    graph it can't complete gets ONNX's own shape inference instead."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    version = onnxruntime_module("precision variants").__version__
    target = folder / f"{file_sha256(model)[:32]}.{version}.opset{QUANTIZE_MIN_OPSET}.pre.onnx"
    if target.is_file():
        return target
    source = Path(model).resolve()
    # onnxruntime's symbolic shape inference leaves a debug model (and its weights) in the working
    # directory when it can't finish: run it in a scratch directory, never the user's.
    with tempfile.TemporaryDirectory(dir=folder, prefix=".pre-") as scratch_dir:
        scratch = Path(scratch_dir) / "model.onnx"
        source = _upgraded(source, Path(scratch_dir) / "upgraded.onnx")
        with _working_directory(Path(scratch_dir)):
            try:
                quant_pre_process(str(source), str(scratch), auto_merge=True)
            except Exception as err:
                _LOG.debug("symbolic shape inference failed (%s); using ONNX's", _one_line(err))
                quant_pre_process(str(source), str(scratch), skip_symbolic_shape=True)
        os.replace(scratch, target)
    return target


def _upgraded(source: Path, out: Path) -> Path:
    """``source``, or its graph upgraded to :data:`QUANTIZE_MIN_OPSET` in ``out`` where it
    imports an older default operator set."""
    opset = default_opset(onnx.load(str(source), load_external_data=False))
    if opset is None or opset >= QUANTIZE_MIN_OPSET:
        return source
    from onnx import version_converter

    upgraded = version_converter.convert_version(onnx.load(str(source)), QUANTIZE_MIN_OPSET)
    onnx.save(upgraded, str(out))
    return out


@contextlib.contextmanager
def _working_directory(path: Path) -> Iterator[None]:
    before = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(before)


def _convert(model: Path, out: Path, recipe: Recipe, calibration: Sequence[Batch], folder: Path) -> None:
    if recipe.precision in (Precision.FP16, Precision.FP16_IO):
        from onnxruntime.transformers.float16 import convert_float_to_float16

        converted = convert_float_to_float16(
            onnx.load(str(model)), keep_io_types=recipe.precision == Precision.FP16
        )
        onnx.save(converted, str(out))
        return
    from onnxruntime.quantization import (
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    source = preprocessed(model, folder)
    keep = keep_float_nodes(onnx.load(str(source), load_external_data=False), recipe.keep_float)
    common = {
        "per_channel": recipe.per_channel,
        "reduce_range": recipe.reduce_range,
        "weight_type": QuantType.QInt8,
        "op_types_to_quantize": list(recipe.op_types) or None,
        "nodes_to_exclude": keep or None,
        "extra_options": {"MatMulConstBOnly": recipe.weights_only_matmul},
    }
    if recipe.precision == Precision.INT8_DYNAMIC:
        quantize_dynamic(source, out, **common)
        return
    methods = {
        Calibration.MINMAX: CalibrationMethod.MinMax,
        Calibration.PERCENTILE: CalibrationMethod.Percentile,
        Calibration.ENTROPY: CalibrationMethod.Entropy,
    }
    quantize_static(
        source,
        out,
        _Reader(calibration),
        quant_format=QuantFormat.QDQ,
        activation_type=QuantType.QUInt8,
        calibrate_method=methods[recipe.calibration or Calibration.MINMAX],
        **common,
    )


class _Reader:
    """onnxruntime's CalibrationDataReader protocol over prepared batches."""

    def __init__(self, batches: Sequence[Batch]) -> None:
        self._batches = list(batches)
        self._iter: Iterator[Batch] = iter(self._batches)

    def get_next(self) -> Batch | None:
        return next(self._iter, None)

    def rewind(self) -> None:
        self._iter = iter(self._batches)
