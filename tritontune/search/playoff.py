"""The playoff: the search's top configs and the baseline, re-measured head to head.

The top candidates (:func:`finalists`: not simply the highest screening figures, since trials
within ``SCREENING_NOISE`` of the best are in no order one figure each can tell) and the baseline
are measured again in interleaved rounds (:mod:`tritontune.search.final_rounds`), each at its own
operating load. A contender that did not *hold* its load (:data:`HOLD_MARGIN`) is tried a step
lower (x :data:`STEP_DOWN`) in the next stage, up to :data:`MAX_STAGES`; the baseline is measured
in every stage and keeps each stage's rounds, so each stated gain pairs rounds the result holds.
The held contenders are compared in duets (:mod:`tritontune.study.duet`), with up to
:data:`MAX_EXTRA_ROUNDS` more rounds while the leader's order is uncertain; a tie goes to the
simplest config. The rules and their reasons: ``docs/concepts/playoff.md``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tritontune.config.variant import Variant
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import SCREENING_NOISE, Measurement, MeasureSettings
from tritontune.predict.calibration import SPLIT_KNOBS
from tritontune.search.final_rounds import interleaved_rounds
from tritontune.search.space import GRAPH_LEVEL, bare_knob, effective_point
from tritontune.serving.bench import Bench
from tritontune.study.duet import Verdict, decide, duet, paired_ratios
from tritontune.study.figures import Interval, PlayoffEntry, PlayoffResult, RoundFigure, by_round
from tritontune.study.records import TrialResult

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
#: Rounds measured after the stages, at most, while the leader's order against some contenders
#: is uncertain (of the leader and those contenders only).
MAX_EXTRA_ROUNDS = 3


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
    extra_rounds: int = MAX_EXTRA_ROUNDS
    """Rounds after the stages, at most, while an order is uncertain (0: none; the higher
    median wins and the result says the order was uncertain). A caller that only needs a
    winner, not the right one (a test of what follows the playoff), saves them."""


def finalists(ranked: Sequence[TrialResult], top: int) -> list[TrialResult]:
    """The search's contenders, from ``ranked`` (its measured trials that met the SLO, best
    first); none when ``top`` is 0 (no playoff). Trials whose screening figure is within
    :data:`~tritontune.measure.measurement.SCREENING_NOISE` of the best one's are *close*: one
    figure each is no order between them. So the ``top`` contenders are the best trial, then the
    best close trial of each other way of using the compute (:data:`COMPUTE_KNOBS`: precision,
    instances, threads), then the next ones by figure; and with them, every close trial of the
    best one's config at another graph level. In rank order; configs compare as
    :func:`~tritontune.search.space.effective_point` makes them, a pipeline's knobs model by
    model."""
    if top < 1 or not ranked:
        return []
    best = ranked[0]
    close = [t for t in ranked if t.value >= (1 - SCREENING_NOISE) * best.value]
    chosen = {best.number}
    uses = {_compute_use(best.params)}
    for trial in close:
        use = _compute_use(trial.params)
        if len(chosen) < top and use not in uses:
            chosen.add(trial.number)
            uses.add(use)
    for trial in ranked:
        if len(chosen) < top:
            chosen.add(trial.number)
    config = _without_graph_level(best.params)
    chosen |= {
        t.number for t in close if _without_graph_level(t.params) == config and t.params != best.params
    }
    return [t for t in ranked if t.number in chosen]


#: What a contender's way of using the compute is: a close trial of each one enters the playoff.
COMPUTE_KNOBS = ("precision", *SPLIT_KNOBS)


def _compute_use(point: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted((k, v) for k, v in point.items() if bare_knob(k) in COMPUTE_KNOBS))


def _without_graph_level(point: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in effective_point(point).items() if bare_knob(k) != GRAPH_LEVEL}


def held(rounds: Sequence[RoundFigure], slo_p99_s: float) -> bool:
    """The hold rule (see the module docstring)."""
    if not rounds:
        return False
    median_p99 = statistics.median(r.p99_s for r in rounds)
    met = sum(r.meets_slo for r in rounds)
    return median_p99 <= slo_p99_s * (1 - HOLD_MARGIN) and met * 2 > len(rounds)


def pick_winner(
    entries: Sequence[PlayoffEntry], simplicity: dict[int, tuple[float, ...]]
) -> Verdict[int]:
    """The leader, the winner and each other held contender's duet with the leader, over the
    held contenders (the baseline is never one; see the module docstring)."""
    held = {e.trial: e.by_round() for e in entries if e.held and e.trial is not None}
    return decide(held, simplicity)


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
    numbered = 0  # rounds measured so far, every stage and extra round counted

    def numbered_rounds(figures: list[RoundFigure]) -> list[RoundFigure]:
        """The member's figures of the rounds just measured, with their rounds' numbers."""
        return [dataclasses.replace(f, round_number=numbered + i + 1) for i, f in enumerate(figures)]

    def measure(contender: Contender) -> RoundFigure:
        spec = _spec(loads[contender.trial], integer)
        return RoundFigure.of(_measure(session, contender.variant, spec, settings.measure), slo_p99_s)

    def report(
        stage: int, after: int = 0
    ) -> Callable[[int, Contender, RoundFigure | None], None] | None:
        """Reports a stage's rounds (``after``: the rounds of the stage already reported)."""
        if on_round is None:
            return None
        return lambda n, contender, figure: on_round(stage, after + n, contender, figure)

    for stage in range(1, MAX_STAGES + 1):
        members = pending + ([baseline] if baseline is not None else [])
        if not pending and (baseline is None or None in final):
            break
        stages = stage
        measured = interleaved_rounds(session, members, settings.rounds, measure, report(stage))
        figures = {c.trial: numbered_rounds(measured.figures[i]) for i, c in enumerate(members)}
        numbered += settings.rounds
        errors = {members[i].trial: f"in the playoff: {reason}" for i, reason in measured.errors.items()}
        base_rounds = figures.get(None, []) if baseline is not None else []
        still = []
        for contender in members:
            rounds = figures[contender.trial]
            tried[contender.trial].append(loads[contender.trial])
            if contender.trial is None and None in final:
                # the baseline came along as the reference of this stage's ratios: its rounds are
                # kept beside its first stage's, so every gain is recomputed from the result
                base = final[None]
                final[None] = dataclasses.replace(base, rounds=base.rounds + tuple(rounds))
                continue
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
    by_trial = {c.trial: c for c in contenders}
    verdict = pick_winner(list(final.values()), simplicity)
    extra = 0
    while verdict.uncertain and extra < settings.extra_rounds:
        extra += 1
        members = [by_trial[t] for t in (verdict.leader, *verdict.uncertain)]
        # reported as more rounds of the last stage
        measured = interleaved_rounds(
            session, members, 1, measure, report(stages, settings.rounds + extra - 1)
        )
        for i, member in enumerate(members):
            entry = final[member.trial]
            more = numbered_rounds(measured.figures[i])
            error = measured.errors.get(i)
            final[member.trial] = dataclasses.replace(
                entry,
                rounds=entry.rounds + tuple(more),
                held=entry.held and error is None,
                error=f"in the extra rounds: {error}" if error else entry.error,
            )
        numbered += 1
        verdict = pick_winner(list(final.values()), simplicity)
    entries = [
        _versus(final[c.trial], final.get(verdict.winner)) for c in contenders if c.trial in final
    ]
    ranked = sorted(entries, key=lambda e: (e.trial is None, not e.held, -e.throughput.median))
    return PlayoffResult(
        slo_p99_s=slo_p99_s,
        load_mode=load_mode,
        rounds=settings.rounds,
        entries=tuple(ranked),
        winner=verdict.winner,
        tied=verdict.tied,
        stages=stages,
        notes=tuple(_notes(entries) + _order_notes(verdict, extra)),
        uncertain=verdict.uncertain,
        extra_rounds=extra,
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
    ratios = paired_ratios(by_round(rounds), by_round(base))
    return Interval.of([r - 1 for r in ratios]) if ratios else None


def _versus(entry: PlayoffEntry, winner: PlayoffEntry | None) -> PlayoffEntry:
    """``entry`` with its duet against the winner (held contenders other than the winner)."""
    if winner is None or entry.trial is None or entry.trial == winner.trial or not entry.held:
        return entry
    lead = winner.throughput.median
    versus = duet(
        paired_ratios(entry.by_round(), winner.by_round()),
        fallback=entry.throughput.median / lead if lead > 0 else 1.0,
    )
    return dataclasses.replace(entry, versus_winner=versus)


def _order_notes(verdict: Verdict[int], extra: int) -> list[str]:
    """What the duets said beyond the table: extra rounds, and an order left uncertain."""
    notes = []
    if extra:
        notes.append(
            f"{extra} extra round(s) of trial {verdict.leader} (the highest median) and the "
            "contenders whose order against it was uncertain"
        )
    for trial in verdict.uncertain:
        notes.append(
            f"trial {trial} against trial {verdict.leader}: {verdict.duets[trial].text()} "
            f"after {extra} extra round(s); the higher median won"
        )
    return notes


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
