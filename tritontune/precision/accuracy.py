"""Does a precision variant still give the right answers? Each output judged by what it is for.

Both models run with onnxruntime on the same held-out inputs. Every output has a *kind*, and the
kind decides which figures judge it:

* ``embedding`` (a vector compared by similarity: sentence or image embeddings): the cosine
  similarity of each sample's vector with FP32's, its mean and its 5th percentile (the worst
  twentieth of the samples matter: a search index is judged by its bad neighbours);
* ``classifier`` (class scores or probabilities): how often both pick the same top-1 class, and for
  probabilities the mean KL divergence from FP32's distribution;
* ``regression`` (anything else): the relative error (norm of the difference over FP32's norm).

"Top-1" of an embedding means nothing, and a cosine of class probabilities hides a flipped
decision, so the kind matters. It is declared by the user (``--accuracy-kind``) or inferred from the
graph where it says so clearly (a final Softmax; an L2 normalization), else from the output's name;
a result says which kind judged each output and where that came from. Every figure is computed for
every output and kept in the results; bounds the user sets explicitly apply to every output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tritontune.config.variant import Precision
from tritontune.enums import TextEnum
from tritontune.errors import InputError
from tritontune.precision.runtime import onnxruntime_module

Batch = dict[str, np.ndarray]


class OutputKind(TextEnum):
    """What an output is for; it decides which accuracy figures judge a variant."""

    EMBEDDING = "embedding"
    CLASSIFIER = "classifier"
    REGRESSION = "regression"


@dataclass(frozen=True)
class OutputFigures:
    """One output of a variant against FP32's, over ``samples`` held-out samples."""

    name: str
    kind: OutputKind
    kind_source: str
    """Why this kind: ``declared``, ``graph: ...`` or ``name ...``, or ``default``."""
    cosine: float
    """Mean over samples of the cosine similarity with FP32's output."""
    cosine_p5: float
    """5th percentile of the same: the worst twentieth of samples."""
    top1_agreement: float | None
    """Classifier outputs only: the share of samples (rows) with the same top-1 class."""
    kl_divergence: float | None
    """Classifier outputs that are probabilities only: mean KL(FP32 || variant)."""
    relative_error: float
    max_abs_error: float
    samples: int

    def decisive(self) -> str:
        """The figures this output's kind is judged by, as one short text."""
        if self.kind == OutputKind.EMBEDDING:
            return f"cos mean {self.cosine:.4f}, p5 {self.cosine_p5:.4f}"
        if self.kind == OutputKind.CLASSIFIER:
            text = f"top-1 {self.top1_agreement:.1%}" if self.top1_agreement is not None else "top-1 -"
            return text + (f", KL {self.kl_divergence:.2g}" if self.kl_divergence is not None else "")
        return f"rel err {self.relative_error:.3g}, max abs {self.max_abs_error:.3g}"


