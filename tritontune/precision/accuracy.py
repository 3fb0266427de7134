"""Does a precision variant still give the right answers? Its outputs against FP32's.

Both models run with onnxruntime on the same inputs. Per output: the largest absolute error, the
relative error (norm of the difference over norm of the reference), the mean cosine similarity of
each sample's output with the reference's, and, when the output looks like class scores (a batch of
vectors), how often both pick the same top-1 class. A :class:`Tolerance` decides; defaults depend
on the precision (FP16 is held to a tighter standard than INT8).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np
import onnxruntime

from tritontune.config.variant import Precision
from tritontune.errors import InputError

Batch = dict[str, np.ndarray]


@dataclass(frozen=True)
class AccuracyFigures:
    """The worst figure over every output of the model."""

    max_abs_error: float
    relative_error: float
    cosine: float
    top1_agreement: float | None
    """None when no output looks like class scores."""
    samples: int

    def to_dict(self) -> dict:
        return {k: (None if v is None else round(float(v), 6)) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> AccuracyFigures:
        return cls(
            max_abs_error=float(data["max_abs_error"]),
            relative_error=float(data["relative_error"]),
            cosine=float(data["cosine"]),
            top1_agreement=data.get("top1_agreement"),
            samples=int(data.get("samples", 0)),
        )

    def summary(self) -> str:
        """``cos 0.99998, top-1 100.0%, max abs 0.0012``."""
        top1 = f", top-1 {self.top1_agreement:.1%}" if self.top1_agreement is not None else ""
        return f"cos {self.cosine:.5f}{top1}, max abs {self.max_abs_error:.3g}"


@dataclass(frozen=True)
class Tolerance:
    """Bounds a variant must stay within; ``None`` leaves a figure unchecked."""

    min_cosine: float | None = 0.999
    min_top1: float | None = 0.99
    max_relative_error: float | None = 0.01
    max_abs_error: float | None = None

    def problems(self, figures: AccuracyFigures) -> list[str]:
        found = []
        if self.min_cosine is not None and figures.cosine < self.min_cosine:
            found.append(f"cosine {figures.cosine:.5f} < {self.min_cosine}")
        if (
            self.min_top1 is not None
            and figures.top1_agreement is not None
            and figures.top1_agreement < self.min_top1
        ):
            found.append(f"top-1 agreement {figures.top1_agreement:.1%} < {self.min_top1:.1%}")
        if self.max_relative_error is not None and figures.relative_error > self.max_relative_error:
            found.append(f"relative error {figures.relative_error:.3g} > {self.max_relative_error}")
        if self.max_abs_error is not None and figures.max_abs_error > self.max_abs_error:
            found.append(f"max abs error {figures.max_abs_error:.3g} > {self.max_abs_error}")
        return found


#: Defaults per precision: FP16 should be nearly exact, INT8 close.
DEFAULT_TOLERANCES = {
    Precision.FP16: Tolerance(),
    Precision.FP16_IO: Tolerance(),
    Precision.INT8_DYNAMIC: Tolerance(min_cosine=0.99, min_top1=0.95, max_relative_error=0.10),
    Precision.INT8_STATIC: Tolerance(min_cosine=0.99, min_top1=0.95, max_relative_error=0.10),
}

_TOLERANCE_KEYS = {
    "cosine": "min_cosine",
    "top1": "min_top1",
    "rel": "max_relative_error",
    "max_abs": "max_abs_error",
}


def parse_tolerance(text: str, *, what: str = "--accuracy") -> dict[str, float]:
    """``cosine=0.995,top1=0.98,rel=0.05,max_abs=0.1`` -> overrides for every precision."""
    overrides: dict[str, float] = {}
    for part in str(text).split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or key not in _TOLERANCE_KEYS:
            raise InputError(
                f"{what}: {part.strip()!r} is not KEY=VALUE with KEY one of {', '.join(_TOLERANCE_KEYS)}"
            )
        try:
            number = float(value)
        except ValueError:
            raise InputError(f"{what}: {key}={value.strip()!r} is not a number") from None
        if number < 0:
            raise InputError(f"{what}: {key}={number} is negative")
        overrides[_TOLERANCE_KEYS[key]] = number
    return overrides


def tolerance_for(precision: str, overrides: dict[str, float] | None = None) -> Tolerance:
    default = DEFAULT_TOLERANCES.get(Precision(precision), Tolerance())
    return replace(default, **(overrides or {}))


def _session(model: Path) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    options.log_severity_level = 3
    return onnxruntime.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])


_ORT_TO_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _feeds(session: onnxruntime.InferenceSession, batch: Batch) -> Batch:
    """Cast float inputs to what ``session`` takes (an ``fp16_io`` variant takes FP16)."""
    feeds = {}
    for spec in session.get_inputs():
        value = batch[spec.name]
        wanted = _ORT_TO_NUMPY.get(spec.type)
        feeds[spec.name] = value.astype(wanted) if wanted is not None else value
    return feeds


def compare_models(reference: Path, candidate: Path, batches: Sequence[Batch]) -> AccuracyFigures:
    """Run both models on ``batches`` and compare every output."""
    if not batches:
        raise ValueError("no inputs to compare on")
    ref, cand = _session(reference), _session(candidate)
    names = [o.name for o in ref.get_outputs()]
    expected: dict[str, list[np.ndarray]] = {n: [] for n in names}
    got: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for batch in batches:
        for name, value in zip(names, ref.run(names, _feeds(ref, batch)), strict=True):
            expected[name].append(np.asarray(value, dtype=np.float64))
        for name, value in zip(names, cand.run(names, _feeds(cand, batch)), strict=True):
            got[name].append(np.asarray(value, dtype=np.float64))
    worst = None
    for name in names:
        figures = _figures(np.concatenate(expected[name]), np.concatenate(got[name]))
        worst = figures if worst is None else _worse(worst, figures)
    assert worst is not None
    return worst


def _figures(a: np.ndarray, b: np.ndarray) -> AccuracyFigures:
    diff = np.abs(a - b)
    norm = float(np.linalg.norm(a))
    relative = float(np.linalg.norm(a - b)) / norm if norm > 0 else float(np.linalg.norm(b))
    rows_a = a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(1, -1)
    rows_b = b.reshape(rows_a.shape)
    dots = (rows_a * rows_b).sum(axis=1)
    norms = np.linalg.norm(rows_a, axis=1) * np.linalg.norm(rows_b, axis=1)
    cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1), 1.0)
    top1 = None
    if a.ndim == 2 and a.shape[1] > 1:  # a batch of score vectors: class scores
        top1 = float((a.argmax(axis=1) == b.argmax(axis=1)).mean())
    return AccuracyFigures(
        max_abs_error=float(diff.max()) if diff.size else 0.0,
        relative_error=relative,
        cosine=float(cosine.mean()),
        top1_agreement=top1,
        samples=int(rows_a.shape[0]),
    )


def _worse(x: AccuracyFigures, y: AccuracyFigures) -> AccuracyFigures:
    tops = [t for t in (x.top1_agreement, y.top1_agreement) if t is not None]
    return AccuracyFigures(
        max_abs_error=max(x.max_abs_error, y.max_abs_error),
        relative_error=max(x.relative_error, y.relative_error),
        cosine=min(x.cosine, y.cosine),
        top1_agreement=min(tops) if tops else None,
        samples=min(x.samples, y.samples),
    )
