"""The playoff: the search's top configs and the baseline, re-measured head to head.

The top candidates (default 3) and the baseline are measured again in interleaved rounds
(:mod:`tritontune.search.final_rounds`), each at its own operating load; the figures are kept as
:class:`~tritontune.study.figures.PlayoffResult`.

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
from dataclasses import dataclass

from tritontune.config.variant import Variant
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.search.final_rounds import interleaved_rounds
from tritontune.serving.bench import Bench
from tritontune.study.figures import Interval, PlayoffEntry, PlayoffResult, RoundFigure

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
    session: Bench,
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

    def measure(contender: Contender) -> RoundFigure:
        spec = _spec(loads[contender.trial], integer)
        return RoundFigure.of(_measure(session, contender.variant, spec, settings.measure), slo_p99_s)

    def report(stage: int) -> Callable[[int, Contender, RoundFigure | None], None] | None:
        if on_round is None:
            return None
        return lambda round_number, contender, figure: on_round(stage, round_number, contender, figure)

    for stage in range(1, MAX_STAGES + 1):
        members = pending + ([baseline] if baseline is not None else [])
        if not pending and (baseline is None or None in final):
            break
        stages = stage
        measured = interleaved_rounds(session, members, settings.rounds, measure, report(stage))
        figures = {c.trial: measured.figures[i] for i, c in enumerate(members)}
        errors = {members[i].trial: f"in the playoff: {reason}" for i, reason in measured.errors.items()}
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
    session: Bench, variant: Variant, spec: LoadSpec, settings: MeasureSettings | None
) -> Measurement:
    """One round's measurement: the contender loaded (the rounds switch between configs), then
    measured at its load."""
    session.load(variant)
    return session.measure(spec, settings)


def _spec(load: float, integer: bool) -> LoadSpec:
    return LoadSpec.concurrency(int(load)) if integer else LoadSpec.rate(load)


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
