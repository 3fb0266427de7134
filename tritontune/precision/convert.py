"""Precision variants of an ONNX model, built with onnxruntime's own tools and cached.

* ``fp16``: weights and compute in FP16, inputs and outputs kept FP32 (clients change nothing);
* ``fp16_io``: FP16 through and through, inputs and outputs included (config data types follow);
* ``int8_dynamic``: INT8 weights, activations quantized on the fly (no calibration);
* ``int8_static``: INT8 weights and activations (QDQ), calibrated on representative inputs.

FP16 comes from ``onnxruntime.transformers.float16``, INT8 from ``onnxruntime.quantization``: no
graph surgery of ours. A variant is cached under a key made of the model's content, the precision,
the calibration data and the onnxruntime version, so it is built once per model.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime

from tritontune.config.repository import file_sha256
from tritontune.config.variant import FP32, Precision
from tritontune.errors import InputError

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


def build_variant(
    model: Path,
    precision: str,
    *,
    calibration: Sequence[Batch] = (),
    cache: Path | None = None,
) -> Path:
    """The ``precision`` variant of the ONNX file ``model`` (FP32: ``model`` itself)."""
    precision = check_precision(precision)
    if precision == FP32:
        return Path(model)
    if precision == Precision.INT8_STATIC and not calibration:
        raise InputError("int8_static needs calibration inputs")
    key = hashlib.sha256(
        "|".join(
            (
                file_sha256(model),
                precision,
                onnxruntime.__version__,
                _calibration_digest(calibration) if precision == Precision.INT8_STATIC else "",
            )
        ).encode()
    ).hexdigest()[:32]
    folder = cache or cache_dir()
    target = folder / f"{key}.{precision}.onnx"
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    handle, scratch = tempfile.mkstemp(suffix=".onnx", dir=folder, prefix=".building-")
    os.close(handle)
    try:
        _convert(Path(model), Path(scratch), precision, calibration)
        os.replace(scratch, target)  # complete files only: a crash never leaves half a variant
    except Exception as err:
        Path(scratch).unlink(missing_ok=True)
        if isinstance(err, (InputError, ConversionError)):
            raise
        raise ConversionError(" ".join(f"{type(err).__name__}: {err}".split())[:400]) from None
    return target


def _convert(model: Path, out: Path, precision: str, calibration: Sequence[Batch]) -> None:
    if precision in (Precision.FP16, Precision.FP16_IO):
        from onnxruntime.transformers.float16 import convert_float_to_float16

        converted = convert_float_to_float16(
            onnx.load(str(model)), keep_io_types=precision == Precision.FP16
        )
        onnx.save(converted, str(out))
        return
    from onnxruntime.quantization import QuantType, quantize_dynamic, quantize_static

    if precision == Precision.INT8_DYNAMIC:
        quantize_dynamic(model, out, weight_type=QuantType.QInt8)
    else:
        quantize_static(
            model,
            out,
            _Reader(calibration),
            activation_type=QuantType.QInt8,
            weight_type=QuantType.QInt8,
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
