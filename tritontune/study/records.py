"""What a study holds, typed: read with :meth:`tritontune.study.handle.TuningStudy.read` (or
:func:`tritontune.study.handle.read_record`), never from raw attributes.

Plain frozen data with the few derived properties readers share (which trials count, which are
feasible, the best). The verdict policy (which figure to state, which finalist won) is
:mod:`tritontune.study.verdict`'s: its functions take these records, and no record calls them
(what a workload study's final rounds decided is kept in its :class:`WorkloadFinal`). The
attribute names are :mod:`tritontune.study.schema`'s.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from optuna.trial import TrialState

from tritontune.hostinfo import WorkerId
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.traffic import Layout, Traffic
from tritontune.study.duet import Duet, Order
from tritontune.study.figures import (
    CapacityFigure,
    Finalist,
    OperatingPoint,
    PlayoffResult,
)
from tritontune.study.schema import ContextKey, StudyKind, request_shape_attr
from tritontune.units import format_duration


@dataclass(frozen=True)
class StudyIdentity:
    """What a single-class study is for; a study is never resumed for another identity (results
    never mix)."""

    model: str
    slo_p99_s: float
    load_mode: LoadMode

    def describe(self) -> str:
        return f"model {self.model!r}, p99 SLO {format_duration(self.slo_p99_s)}, {self.load_mode} load"


@dataclass(frozen=True)
class WorkloadIdentity:
    """What a workload study is for: the model and the traffic mix (its classes as written)."""

    model: str
    traffic: Mapping[str, Any]
    """``Traffic.to_dict()``."""

    def describe(self) -> str:
        names = ", ".join(str(c.get("name")) for c in self.traffic.get("classes", ()))
        return f"model {self.model!r}, workload classes {names}"

    def differences(self, other: WorkloadIdentity) -> list[str]:
        """Where ``other`` differs from this identity, one line each ("what: this's, other's"):
        two workloads with the same class names may differ in any field of a class, and a
        refusal that named only the classes said the same thing twice."""

        def shown(value: Any) -> str:
            text = repr(value)
            return text if len(text) <= 60 else text[:57] + "..."

        out = [f"model: {self.model!r}, {other.model!r}"] if self.model != other.model else []
        mine = {str(c.get("name")): c for c in self.traffic.get("classes", ())}
        theirs = {str(c.get("name")): c for c in other.traffic.get("classes", ())}
        for name in [*mine, *(n for n in theirs if n not in mine)]:
            a, b = mine.get(name), theirs.get(name)
            if a is None or b is None:
                out.append(f"class {name!r}: {'absent' if a is None else 'present'}, "
                           f"{'absent' if b is None else 'present'}")  # fmt: skip
                continue
            out += [
                f"class {name!r} {key}: {shown(a.get(key))}, {shown(b.get(key))}"
                for key in [*a, *(k for k in b if k not in a)]
                if a.get(key) != b.get(key)
            ]
        for key in [*self.traffic, *(k for k in other.traffic if k not in self.traffic)]:
            if key != "classes" and self.traffic.get(key) != other.traffic.get(key):
                out.append(f"{key}: {shown(self.traffic.get(key))}, {shown(other.traffic.get(key))}")
        return out


Identity = StudyIdentity | WorkloadIdentity


@dataclass(frozen=True)
class RecordedRequestShape:
    """What each request of the search carried (``check`` sends the same)."""

    batch_size: int = 1
    dynamic_dim: int = 16
    input_data: str | None = None
    """The ``--input-data`` file, if the requests came from one."""


@dataclass(frozen=True)
class StudyContext:
    """What ``export`` and ``check`` need to reproduce a result: where the model is, what each
    request carried, which server and machine measured it. Written once, when a study is new."""

    model_repository: str | None = None
    model_version: str | None = None
    model_files: dict[str, str] | None = None
    """sha256 of the model's version files as measured (``export`` refuses changed files)."""
    composing: list[str] | None = None
    """For a BLS model: the models its code calls (``--composing``), which export and check
    need to serve it as it was measured; None for one model and for an ensemble (its steps say)."""
    step_model_files: dict[str, dict[str, str]] | None = None
    """For a pipeline: each composing model's :attr:`model_files` (every version its steps run),
    by model; for a group of models (classes naming their models): every model's. None for a
    single model, and for pipeline and group studies made before export knew them."""
    request_shape: RecordedRequestShape = field(default_factory=RecordedRequestShape)
    server_version: str = "unknown"
    launch: str = "local"
    served_via_python_backend: bool = False
    host: dict[str, Any] = field(default_factory=dict)
    measure: dict[str, Any] = field(default_factory=dict)

    def to_attrs(self) -> dict[str, Any]:
        """The study attributes, by name (:class:`ContextKey`)."""
        values = asdict(self)
        return {key: values[key] for key in ContextKey.ALL}

    @classmethod
    def from_attrs(cls, attrs: Mapping[str, Any]) -> StudyContext:
        shape = request_shape_attr(attrs) or {}
        return cls(
            model_repository=attrs.get(ContextKey.MODEL_REPOSITORY),
            model_version=attrs.get(ContextKey.MODEL_VERSION),
            model_files=attrs.get(ContextKey.MODEL_FILES),
            composing=attrs.get(ContextKey.COMPOSING),
            step_model_files=attrs.get(ContextKey.STEP_MODEL_FILES),
            request_shape=RecordedRequestShape(
                batch_size=int(shape.get("batch_size", 1)),
                dynamic_dim=int(shape.get("dynamic_dim", 16)),
                input_data=shape.get("input_data"),
            ),
            server_version=str(attrs.get(ContextKey.SERVER_VERSION, "unknown")),
            launch=str(attrs.get(ContextKey.LAUNCH, "local")),
            served_via_python_backend=bool(attrs.get(ContextKey.VIA_PYTHON, False)),
            host=dict(attrs.get(ContextKey.HOST) or {}),
            measure=dict(attrs.get(ContextKey.MEASURE) or {}),
        )


