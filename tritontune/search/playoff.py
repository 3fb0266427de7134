"""The playoff: the search's top configs and the baseline, re-measured head to head.

A search measures each config once per load level, with short windows, at whatever minute it
happens to run: its figures are *screening* figures. The highest of them is biased up (the
winner's curse) and a slow minute can reorder the rest. So before the verdict the top candidates
(default 3) and the baseline are measured again, *interleaved*: A, B, C, base, A, B, C, base, ...
each at its own operating load, so a disturbance hits all of them alike.

- A contender *held* at its load when the median of its rounds' p99 is at least
  :data:`HOLD_MARGIN` under the SLO and more than half of its rounds met the SLO outright. One that
  didn't is tried again a step lower (x :data:`STEP_DOWN`) in the next stage, interleaved with the
  other re-tried ones and the baseline; after :data:`MAX_STAGES` stages it never held.
- Figures are medians over the rounds with their min-max interval; the gain over the baseline is
  the median (and min-max) of the per-round ratios, each ratio taken within one round.
- The winner has the highest median throughput among the held contenders; those whose intervals
  overlap its interval are *tied* with it, and a tie goes to the simplest, cheapest config (fewer
  instances, then smaller batches, then a shorter queue delay).
- A contender that never held is never the winner; when none held, there is no winner.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from tritontune.config.variant import Variant
from tritontune.errors import ServerDiedError
from tritontune.measure.gpu_metrics import GpuFigures, gpu_from_list, gpu_to_list
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.search.operating_point import LevelResult, OperatingPoint, meets_slo
from tritontune.session import Session

#: Candidates from the search that enter the playoff (the baseline comes on top).
PLAYOFF_TOP = 3
#: Interleaved rounds per stage.
PLAYOFF_ROUNDS = 3
#: A contender holds when its median p99 is this far under the SLO: the noise between
#: measurements, so that ``check`` re-measures it under the SLO too.
HOLD_MARGIN = 0.10
#: A contender that did not hold is tried again at this fraction of its load...
STEP_DOWN = 0.8
#: ...in at most this many stages in all.
MAX_STAGES = 3


@dataclass(frozen=True)
class Contender:
    """One config in the playoff: a search trial, or the baseline (``trial`` None)."""

    trial: int | None
    variant: Variant
    load: float
    screening_throughput: float
    simplicity: tuple[float, ...] = ()
    """Sorts the simplest, cheapest config first: (instances, max batch size, queue delay us)."""

    @property
    def label(self) -> str:
        return "baseline" if self.trial is None else f"trial {self.trial}"


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
    """What the interference check said of this measurement (None: nothing to say)."""
    disturbed: bool = False
    """Its reported windows were taken while the machine was disturbed."""
    gpu: tuple[GpuFigures, ...] | None = None
    """Per-GPU figures of the round (None: the server reports no GPUs)."""

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
            disturbance=interference.describe() if interference else None,
            disturbed=bool(interference and interference.result_disturbed),
            gpu=m.gpu,
        )

    def to_dict(self) -> dict:
        return {
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
        )


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

    @property
    def label(self) -> str:
        return "baseline" if self.trial is None else f"trial {self.trial}"

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
                    gpu=r.gpu,
                )
                for r in rounds
            ],
            mean_s=statistics.median([r.mean_s for r in rounds]) if rounds else None,
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
        }

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
    """Trials whose interval overlapped the top figure's (the winner among them by simplicity)."""
    stages: int = 1
    notes: tuple[str, ...] = field(default_factory=tuple)

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
        )


@dataclass(frozen=True)
class PlayoffSettings:
    top: int = PLAYOFF_TOP
    rounds: int = PLAYOFF_ROUNDS
    measure: MeasureSettings | None = None
    """Measurement settings of each round (the search's by default)."""


def held(rounds: Sequence[RoundFigure], slo_p99_s: float) -> bool:
    """The hold rule (see the module docstring)."""
    if not rounds:
        return False
    median_p99 = statistics.median(r.p99_s for r in rounds)
    met = sum(r.meets_slo for r in rounds)
    return median_p99 <= slo_p99_s * (1 - HOLD_MARGIN) and met * 2 > len(rounds)


def pick_winner(
    entries: Sequence[PlayoffEntry], simplicity: dict[int, tuple[float, ...]]
) -> tuple[int | None, tuple[int, ...]]:
    """The winner and the trials tied with the top figure (see the module docstring)."""
    candidates = [e for e in entries if e.held and e.trial is not None]
    if not candidates:
        return None, ()
    top = max(candidates, key=lambda e: e.throughput.median)
    tied = [e for e in candidates if e.throughput.overlaps(top.throughput)]
    winner = min(
        tied,
        key=lambda e: (simplicity.get(e.trial, ()) if e.trial is not None else (), -e.throughput.median),
    )
    return winner.trial, tuple(e.trial for e in tied if e.trial is not None and len(tied) > 1)


