"""How a precision variant is built: recipes that suit the model, tried in order until one is accurate.

A :class:`Recipe` is everything onnxruntime's quantizer is told: which op types it quantizes,
per-channel or per-tensor weights, which nodes stay in float, how activations are calibrated. One
recipe can't be known to be best for every model, so :func:`candidates` lists a few per precision
and model family, fastest first; :mod:`tritontune.precision.prepare` keeps the first that passes
the accuracy gate. Its :meth:`Recipe.to_dict` is kept in the study and the tuning record, so an
export rebuilds exactly what was measured. The rules (per-channel weights, the graph
pre-processed, only constant-weight MatMul/Gemm in transformers, the GELU-fed MatMul in float as a
second candidate, U8/S8 QDQ for static INT8, 7-bit weights last for CPUs without VNNI) and what
they were measured on:
``docs/concepts/precision.md``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import onnx

from tritontune.config.variant import Precision
from tritontune.enums import TextEnum
from tritontune.errors import InputError


class ModelFamily(TextEnum):
    """What a model is, as far as quantizing it goes; read from its graph's operators."""

    TRANSFORMER = "transformer"
    CNN = "cnn"
    OTHER = "other"


class Calibration(TextEnum):
    """onnxruntime's calibration methods for static INT8 activations."""

    MINMAX = "minmax"
    PERCENTILE = "percentile"
    ENTROPY = "entropy"


class KeepFloat(TextEnum):
    """Rules that keep numerically sensitive nodes in float, resolved on the pre-processed graph."""

    GELU_FED_MATMUL = "gelu-fed-matmul"
    """The MatMul whose input is a GELU's output (a transformer's feed-forward down-projection)."""


@dataclass(frozen=True)
class Recipe:
    """One way to build ``precision``; two equal recipes build the same file from the same model."""

    precision: Precision
    op_types: tuple[str, ...] = ()
    """Op types to quantize (INT8); empty: onnxruntime's default list."""
    per_channel: bool = True
    weights_only_matmul: bool = True
    """Quantize only MatMuls whose second input is a constant (weights), not activation x activation."""
    keep_float: tuple[KeepFloat, ...] = ()
    calibration: Calibration | None = None
    """Static INT8 only."""
    reduce_range: bool = False
    """INT8 weights in 7 bits: a CPU without VNNI (AVX2, AVX-512 before VNNI) multiplies 8-bit
    activations by 8-bit weights into 16-bit sums that saturate; 7-bit weights leave them room."""

    def label(self) -> str:
        """``int8_static: per-channel MatMul/Gemm, gelu-fed-matmul in float, minmax calibration``."""
        if self.precision in (Precision.FP16, Precision.FP16_IO):
            io = "FP16 inputs/outputs" if self.precision == Precision.FP16_IO else "FP32 inputs/outputs"
            return f"{self.precision}: FP16 weights and compute, {io}"
        if self.precision == Precision.FP32:
            return "fp32"
        parts = [
            f"{'per-channel' if self.per_channel else 'per-tensor'} "
            + ("/".join(self.op_types) if self.op_types else "default ops")
        ]
        parts += [f"{rule} in float" for rule in self.keep_float]
        if self.reduce_range:
            parts.append("7-bit weights")
        if self.calibration is not None:
            parts.append(f"{self.calibration} calibration")
        return f"{self.precision}: " + ", ".join(parts)

    def to_dict(self) -> dict:
        return {
            "precision": str(self.precision),
            "op_types": list(self.op_types),
            "per_channel": self.per_channel,
            "weights_only_matmul": self.weights_only_matmul,
            "keep_float": [str(k) for k in self.keep_float],
            "calibration": str(self.calibration) if self.calibration else None,
        } | ({"reduce_range": True} if self.reduce_range else {})  # an older recipe's dict unchanged

    @classmethod
    def from_dict(cls, data: Mapping) -> Recipe:
        return cls(
            precision=Precision(data["precision"]),
            op_types=tuple(data.get("op_types", ())),
            per_channel=bool(data.get("per_channel", True)),
            weights_only_matmul=bool(data.get("weights_only_matmul", True)),
            keep_float=tuple(KeepFloat(k) for k in data.get("keep_float", ())),
            calibration=Calibration(data["calibration"]) if data.get("calibration") else None,
            reduce_range=bool(data.get("reduce_range", False)),
        )