def precision_key(precision: str, model: str | None = None) -> str:
    """How a study keys a precision check: the precision (``int8_dynamic``), or for one model
    of a pipeline, ``MODEL/PRECISION`` (``minilm/int8_dynamic``: a point's ``MODEL/KNOB``
    spelling)."""
    return f"{model}/{precision}" if model else str(precision)


@dataclass(frozen=True)
class RecordedPrecision:
    """A precision variant as the search checked it before measuring (accepted or not)."""

    precision: str
    accepted: bool
    reason: str | None = None
    accuracy: dict[str, Any] | None = None
    """Its accuracy against FP32 (``AccuracyFigures.to_dict``)."""
    data: str | None = None
    """What the accuracy was judged on."""
    recipe: dict[str, Any] | None = None
    """How it was built (``Recipe.to_dict``), so ``export`` rebuilds the same file."""
    recipe_label: str | None = None
    tried: tuple[str, ...] = ()
    calibration_data: str | None = None
    input_data: str | None = None
    """What it was calibrated and judged on when not the request data (a pipeline's composing
    model: its inputs as the steps before it computed them)."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "precision": self.precision,
            "accepted": self.accepted,
            "accuracy": self.accuracy,
            "reason": self.reason,
            "data": self.data,
            "recipe": self.recipe,
            "recipe_label": self.recipe_label,
            "tried": list(self.tried),
            "calibration_data": self.calibration_data,
            "input_data": self.input_data,
        }

    @classmethod
    def from_dict(cls, precision: str, data: Mapping[str, Any]) -> RecordedPrecision:
        return cls(
            precision=str(data.get("precision", precision)),
            accepted=bool(data.get("accepted", False)),
            reason=data.get("reason"),
            accuracy=data.get("accuracy"),
            data=data.get("data"),
            recipe=data.get("recipe"),
            recipe_label=data.get("recipe_label"),
            tried=tuple(data.get("tried") or ()),
            calibration_data=data.get("calibration_data"),
            input_data=data.get("input_data"),
        )


@dataclass(frozen=True)
class TrialResult:
    """One trial as the study keeps it (of either kind of study)."""

    number: int
    params: dict[str, Any]
    """The point of the space (what the sampler proposed)."""
    knobs: dict[str, Any]
    """The config's knobs as applied (:func:`tritontune.config.variant.describe_config`)."""
    operating_point: OperatingPoint | None
    """A single-class trial's figure."""
    config_pbtxt: str
    duration_s: float | None
    error: str | None = None
    accuracy: dict[str, Any] | None = None
    """For a precision variant: its accuracy against FP32 (shown wherever its speed is)."""
    state: TrialState = TrialState.COMPLETE
    switch_s: float | None = None
    """Seconds the server took to switch to this config."""
    interrupted: bool = False
    """Cut off by Ctrl-C (measured again when the search resumes)."""
    duplicate_of: int | None = None
    """A re-proposal of that trial's point: its result told again, not measured."""
    server_restarts: int = 0
    """Times the server died under this config and was restarted (it is measured once more
    after a death; a second one fails the trial)."""
    worker: WorkerId | None = None
    """The worker that ran it (None in studies made before workers were recorded)."""
    surplus: bool = False
    """Started when other workers' trials already filled the budget: not measured."""
    started: dt.datetime | None = None
    finished: dt.datetime | None = None
    capacity: CapacityFigure | None = None
    """A workload trial's figure."""
    predicted: dict[str, Any] | None = None
    """What ``--strategy predict`` predicted of the config before it was measured (throughput,
    p99, load, band, the calibration it came from): never the trial's figure."""

    @property
    def lost(self) -> bool:
        """Failed without a reason: its worker was gone (the config was queued again)."""
        return (
            self.state == TrialState.FAIL
            and self.error is None
            and not self.interrupted
            and self.duplicate_of is None
            and not self.surplus
        )

    @property
    def feasible(self) -> bool:
        if self.capacity is not None:
            return self.capacity.feasible
        return self.operating_point is not None and self.operating_point.feasible

    @property
    def throughput(self) -> float:
        return self.operating_point.throughput if self.operating_point else 0.0

    @property
    def value(self) -> float:
        """What the search maximized: throughput, or a workload trial's work served."""
        return (self.served or 0.0) if self.capacity is not None else self.throughput

    @property
    def served(self) -> float | None:
        """A workload trial's value: inferences served per second with every class meeting its
        objective (None: not measured)."""
        return self.capacity.served if self.capacity is not None else None

    @property
    def total_rate(self) -> float | None:
        """The total rate a workload trial was offered at its capacity (None: not measured)."""
        return self.capacity.total_rate if self.capacity is not None else None

    @property
    def counted(self) -> bool:
        """Counts towards ``--trials``: a distinct config that finished (measured or failed), not
        one cut off by Ctrl-C, nor a re-proposal of a known point."""
        if self.duplicate_of is not None or self.surplus:
            return False
        if self.state == TrialState.COMPLETE:
            return True
        return self.state == TrialState.FAIL and not self.interrupted and not self.lost


