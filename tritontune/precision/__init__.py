"""Precision variants (FP16, INT8) of ONNX models, each gated on its accuracy against FP32."""

from tritontune.precision.accuracy import (
    AccuracyFigures,
    Tolerance,
    compare_models,
    parse_tolerance,
    tolerance_for,
)
from tritontune.precision.convert import (
    DEFAULT_PRECISIONS,
    FP32,
    PRECISIONS,
    ConversionError,
    build_variant,
    variant_filename,
)
from tritontune.precision.prepare import PrecisionCheck, precision_data, prepare_precisions

__all__ = [
    "DEFAULT_PRECISIONS",
    "FP32",
    "PRECISIONS",
    "AccuracyFigures",
    "ConversionError",
    "PrecisionCheck",
    "Tolerance",
    "build_variant",
    "compare_models",
    "parse_tolerance",
    "precision_data",
    "prepare_precisions",
    "tolerance_for",
    "variant_filename",
]