@dataclass(frozen=True)
class AccuracyFigures:
    """Every output's figures, and how many samples judged (and calibrated) the variant."""

    outputs: tuple[OutputFigures, ...]
    calibration_samples: int = 0
    """Samples the variant was calibrated on (``int8_static``), none of them among ``samples``."""

    # The worst figure over every output, for tables and older readers.
    @property
    def samples(self) -> int:
        return min(o.samples for o in self.outputs)

    @property
    def cosine(self) -> float:
        return min(o.cosine for o in self.outputs)

    @property
    def cosine_p5(self) -> float:
        return min(o.cosine_p5 for o in self.outputs)

    @property
    def top1_agreement(self) -> float | None:
        tops = [o.top1_agreement for o in self.outputs if o.top1_agreement is not None]
        return min(tops) if tops else None

    @property
    def relative_error(self) -> float:
        return max(o.relative_error for o in self.outputs)

    @property
    def max_abs_error(self) -> float:
        return max(o.max_abs_error for o in self.outputs)

    def to_dict(self) -> dict:
        def rounded(value: object) -> object:
            return round(float(value), 6) if isinstance(value, (float, np.floating)) else value

        return {
            "cosine": rounded(self.cosine),
            "cosine_p5": rounded(self.cosine_p5),
            "top1_agreement": rounded(self.top1_agreement),
            "relative_error": rounded(self.relative_error),
            "max_abs_error": rounded(self.max_abs_error),
            "samples": self.samples,
            "calibration_samples": self.calibration_samples,
            "outputs": [
                {k: (str(v) if k == "kind" else rounded(v)) for k, v in asdict(o).items()}
                for o in self.outputs
            ],
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> AccuracyFigures:
        """Read :meth:`to_dict`'s form, or the one-line form of studies before output kinds."""
        names = {f.name for f in fields(OutputFigures)}
        outputs = [
            OutputFigures(
                **{**{k: v for k, v in o.items() if k in names}, "kind": OutputKind(o["kind"])}
            )
            for o in data.get("outputs") or ()
        ]
        if not outputs:  # an older record: one worst-case line, no kinds
            top1 = data.get("top1_agreement")
            outputs = [
                OutputFigures(
                    name="*",
                    kind=OutputKind.CLASSIFIER if top1 is not None else OutputKind.REGRESSION,
                    kind_source="default",
                    cosine=float(data["cosine"]),
                    cosine_p5=float(data.get("cosine_p5", data["cosine"])),
                    top1_agreement=top1,
                    kl_divergence=None,
                    relative_error=float(data["relative_error"]),
                    max_abs_error=float(data["max_abs_error"]),
                    samples=int(data.get("samples", 0)),
                )
            ]
        return cls(tuple(outputs), calibration_samples=int(data.get("calibration_samples", 0)))

    def summary(self) -> str:
        """``sentence_embedding (embedding): cos mean 0.9932, p5 0.9900; 128 samples``."""
        parts = [
            (f"{o.name} ({o.kind}): " if len(self.outputs) > 1 or o.name != "*" else "") + o.decisive()
            for o in self.outputs
        ]
        held = (
            f"{self.samples} held-out samples" if self.calibration_samples else f"{self.samples} samples"
        )
        return "; ".join(parts) + f" [{held}]"


@dataclass(frozen=True)
class Tolerance:
    """Bounds a variant's outputs must stay within; ``None`` leaves a figure unchecked."""

    min_cosine: float | None = None
    min_cosine_p5: float | None = None
    min_top1: float | None = None
    max_kl: float | None = None
    max_relative_error: float | None = None
    max_abs_error: float | None = None

    def problems(self, output: OutputFigures) -> list[str]:
        checks = [
            (self.min_cosine, output.cosine, "cosine", True),
            (self.min_cosine_p5, output.cosine_p5, "cosine p5", True),
            (self.min_top1, output.top1_agreement, "top-1 agreement", True),
            (self.max_kl, output.kl_divergence, "KL divergence", False),
            (self.max_relative_error, output.relative_error, "relative error", False),
            (self.max_abs_error, output.max_abs_error, "max abs error", False),
        ]
        found = []
        for bound, value, label, at_least in checks:
            if bound is None or value is None:
                continue
            if at_least and value < bound:
                shown = (
                    f"{value:.1%} < {bound:.1%}"
                    if label.startswith("top-1")
                    else f"{value:.5f} < {bound}"
                )
                found.append(f"{output.name}: {label} {shown}")
            elif not at_least and value > bound:
                found.append(f"{output.name}: {label} {value:.3g} > {bound}")
        return found


#: Per precision and output kind, the figures that decide and their bounds. FP16 should be nearly
#: exact. INT8 bounds are set so that a per-channel INT8 of a real sentence encoder passes (cosine
#: mean ~0.99, p5 ~0.99 on all-MiniLM-L6-v2) and a per-tensor or fully static one fails (mean
#: 0.93-0.96); measured in bench/precision.py.
_FP16 = {
    OutputKind.EMBEDDING: Tolerance(min_cosine=0.999, min_cosine_p5=0.998),
    OutputKind.CLASSIFIER: Tolerance(min_top1=0.99, max_kl=0.001),
    OutputKind.REGRESSION: Tolerance(max_relative_error=0.01),
}
_INT8 = {
    OutputKind.EMBEDDING: Tolerance(min_cosine=0.985, min_cosine_p5=0.97),
    OutputKind.CLASSIFIER: Tolerance(min_top1=0.95, max_kl=0.05),
    OutputKind.REGRESSION: Tolerance(max_relative_error=0.10),
}
DEFAULT_TOLERANCES: dict[Precision, dict[OutputKind, Tolerance]] = {
    Precision.FP16: _FP16,
    Precision.FP16_IO: _FP16,
    Precision.INT8_DYNAMIC: _INT8,
    Precision.INT8_STATIC: _INT8,
}

_TOLERANCE_KEYS = {
    "cosine": "min_cosine",
    "cosine_p5": "min_cosine_p5",
    "top1": "min_top1",
    "kl": "max_kl",
    "rel": "max_relative_error",
    "max_abs": "max_abs_error",
}


def parse_tolerance(text: str, *, what: str = "--accuracy") -> dict[str, float]:
    """``cosine=0.995,top1=0.98,rel=0.05,max_abs=0.1`` -> bounds for every output and precision."""
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


def parse_output_kinds(text: str | Mapping, *, what: str = "--accuracy-kind") -> dict[str, OutputKind]:
    """``embedding`` (every output) or ``scores=classifier,emb=embedding`` -> kinds by output.

    The key ``*`` stands for every output not named.
    """
    pairs: list[tuple[str, str]]
    if isinstance(text, Mapping):
        pairs = [(str(k), str(v)) for k, v in text.items()]
    else:
        pairs = []
        for part in str(text).split(","):
            if part.strip():
                name, sep, kind = part.rpartition("=")
                pairs.append((name.strip() if sep else "*", kind.strip()))
    kinds: dict[str, OutputKind] = {}
    for name, kind in pairs:
        try:
            kinds[name or "*"] = OutputKind(kind.lower())
        except ValueError:
            known = ", ".join(k.value for k in OutputKind)
            raise InputError(f"{what}: {kind!r} is not an output kind ({known})") from None
    return kinds


def tolerance_for(
    precision: str, kind: OutputKind, overrides: Mapping[str, float] | None = None
) -> Tolerance:
    """The default bounds of ``kind`` for ``precision``, with the user's explicit bounds on top."""
    default = DEFAULT_TOLERANCES.get(Precision(precision), _FP16)[kind]
    return replace(default, **(overrides or {}))


def judge(
    precision: str, figures: AccuracyFigures, overrides: Mapping[str, float] | None = None
) -> list[str]:
    """Every bound a variant's outputs break (empty: accepted)."""
    found = []
    for output in figures.outputs:
        found.extend(tolerance_for(precision, output.kind, overrides).problems(output))
    return found


# ------------------------------------------------------------------------ kinds from the graph

_PASS_THROUGH = {"Identity", "Cast", "Reshape", "Squeeze", "Unsqueeze", "Flatten", "Expand"}
_EMBEDDING_NAMES = ("embed", "pooler", "hidden_state", "sentence", "feature", "vector")
_CLASSIFIER_NAMES = ("logit", "score", "prob", "class", "label")


def infer_output_kinds(
    model: onnx.ModelProto, declared: Mapping[str, OutputKind] | None = None
) -> dict[str, tuple[OutputKind, str]]:
    """Each graph output's kind and where it came from (declared, the graph, the name, default)."""
    declared = declared or {}
    producers = {out: node for node in model.graph.node for out in node.output}

    def producer(name: str) -> onnx.NodeProto | None:
        node = producers.get(name)
        while node is not None and node.op_type in _PASS_THROUGH and node.input:
            node = producers.get(node.input[0])
        return node

    def reaches_l2_norm(name: str, depth: int = 4) -> bool:
        node = producer(name)
        while node is not None and depth > 0:
            if node.op_type in ("ReduceL2", "Sqrt", "LpNormalization"):
                return True
            if node.op_type not in ("Max", "Clip", "Add") or not node.input:
                return False
            node, depth = producer(node.input[0]), depth - 1
        return False

    kinds = {}
    for output in model.graph.output:
        name = output.name
        node = producer(name)
        lowered = name.lower()
        if name in declared or "*" in declared:
            kinds[name] = (declared[name] if name in declared else declared["*"], "declared")
        elif node is not None and node.op_type in ("Softmax", "LogSoftmax"):
            kinds[name] = (OutputKind.CLASSIFIER, f"graph: ends in {node.op_type}")
        elif node is not None and (
            (node.op_type == "LpNormalization" and node.attribute and _p_is_2(node))
            or (node.op_type == "Div" and len(node.input) > 1 and reaches_l2_norm(node.input[1]))
        ):
            kinds[name] = (OutputKind.EMBEDDING, "graph: L2-normalized")
        elif any(word in lowered for word in _EMBEDDING_NAMES):
            kinds[name] = (OutputKind.EMBEDDING, f"name {name!r}")
        elif any(word in lowered for word in _CLASSIFIER_NAMES):
            kinds[name] = (OutputKind.CLASSIFIER, f"name {name!r}")
        else:
            kinds[name] = (OutputKind.REGRESSION, "default")
    unknown = sorted(set(declared) - set(kinds) - {"*"})
    if unknown:
        raise InputError(
            f"--accuracy-kind names {', '.join(map(repr, unknown))}, not outputs of the model "
            f"(outputs: {', '.join(kinds)})"
        )
    return kinds


def _p_is_2(node: onnx.NodeProto) -> bool:
    p = next((a.i for a in node.attribute if a.name == "p"), 2)
    return p == 2


# ---------------------------------------------------------------------------------- comparing


def _session(model: Path) -> Any:
    """On the GPU when onnxruntime-gpu sees one (``tritontune[gpu]``), else the CPU: FP32 and the
    variant always run on the same provider, so the comparison is like for like."""
    ort = onnxruntime_module("the accuracy check of precision variants")
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(model), options, providers=accuracy_providers())