@dataclass(frozen=True)
class ConfirmedPoint:
    """Studies made before the playoff: the winner's operating point re-measured once with
    longer windows (the confirmation the playoff replaced)."""

    trial: int
    operating_point: OperatingPoint


@dataclass(frozen=True)
class StudyRecord:
    """Everything a single-class study holds, typed."""

    name: str
    identity: StudyIdentity
    created: str = ""
    tritontune_version: str = ""
    space: dict[str, Any] | None = None
    precisions: dict[str, RecordedPrecision] = field(default_factory=dict)
    """The precision checks made before the search, by :func:`precision_key` (accepted or
    not)."""
    baseline: OperatingPoint | None = None
    baseline_config_pbtxt: str | None = None
    strategy: str = "tpe"
    """How the search proposed configs (``tpe``, or ``predict``: ranked by prediction)."""
    confirmed: ConfirmedPoint | None = None
    """Studies made before the playoff: the winner re-measured once."""
    playoff: PlayoffResult | None = None
    context: StudyContext = field(default_factory=StudyContext)
    trials: tuple[TrialResult, ...] = ()
    """Every trial, in order (running, interrupted and duplicate ones included)."""
    budget_trials: int | None = None
    """The ``--trials`` of the latest run (for the ETA of ``tritontune status``)."""

    kind = StudyKind.SINGLE_CLASS

    @property
    def running(self) -> list[TrialResult]:
        return [t for t in self.trials if t.state == TrialState.RUNNING]

    @property
    def lost(self) -> list[TrialResult]:
        return [t for t in self.trials if t.lost]

    @property
    def results(self) -> list[TrialResult]:
        """Completed, counted trials, best (feasible, highest throughput) first."""
        done = [t for t in self.trials if t.state == TrialState.COMPLETE and t.counted]
        return sorted(done, key=lambda r: (r.feasible, r.throughput), reverse=True)

    @property
    def failed(self) -> list[TrialResult]:
        return [t for t in self.trials if t.state == TrialState.FAIL and t.counted]

    @property
    def feasible(self) -> list[TrialResult]:
        return [r for r in self.results if r.feasible]

    @property
    def best(self) -> TrialResult | None:
        feasible = self.feasible
        return feasible[0] if feasible else None

    def precision_check(self, precision: str, model: str | None = None) -> RecordedPrecision | None:
        """How the search checked ``precision`` (of composing model ``model``, in a pipeline)."""
        return self.precisions.get(precision_key(precision, model))

    def confirmed_point(self, trial_number: int) -> OperatingPoint | None:
        """The confirmed operating point of ``trial_number``, if the search made one for it."""
        if self.confirmed is not None and self.confirmed.trial == trial_number:
            return self.confirmed.operating_point
        return None