def run_playoff(
    session: Session,
    contenders: Sequence[Contender],
    slo_p99_s: float,
    load_mode: LoadMode,
    settings: PlayoffSettings | None = None,
    on_round: Callable[[int, int, Contender, RoundFigure | None], None] | None = None,
) -> PlayoffResult:
    """Measure ``contenders`` interleaved, in rounds, and rank them.

    ``on_round(stage, round, contender, figure)`` reports progress (figure None: it failed)."""
    settings = settings or PlayoffSettings()
    integer = load_mode == LoadMode.CONCURRENCY
    loads = {c.trial: c.load for c in contenders}
    tried: dict[int | None, list[float]] = {c.trial: [] for c in contenders}
    final: dict[int | None, PlayoffEntry] = {}
    baseline = next((c for c in contenders if c.trial is None), None)
    pending = [c for c in contenders if c.trial is not None]
    stages = 0
    for stage in range(1, MAX_STAGES + 1):
        members = pending + ([baseline] if baseline is not None else [])
        if not pending and (baseline is None or None in final):
            break
        stages = stage
        figures: dict[int | None, list[RoundFigure]] = {c.trial: [] for c in members}
        errors: dict[int | None, str] = {}
        for round_number in range(1, settings.rounds + 1):
            for contender in members:
                if contender.trial in errors:
                    continue
                load = loads[contender.trial]
                spec = LoadSpec.concurrency(int(load)) if integer else LoadSpec.rate(load)
                try:
                    m = _measure(session, contender.variant, spec, settings.measure)
                except ServerDiedError as err:
                    errors[contender.trial] = f"brought the server down in the playoff: {err}"
                    if on_round:
                        on_round(stage, round_number, contender, None)
                    continue
                figure = RoundFigure.of(m, slo_p99_s)
                figures[contender.trial].append(figure)
                if on_round:
                    on_round(stage, round_number, contender, figure)
        base_rounds = figures.get(None, []) if baseline is not None else []
        still = []
        for contender in members:
            rounds = figures[contender.trial]
            tried[contender.trial].append(loads[contender.trial])
            if contender.trial is None and None in final:
                continue  # the baseline came along as the reference of this stage's ratios
            ok = contender.trial not in errors and held(rounds, slo_p99_s)
            last_stage = stage == MAX_STAGES or contender.trial in errors
            lower = _lower(loads[contender.trial], integer)
            if ok or last_stage or lower is None:
                final[contender.trial] = PlayoffEntry(
                    trial=contender.trial,
                    load=loads[contender.trial],
                    held=ok,
                    rounds=tuple(rounds),
                    screening_throughput=contender.screening_throughput,
                    loads_tried=tuple(tried[contender.trial]),
                    gain=_gain(rounds, base_rounds) if contender.trial is not None else None,
                    error=errors.get(contender.trial),
                )
            else:
                loads[contender.trial] = lower
                if contender.trial is not None:
                    still.append(contender)
        pending = still
    simplicity = {c.trial: c.simplicity for c in contenders if c.trial is not None}
    entries = [final[c.trial] for c in contenders if c.trial in final]
    winner, tied = pick_winner(entries, simplicity)
    ranked = sorted(entries, key=lambda e: (e.trial is None, not e.held, -e.throughput.median))
    return PlayoffResult(
        slo_p99_s=slo_p99_s,
        load_mode=load_mode,
        rounds=settings.rounds,
        entries=tuple(ranked),
        winner=winner,
        tied=tied,
        stages=stages,
        notes=tuple(_notes(entries)),
    )


def _measure(
    session: Session, variant: Variant, spec: LoadSpec, settings: MeasureSettings | None
) -> Measurement:
    """One round's measurement; a server that dies is restarted and the round measured again
    once (a second death is the config's)."""
    for attempt in range(2):
        try:
            session.load_variant(variant)
            return session.measure(spec, settings)
        except ServerDiedError:
            session.restart(reload=False)
            if attempt == 1:
                raise
    raise AssertionError("unreachable")


def _lower(load: float, integer: bool) -> float | None:
    lower = max(1.0, math.floor(load * STEP_DOWN)) if integer else load * STEP_DOWN
    return lower if lower < load else None


def _gain(rounds: Sequence[RoundFigure], base: Sequence[RoundFigure]) -> Interval | None:
    """Per-round throughput ratios to the baseline of the same round, minus one."""
    ratios = [
        r.throughput / b.throughput - 1 for r, b in zip(rounds, base, strict=False) if b.throughput > 0
    ]
    return Interval.of(ratios) if ratios else None


def _notes(entries: Sequence[PlayoffEntry]) -> list[str]:
    notes = []
    for entry in entries:
        remarks = {r.disturbance for r in entry.rounds if r.disturbance}
        for remark in sorted(remarks):
            notes.append(f"{entry.label}: {remark}")
        if len(entry.loads_tried) > 1:
            tried = ", ".join(f"{x:g}" for x in entry.loads_tried)
            notes.append(
                f"{entry.label}: loads tried {tried}; "
                + (f"held at {entry.load:g}" if entry.held else "it never held its SLO")
            )
        if entry.error:
            notes.append(f"{entry.label}: {entry.error}")
    return notes