def accuracy_providers() -> list[str]:
    available = onnxruntime_module("the accuracy check").get_available_providers()
    if "CUDAExecutionProvider" in available:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]
    return ["CPUExecutionProvider"]


_ORT_TO_NUMPY = {"tensor(float)": np.float32, "tensor(float16)": np.float16}


def _feeds(session: Any, batch: Batch) -> Batch:
    """Cast float inputs to what ``session`` takes (an ``fp16_io`` variant takes FP16)."""
    feeds = {}
    for spec in session.get_inputs():
        value = batch[spec.name]
        wanted = _ORT_TO_NUMPY.get(spec.type)
        feeds[spec.name] = value.astype(wanted) if wanted is not None else value
    return feeds


def run_model(model: Path, batches: Sequence[Batch]) -> dict[str, np.ndarray]:
    """Every output of ``model`` on ``batches``, concatenated along the first axis (float64)."""
    session = _session(model)
    names = [o.name for o in session.get_outputs()]
    outputs: dict[str, list[np.ndarray]] = {n: [] for n in names}
    for batch in batches:
        for name, value in zip(names, session.run(names, _feeds(session, batch)), strict=True):
            outputs[name].append(np.asarray(value, dtype=np.float64))
    return {name: np.concatenate(values) for name, values in outputs.items()}