@dataclass(frozen=True)
class WorkloadFinal:
    """A workload study's final rounds: each finalist's work served per round, and what the
    verdict decided of them (:func:`tritontune.study.verdict.workload_final`)."""

    finalists: tuple[Finalist, ...]
    winner: Finalist | None
    duets: Mapping[str, Duet] = field(default_factory=dict)
    """Each other finalist's work served over the winner's within each round, by label."""
    best_by_layout: Mapping[Layout, Finalist] = field(default_factory=dict)
    """The best finalist served in each layout (the baseline, a shared model, is none)."""

    @property
    def baseline(self) -> Finalist | None:
        return next((f for f in self.finalists if f.trial is None), None)

    def best_of(self, layout: Layout) -> Finalist | None:
        """The best finalist served in ``layout`` (the baseline is a shared model)."""
        return self.best_by_layout.get(layout)

    @property
    def uncertain(self) -> list[str]:
        """The finalists whose order against the winner the rounds could not tell."""
        return [label for label, d in self.duets.items() if d.order == Order.UNCERTAIN]

    @property
    def gain(self) -> float | None:
        """The winner's median over the baseline's (same rounds)."""
        winner, baseline = self.winner, self.baseline
        if winner is None or baseline is None or baseline.median <= 0:
            return None
        return winner.median / baseline.median

    @property
    def layout_ratio(self) -> float | None:
        """The best shared config's median over the endpoints' (> 1: sharing wins)."""
        shared, endpoints = self.best_of(Layout.SHARED), self.best_of(Layout.ENDPOINTS)
        if shared is None or endpoints is None or endpoints.median <= 0:
            return None
        return shared.median / endpoints.median

    def to_dict(self) -> dict[str, Any]:
        winner, duets = self.winner, self.duets
        return {
            "winner": winner.to_dict() if winner else None,
            "gain_over_baseline": self.gain,
            "shared_over_endpoints": self.layout_ratio,
            "finalists": [
                f.to_dict() | ({"versus_winner": duets[f.label].to_dict()} if f.label in duets else {})
                for f in self.finalists
            ],
        }


@dataclass(frozen=True)
class WorkloadStudyRecord:
    """Everything a workload study (``search --workload``) holds, typed."""

    name: str
    model: str
    traffic: Traffic
    context: StudyContext
    trials: tuple[TrialResult, ...]
    """Every trial, in order (as :attr:`StudyRecord.trials`)."""
    final: WorkloadFinal | None
    """The final rounds; None until run."""
    created: str = ""
    tritontune_version: str = ""
    space: dict[str, Any] | None = None
    budget_trials: int | None = None
    precisions: dict[str, RecordedPrecision] = field(default_factory=dict)
    """The precision variants checked before the search (a group's keyed ``MODEL/PRECISION``)."""

    kind = StudyKind.WORKLOAD

    def precision_check(self, precision: str, model: str | None = None) -> RecordedPrecision | None:
        """How the search checked ``precision`` (of the group's model ``model``)."""
        return self.precisions.get(precision_key(precision, model))

    @property
    def results(self) -> list[TrialResult]:
        """The measured (or failed) trials, best first; re-proposals left out."""
        done = [t for t in self.trials if t.counted]
        return sorted(done, key=lambda t: -(t.served or -1.0))

    @property
    def running(self) -> list[TrialResult]:
        return [t for t in self.trials if t.state == TrialState.RUNNING]
