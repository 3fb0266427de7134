"""The figures a study keeps: plain, frozen data with its JSON form, and no measuring.

The search's algorithms produce them (:mod:`tritontune.search.operating_point`,
:mod:`tritontune.search.playoff`, :mod:`tritontune.search.traffic_capacity`,
:mod:`tritontune.search.workload_search`); the study stores them, and ``export``, ``report``,
``status`` and the CLI read them back typed. Their ``to_dict`` forms are what earlier versions
wrote, so old studies read back unchanged.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritontune.measure.gpu_metrics import GpuFigures, gpu_from_list, gpu_to_list
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.measurement import Measurement, ServerSplit, meets_slo
from tritontune.measure.traffic import Layout
from tritontune.study.duet import Duet


@dataclass(frozen=True)
class LevelResult:
    """One measured load level, as kept in a study."""

    load: float
    throughput: float
    p50_s: float
    p95_s: float
    p99_s: float
    errors: int
    stable: bool
    meets_slo: bool
    mean_s: float | None = None
    """Mean latency (Little's law needs the mean); None in studies made before it was kept."""
    requests: int = 0
    """Replies counted at this level (successful and failed), for error rates."""
    disturbance: str | None = None
    """What the interference and client checks said of this level's measurement (None: nothing
    to say)."""
    disturbed: bool = False
    """Its reported windows were taken while other processes took the cores: the figure is not
    clean (False in studies made before it was kept)."""
    gpu: tuple[GpuFigures, ...] | None = None
    """Per-GPU figures of the level (None: the server reports no GPUs)."""
    client_bound: bool = False
    """The load generator, not the config, limited this level (:mod:`client_cost`)."""
    engine: str = "asyncio"
    """What generated the load (``asyncio`` or ``perf_analyzer``): any figure can be reproduced
    with the engine that measured it."""
    load_processes: int = 1
    """Load processes of the asyncio engine that measured it (``--load-processes auto`` may have
    added some for this level)."""

    def to_dict(self) -> dict:
        extra = ({"client_bound": True} if self.client_bound else {}) | (
            {"disturbed": True} if self.disturbed else {}
        )
        return extra | {
            "engine": self.engine,
            "load_processes": self.load_processes,
            "load": self.load,
            "throughput": round(self.throughput, 3),
            "mean_ms": None if self.mean_s is None else round(self.mean_s * 1e3, 4),
            "requests": self.requests,
            "p50_ms": round(self.p50_s * 1e3, 4),
            "p95_ms": round(self.p95_s * 1e3, 4),
            "p99_ms": round(self.p99_s * 1e3, 4),
            "errors": self.errors,
            "stable": self.stable,
            "meets_slo": self.meets_slo,
            "disturbance": self.disturbance,
            "gpu": gpu_to_list(self.gpu),
        }


@dataclass(frozen=True)
class StepFigure:
    """One composing model of a pipeline at a measured level: where an end-to-end request spent
    its time in that step (Triton's statistics for the model over the same windows)."""

    model: str
    queue_s: float
    """Mean time a request waited in the model's queue."""
    compute_s: float
    """Mean compute time per request (input, inference, output)."""
    avg_batch_size: float
    """Inferences per execution (how well the model's batcher filled its batches)."""

    @property
    def busy_s(self) -> float:
        """The step's share of a request's time in the server: queue plus compute."""
        return self.queue_s + self.compute_s

    @classmethod
    def of(cls, model: str, split: ServerSplit) -> StepFigure:
        return cls(model, split.avg_queue_s, split.avg_compute_s, split.avg_batch_size)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "queue_ms": round(self.queue_s * 1e3, 4),
            "compute_ms": round(self.compute_s * 1e3, 4),
            "avg_batch_size": round(self.avg_batch_size, 3),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepFigure:
        return cls(
            str(data["model"]),
            float(data["queue_ms"]) / 1e3,
            float(data["compute_ms"]) / 1e3,
            float(data["avg_batch_size"]),
        )


def bottleneck(steps: Sequence[StepFigure], caller: str | None = None) -> StepFigure | None:
    """The step a request spends the most time in (queue and compute): the one whose knobs
    matter most; None without step figures. ``caller``: a step whose compute includes the other
    steps' time (a BLS model waits for the models it calls), whose own share is what is left."""

    def own_s(step: StepFigure) -> float:
        if step.model != caller:
            return step.busy_s
        called = sum(other.busy_s for other in steps if other.model != caller)
        return step.queue_s + max(0.0, step.compute_s - called)

    return max(steps, key=own_s, default=None)


def pipeline_bottleneck(steps: Sequence[StepFigure], entry: str) -> StepFigure | None:
    """The bottleneck of a pipeline whose clients call ``entry``: a BLS model is one of its own
    steps (it calls the others), an ensemble is not (it runs no code)."""
    calls = any(step.model == entry for step in steps)
    return bottleneck(steps, caller=entry if calls else None)


@dataclass(frozen=True)
class OperatingPoint:
    """Where a config runs best under the SLO (``feasible`` False: not even at the lowest load)."""

    slo_p99_s: float
    load_mode: LoadMode
    feasible: bool
    load: float
    throughput: float
    p50_s: float
    p99_s: float
    p99_deviation: float
    throughput_deviation: float
    avg_batch_size: float | None
    levels: list[LevelResult] = field(default_factory=list)
    mean_s: float | None = None
    """Mean latency at the operating point (for Little's law); None in older studies."""
    client_bound: bool = False
    """The walk stopped at a level the load generator limited: the config may do more than this
    point, which is the best level measured cleanly (a lower bound)."""
    steps: tuple[StepFigure, ...] = ()
    """A pipeline's composing models at the operating point (at the lowest load when it is not
    feasible), in the pipeline's order; empty for a single model."""
    compute_ratio: float | None = None
    """A request's compute time in Triton over the time it spent outside Triton (the client,
    gRPC, the frontend: its latency less Triton's queue and compute) at the operating point,
    means from Triton's statistics: ~50 for MiniLM on 2 cores (20 ms of compute, 0.4 ms
    outside), ~1 for the example MLP (0.44 and 0.35 ms); None where not measured (older
    studies)."""

    @property
    def disturbed(self) -> bool:
        """A level of its walk was measured while other processes took the cores: its figure,
        or where the walk stopped, may be theirs."""
        return any(level.disturbed for level in self.levels)

    @property
    def slo_excess_s(self) -> float:
        """How far p99 is over the SLO at the lowest load (> 0 infeasible): Optuna's constraint."""
        excess = self.p99_s - self.slo_p99_s
        return excess if not self.feasible else min(0.0, excess)

    def to_dict(self) -> dict:
        return (
            {
                "slo_p99_ms": self.slo_p99_s * 1e3,
                "load_mode": LoadMode(self.load_mode).value,
                "feasible": self.feasible,
                "load": self.load,
                "throughput": round(self.throughput, 3),
                "mean_ms": None if self.mean_s is None else round(self.mean_s * 1e3, 4),
                "p50_ms": round(self.p50_s * 1e3, 4),
                "p99_ms": round(self.p99_s * 1e3, 4),
                "p99_deviation": round(self.p99_deviation, 4),
                "throughput_deviation": round(self.throughput_deviation, 4),
                "avg_batch_size": None if self.avg_batch_size is None else round(self.avg_batch_size, 3),
                "levels": [level.to_dict() for level in self.levels],
            }
            | ({"client_bound": True} if self.client_bound else {})
            | ({"steps": [step.to_dict() for step in self.steps]} if self.steps else {})
            | ({} if self.compute_ratio is None else {"compute_ratio": round(self.compute_ratio, 3)})
        )

    @classmethod
    def from_dict(cls, data: dict) -> OperatingPoint:
        levels = [
            LevelResult(
                load=lv["load"],
                throughput=lv["throughput"],
                p50_s=lv["p50_ms"] / 1e3,
                p95_s=lv["p95_ms"] / 1e3,
                p99_s=lv["p99_ms"] / 1e3,
                errors=lv["errors"],
                stable=lv["stable"],
                meets_slo=lv["meets_slo"],
                mean_s=lv["mean_ms"] / 1e3 if lv.get("mean_ms") is not None else None,
                requests=lv.get("requests", 0),
                disturbance=lv.get("disturbance"),
                disturbed=bool(lv.get("disturbed", False)),
                gpu=gpu_from_list(lv.get("gpu")),
                client_bound=bool(lv.get("client_bound", False)),
                engine=str(lv.get("engine", "asyncio")),
                load_processes=int(lv.get("load_processes", 1)),
            )
            for lv in data.get("levels", [])
        ]
        return cls(
            slo_p99_s=data["slo_p99_ms"] / 1e3,
            load_mode=LoadMode(data["load_mode"]),
            feasible=data["feasible"],
            load=data["load"],
            throughput=data["throughput"],
            p50_s=data["p50_ms"] / 1e3,
            p99_s=data["p99_ms"] / 1e3,
            p99_deviation=data.get("p99_deviation", 0.0),
            throughput_deviation=data.get("throughput_deviation", 0.0),
            avg_batch_size=data.get("avg_batch_size"),
            levels=levels,
            mean_s=data["mean_ms"] / 1e3 if data.get("mean_ms") is not None else None,
            client_bound=bool(data.get("client_bound", False)),
            steps=tuple(StepFigure.from_dict(step) for step in data.get("steps", ())),
            compute_ratio=data.get("compute_ratio"),
        )


@dataclass(frozen=True)
class Interval:
    """A figure over the rounds: the median and the min-max around it."""

    median: float
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Interval:
        return cls(float(statistics.median(values)), float(min(values)), float(max(values)))

    def scaled(self, factor: float) -> Interval:
        return Interval(self.median * factor, self.low * factor, self.high * factor)

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def to_dict(self, digits: int = 3) -> dict[str, float]:
        return {k: round(v, digits) for k, v in vars(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> Interval:
        return cls(float(data["median"]), float(data["low"]), float(data["high"]))


@dataclass(frozen=True)
class RoundFigure:
    """One contender's measurement in one round."""

    throughput: float
    p50_s: float
    p99_s: float
    mean_s: float
    requests: int
    errors: int
    meets_slo: bool
    stable: bool
    avg_batch_size: float | None = None
    disturbance: str | None = None
    """What the interference and client checks said of this measurement (None: nothing to say)."""
    disturbed: bool = False
    """Its reported windows were taken while the machine was disturbed."""
    gpu: tuple[GpuFigures, ...] | None = None
    """Per-GPU figures of the round (None: the server reports no GPUs)."""
    round_number: int | None = None
    """Which playoff round it was measured in, numbered across stages and extra rounds: figures
    of the same round were measured interleaved, and are compared as pairs (None: a study made
    before rounds were numbered, whose contenders pair by position)."""
    steps: tuple[StepFigure, ...] = ()
    """A pipeline's: each tuned model's share of a request's time in this round."""

    @classmethod
    def of(cls, m: Measurement, slo_p99_s: float) -> RoundFigure:
        interference = m.interference
        return cls(
            throughput=m.throughput,
            p50_s=m.latency.p50,
            p99_s=m.latency.p99,
            mean_s=m.latency.mean,
            requests=m.latency.count + m.error_count,
            errors=m.error_count,
            meets_slo=meets_slo(m, slo_p99_s),
            stable=m.stable,
            avg_batch_size=m.server.avg_batch_size if m.server else None,
            disturbance=m.remarks(),
            disturbed=bool(interference and interference.result_disturbed),
            gpu=m.gpu,
            steps=tuple(StepFigure.of(model, split) for model, split in m.steps.items()),
        )

    def to_dict(self) -> dict:
        return (
            {
                "throughput": round(self.throughput, 3),
                "p50_ms": round(self.p50_s * 1e3, 4),
                "p99_ms": round(self.p99_s * 1e3, 4),
                "mean_ms": round(self.mean_s * 1e3, 4),
                "requests": self.requests,
                "errors": self.errors,
                "meets_slo": self.meets_slo,
                "stable": self.stable,
                "avg_batch_size": None if self.avg_batch_size is None else round(self.avg_batch_size, 3),
                "disturbance": self.disturbance,
                "disturbed": self.disturbed,
                "gpu": gpu_to_list(self.gpu),
            }
            | ({} if self.round_number is None else {"round": self.round_number})
            | ({"steps": [step.to_dict() for step in self.steps]} if self.steps else {})
        )

    @classmethod
    def from_dict(cls, data: dict) -> RoundFigure:
        return cls(
            throughput=float(data["throughput"]),
            p50_s=data["p50_ms"] / 1e3,
            p99_s=data["p99_ms"] / 1e3,
            mean_s=data["mean_ms"] / 1e3,
            requests=int(data["requests"]),
            errors=int(data["errors"]),
            meets_slo=bool(data["meets_slo"]),
            stable=bool(data["stable"]),
            avg_batch_size=data.get("avg_batch_size"),
            disturbance=data.get("disturbance"),
            disturbed=bool(data.get("disturbed", False)),
            gpu=gpu_from_list(data.get("gpu")),
            round_number=data.get("round"),
            steps=tuple(StepFigure.from_dict(step) for step in data.get("steps", ())),
        )


def median_steps(measured: Iterable[Sequence[StepFigure]]) -> tuple[StepFigure, ...]:
    """Each model's step figures over several measurements of one config (playoff rounds,
    check rounds): the median of each figure, model by model, in the order they come."""
    sets = [tuple(steps) for steps in measured]
    models = list(dict.fromkeys(step.model for steps in sets for step in steps))
    out = []
    for model in models:
        figures = [step for steps in sets for step in steps if step.model == model]
        out.append(
            StepFigure(
                model,
                statistics.median(f.queue_s for f in figures),
                statistics.median(f.compute_s for f in figures),
                statistics.median(f.avg_batch_size for f in figures),
            )
        )
    return tuple(out)


def by_round(rounds: Sequence[RoundFigure]) -> dict[int, float]:
    """Throughput by round number (by position in studies made before rounds were numbered)."""
    return {i if r.round_number is None else r.round_number: r.throughput for i, r in enumerate(rounds)}


@dataclass(frozen=True)
class PlayoffEntry:
    """A contender's playoff figures at the load it held at (or its last load, if it never held)."""

    trial: int | None
    load: float
    held: bool
    rounds: tuple[RoundFigure, ...]
    screening_throughput: float
    loads_tried: tuple[float, ...] = ()
    gain: Interval | None = None
    """Throughput over the baseline's in the same rounds, minus one; None without a baseline."""
    error: str | None = None
    """Why it could not be measured (a config that brought the server down)."""
    versus_winner: Duet | None = None
    """Its throughput over the winner's in the rounds both were measured in: the median ratio,
    its interval and the decision (:mod:`tritontune.study.duet`); None for the winner, the
    baseline, a contender that did not hold, and studies made before duets."""

    @property
    def label(self) -> str:
        return "baseline" if self.trial is None else f"trial {self.trial}"

    def by_round(self) -> dict[int, float]:
        """Its throughput by round, for pairing with another contender's (:func:`by_round`)."""
        return by_round(self.rounds)

    @property
    def throughput(self) -> Interval:
        return Interval.of([r.throughput for r in self.rounds] or [0.0])

    @property
    def p99_s(self) -> Interval:
        return Interval.of([r.p99_s for r in self.rounds] or [math.inf])

    @property
    def disturbed_rounds(self) -> int:
        return sum(r.disturbed for r in self.rounds)

    @property
    def screening_ratio(self) -> float | None:
        """Playoff median over the screening figure (below 1: the search was optimistic)."""
        if self.screening_throughput <= 0 or not self.rounds:
            return None
        return self.throughput.median / self.screening_throughput

    def operating_point(self, slo_p99_s: float, load_mode: LoadMode) -> OperatingPoint:
        """The playoff figures in the shape every output already shows (medians; one level per
        round at the held load)."""
        rounds = self.rounds
        throughput = self.throughput
        median = max(throughput.median, 1e-9)
        p99 = self.p99_s
        batches = [r.avg_batch_size for r in rounds if r.avg_batch_size is not None]
        return OperatingPoint(
            slo_p99_s=slo_p99_s,
            load_mode=load_mode,
            feasible=self.held,
            load=self.load,
            throughput=throughput.median,
            p50_s=statistics.median([r.p50_s for r in rounds]) if rounds else math.inf,
            p99_s=p99.median,
            p99_deviation=(p99.high - p99.low) / max(p99.median, 1e-12) if rounds else 0.0,
            throughput_deviation=(throughput.high - throughput.low) / median,
            avg_batch_size=statistics.median(batches) if batches else None,
            levels=[
                LevelResult(
                    load=self.load,
                    throughput=r.throughput,
                    p50_s=r.p50_s,
                    p95_s=r.p99_s,
                    p99_s=r.p99_s,
                    errors=r.errors,
                    stable=r.stable,
                    meets_slo=r.meets_slo,
                    mean_s=r.mean_s,
                    requests=r.requests,
                    disturbance=r.disturbance,
                    disturbed=r.disturbed,
                    gpu=r.gpu,
                )
                for r in rounds
            ],
            mean_s=statistics.median([r.mean_s for r in rounds]) if rounds else None,
            steps=median_steps(r.steps for r in rounds),
        )

    def to_dict(self) -> dict:
        return {
            "trial": self.trial,
            "load": self.load,
            "held": self.held,
            "rounds": [r.to_dict() for r in self.rounds],
            "screening_throughput": round(self.screening_throughput, 3),
            "loads_tried": list(self.loads_tried),
            "gain": self.gain.to_dict(4) if self.gain else None,
            "error": self.error,
            "throughput": self.throughput.to_dict(),
            "p99_ms": self.p99_s.scaled(1e3).to_dict(4),
        } | ({} if self.versus_winner is None else {"versus_winner": self.versus_winner.to_dict()})

    @classmethod
    def from_dict(cls, data: dict) -> PlayoffEntry:
        return cls(
            trial=data["trial"],
            load=float(data["load"]),
            held=bool(data["held"]),
            rounds=tuple(RoundFigure.from_dict(r) for r in data["rounds"]),
            screening_throughput=float(data["screening_throughput"]),
            loads_tried=tuple(float(x) for x in data.get("loads_tried", ())),
            gain=Interval.from_dict(data["gain"]) if data.get("gain") else None,
            error=data.get("error"),
            versus_winner=Duet.from_dict(data["versus_winner"]) if data.get("versus_winner") else None,
        )


@dataclass(frozen=True)
class PlayoffResult:
    """The verdict: every contender's figures, ranked (held ones first, by median throughput;
    the baseline is among the entries but never ranked as a winner)."""

    slo_p99_s: float
    load_mode: LoadMode
    rounds: int
    entries: tuple[PlayoffEntry, ...]
    winner: int | None
    """The winning trial's number; None when no contender held its SLO."""
    tied: tuple[int, ...] = ()
    """The leader (highest median) and the trials within margin of it in paired rounds, the
    winner among them by simplicity; empty when none was within margin. (Studies made before
    duets: the trials whose min-max interval overlapped the top figure's.)"""
    stages: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)
    uncertain: tuple[int, ...] = ()
    """Trials whose order against the leader was still uncertain after the extra rounds (the
    higher median won)."""
    extra_rounds: int = 0
    """Rounds measured after the stages, of the leader and the contenders it was uncertain of."""

    def entry(self, trial: int | None) -> PlayoffEntry | None:
        return next((e for e in self.entries if e.trial == trial), None)

    @property
    def baseline(self) -> PlayoffEntry | None:
        return self.entry(None)

    @property
    def held(self) -> list[PlayoffEntry]:
        """Held candidates (not the baseline), the winner first, then by median throughput."""
        held = [e for e in self.entries if e.held and e.trial is not None]
        return sorted(held, key=lambda e: (e.trial != self.winner, -e.throughput.median))

    @property
    def disturbed_rounds(self) -> int:
        return sum(e.disturbed_rounds for e in self.entries)

    def to_dict(self) -> dict:
        return {
            "slo_p99_ms": self.slo_p99_s * 1e3,
            "load_mode": self.load_mode.value,
            "rounds": self.rounds,
            "stages": self.stages,
            "winner": self.winner,
            "tied": list(self.tied),
            "uncertain": list(self.uncertain),
            "extra_rounds": self.extra_rounds,
            "entries": [e.to_dict() for e in self.entries],
            "notes": list(self.notes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> PlayoffResult:
        return cls(
            slo_p99_s=data["slo_p99_ms"] / 1e3,
            load_mode=LoadMode(data["load_mode"]),
            rounds=int(data["rounds"]),
            entries=tuple(PlayoffEntry.from_dict(e) for e in data["entries"]),
            winner=data.get("winner"),
            tied=tuple(data.get("tied", ())),
            stages=int(data.get("stages", 1)),
            notes=tuple(data.get("notes", ())),
            uncertain=tuple(data.get("uncertain", ())),
            extra_rounds=int(data.get("extra_rounds", 0)),
        )


@dataclass(frozen=True)
class Finalist:
    """One config of the final rounds: per round, the work it served at capacity and the total
    rate offered there; ranked by the median served."""

    trial: int | None
    """None: the baseline (the model's own config)."""
    knobs: dict[str, Any]
    rates: tuple[float, ...]
    """The total rate offered at each round's capacity (req/s): what ``check`` sends."""
    layout: Layout = Layout.SHARED
    models: dict[str, str] = field(default_factory=dict)
    """The name of each model it serves -> its config.pbtxt text, as measured."""
    routes: dict[str, str] = field(default_factory=dict)
    """Class -> the model its requests go to."""
    error: str | None = None
    """Why it left the final rounds (it brought the server down twice, or was refused)."""
    served: tuple[float, ...] = ()
    """Inferences served per second at each round's capacity, every class together."""
    class_rounds: tuple[dict[str, dict[str, float | None]], ...] = ()
    """Each round's figures per class at its capacity: ``served_infer_per_s``, ``p50_ms``,
    ``p99_ms`` (what the objectives were held to)."""

    @property
    def median(self) -> float:
        """The median served: what the final rounds rank by (a study made before served work
        was recorded has only rates, and ranked by them)."""
        figures = self.served or self.rates
        return statistics.median(figures) if figures else 0.0

    @property
    def median_rate(self) -> float:
        return statistics.median(self.rates) if self.rates else 0.0

    @property
    def label(self) -> str:
        who = "baseline" if self.trial is None else f"trial {self.trial}"
        return who + (" as endpoints" if self.layout == Layout.ENDPOINTS else "")

    def to_dict(self) -> dict[str, Any]:
        return {
            "trial": self.trial,
            "layout": str(self.layout),
            "knobs": self.knobs,
            "served_infer_per_s": [round(r, 3) for r in self.served],
            "median_served_infer_per_s": round(self.median, 3),
            "total_rates_per_s": [round(r, 3) for r in self.rates],
            "median_total_rate_per_s": round(self.median_rate, 3),
            "routes": self.routes,
            "models": self.models,
            "error": self.error,
            "classes_by_round": [dict(r) for r in self.class_rounds],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Finalist:
        return cls(
            trial=data.get("trial"),
            knobs=dict(data.get("knobs") or {}),
            rates=tuple(float(r) for r in data.get("total_rates_per_s") or ()),
            layout=Layout(data.get("layout", Layout.SHARED)),
            models=dict(data.get("models") or {}),
            routes=dict(data.get("routes") or {}),
            error=data.get("error"),
            served=tuple(float(r) for r in data.get("served_infer_per_s") or ()),
            class_rounds=tuple(dict(r) for r in data.get("classes_by_round") or ()),
        )


@dataclass(frozen=True)
class CapacityFigure:
    """A config's capacity for a workload, as a workload trial keeps it: the figures the search
    ranks by, and every level's figures as measured (JSON, for the results and the report)."""

    feasible: bool
    total_rate: float
    """The total rate offered at the best level (req/s)."""
    highest_rate: float
    """The highest total rate offered at which every class met its objective (shown only)."""
    goodput: float
    """Successful requests per second at the best level."""
    served: float = 0.0
    """Inferences served per second at the best level, every class together: the trial's value."""
    failure: str = ""
    """Why the first failing level failed (one line), or ''."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """The whole capacity search as measured (``TrafficCapacity.to_dict``)."""

    @property
    def client_bound(self) -> bool:
        """The load generator limited a level: the capacity is a lower bound."""
        return self.detail.get("client_bound_at_rate_per_s") is not None

    def caveats(self) -> list[str]:
        """What the interference and client checks said of its levels, each said once (as a
        single-class trial's levels' ``disturbance``)."""
        said = (level.get("disturbance") for level in self.detail.get("levels") or ())
        return sorted({text for text in said if text})

    def to_dict(self) -> dict[str, Any]:
        return dict(self.detail) or {
            "feasible": self.feasible,
            "total_rate_per_s": round(self.total_rate, 3),
            "highest_rate_per_s": round(self.highest_rate, 3),
            "goodput_per_s": round(self.goodput, 3),
            "served_infer_per_s": round(self.served, 3),
            "failure": self.failure,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CapacityFigure:
        return cls(
            feasible=bool(data.get("feasible", False)),
            total_rate=float(data.get("total_rate_per_s", 0.0)),
            highest_rate=float(data.get("highest_rate_per_s", 0.0)),
            goodput=float(data.get("goodput_per_s", 0.0)),
            served=float(
                data.get("served_infer_per_s")
                # a trial recorded before served work was: its best level's inferences
                or (data.get("best") or {}).get("throughput_infer_per_s")
                or 0.0
            ),
            failure=str(data.get("failure", "")),
            detail=dict(data),
        )