def model_family(model: onnx.ModelProto) -> ModelFamily:
    """Transformer: attention (Softmax) with layer norms and MatMuls; CNN: convolutions."""
    ops = {node.op_type for node in model.graph.node}
    has_norm = bool(
        ops & {"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization"}
    )
    has_norm = has_norm or {"ReduceMean", "Sqrt", "Div"} <= ops  # a LayerNorm written out
    if ("Attention" in ops or "MultiHeadAttention" in ops) or (
        "Softmax" in ops and "MatMul" in ops and has_norm
    ):
        return ModelFamily.TRANSFORMER
    if "Conv" in ops:
        return ModelFamily.CNN
    return ModelFamily.OTHER


_OP_TYPES = {
    ModelFamily.TRANSFORMER: ("MatMul", "Gemm", "Attention"),
    ModelFamily.CNN: ("Conv", "MatMul", "Gemm"),
    ModelFamily.OTHER: ("MatMul", "Gemm"),
}


def parse_calibration(text: str, *, what: str = "--calibration") -> tuple[Calibration, ...]:
    """``auto`` (every method, in order) or one of ``minmax``, ``percentile``, ``entropy``."""
    value = str(text).strip().lower()
    if value == "auto":
        return tuple(Calibration)
    try:
        return (Calibration(value),)
    except ValueError:
        known = ", ".join(["auto", *(c.value for c in Calibration)])
        raise InputError(f"{what}: {text!r} is not one of {known}") from None


def candidates(
    precision: Precision,
    family: ModelFamily,
    calibrations: Sequence[Calibration] = tuple(Calibration),
) -> list[Recipe]:
    """The recipes worth trying for ``precision`` on a model of ``family``, in the order to try.

    Most quantized first (the fastest, if it is accurate enough); a calibration method only changes
    the scales, not the graph or its speed, so for static INT8 the methods of one graph come before
    the next graph. Last, each graph once more with 7-bit weights (static INT8: the first method
    only, since the saturation they avoid is the weights', whatever the activations' scales): what
    passes on a CPU without VNNI where 8-bit weights saturate (where an earlier candidate passes,
    as on a CPU with VNNI, they are never built).
    """
    if precision == Precision.FP32:
        return [Recipe(precision)]
    if precision in (Precision.FP16, Precision.FP16_IO):
        return [Recipe(precision, per_channel=False, weights_only_matmul=False)]
    ops = _OP_TYPES[family]
    graphs: list[tuple[KeepFloat, ...]] = [()]
    if family == ModelFamily.TRANSFORMER:
        graphs.append((KeepFloat.GELU_FED_MATMUL,))
    if precision == Precision.INT8_DYNAMIC:
        return [
            Recipe(precision, ops, keep_float=keep, reduce_range=reduce)
            for reduce in (False, True)
            for keep in graphs
        ]
    return [
        Recipe(precision, ops, keep_float=keep, calibration=method, reduce_range=reduce)
        for reduce, methods in ((False, calibrations), (True, calibrations[:1]))
        for keep in graphs
        for method in methods
    ]


def keep_float_nodes(model: onnx.ModelProto, rules: Sequence[KeepFloat]) -> list[str]:
    """The names of the nodes ``rules`` keep in float in ``model``."""
    names: list[str] = []
    if KeepFloat.GELU_FED_MATMUL in rules:
        producers = {out: node for node in model.graph.node for out in node.output}

        def from_gelu(name: str, depth: int = 3) -> bool:
            node = producers.get(name)
            if node is not None and node.op_type in ("Gelu", "FastGelu", "BiasGelu", "Erf", "Tanh"):
                return True
            if node is None or depth == 0:
                return False
            return any(from_gelu(i, depth - 1) for i in node.input if node.op_type in ("Mul", "Add"))

        names += [n.name for n in model.graph.node if n.op_type == "MatMul" and from_gelu(n.input[0])]
    return names