def compare_models(
    reference: Path,
    candidate: Path,
    batches: Sequence[Batch],
    *,
    kinds: Mapping[str, OutputKind] | None = None,
    calibration_samples: int = 0,
    expected: Mapping[str, np.ndarray] | None = None,
) -> AccuracyFigures:
    """Run both models on ``batches`` and compare every output, each by its kind.

    ``expected``: the reference's outputs on ``batches`` (:func:`run_model`), when the caller
    compares several candidates against one reference and runs it once."""
    if not batches:
        raise ValueError("no inputs to compare on")
    inferred = infer_output_kinds(onnx.load(str(reference), load_external_data=False), kinds)
    expected = expected if expected is not None else run_model(reference, batches)
    got = run_model(candidate, batches)
    outputs = tuple(
        output_figures(name, *inferred[name], expected[name], got[name]) for name in expected
    )
    return AccuracyFigures(outputs, calibration_samples=calibration_samples)


def output_figures(
    name: str, kind: OutputKind, kind_source: str, a: np.ndarray, b: np.ndarray
) -> OutputFigures:
    """Every figure for one output: ``a`` is FP32's, ``b`` the variant's (first axis: samples)."""
    diff = np.abs(a - b)
    norm = float(np.linalg.norm(a))
    relative = float(np.linalg.norm(a - b)) / norm if norm > 0 else float(np.linalg.norm(b))
    rows_a = a.reshape(a.shape[0], -1) if a.ndim > 1 else a.reshape(1, -1)
    rows_b = b.reshape(rows_a.shape)
    dots = (rows_a * rows_b).sum(axis=1)
    norms = np.linalg.norm(rows_a, axis=1) * np.linalg.norm(rows_b, axis=1)
    cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1), 1.0)
    top1 = kl = None
    if kind == OutputKind.CLASSIFIER and a.ndim >= 1 and a.shape[-1] > 1:
        scores_a = a.reshape(-1, a.shape[-1])  # a batch of score vectors (per token too)
        scores_b = b.reshape(scores_a.shape)
        top1 = float((scores_a.argmax(axis=1) == scores_b.argmax(axis=1)).mean())
        if _are_probabilities(scores_a):
            p, q = np.clip(scores_a, 1e-12, 1), np.clip(scores_b, 1e-12, 1)
            kl = float(np.maximum((p * np.log(p / q)).sum(axis=1), 0).mean())
    return OutputFigures(
        name=name,
        kind=kind,
        kind_source=kind_source,
        cosine=float(cosine.mean()),
        cosine_p5=float(np.percentile(cosine, 5)),
        top1_agreement=top1,
        kl_divergence=kl,
        relative_error=relative,
        max_abs_error=float(diff.max()) if diff.size else 0.0,
        samples=int(rows_a.shape[0]),
    )


def _are_probabilities(rows: np.ndarray) -> bool:
    return bool(rows.min() >= 0 and np.allclose(rows.sum(axis=1), 1.0, atol=1e-3))
