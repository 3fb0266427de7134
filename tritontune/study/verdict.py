"""The verdict: which configs a study stands behind, and the one figure to state for each.

Every output (the CLI's summary, the results JSON, the report, ``export``'s tuning record)
states the figures chosen here, so a config is never quoted at one figure on screen and another
in its record:

- a single-class study with a playoff: the contenders that held, the winner first, at their
  playoff figures (medians over interleaved rounds); what did not hold is left out;
- without a playoff (``--playoff-top 0``, or older studies): the screening ranking, the winner
  at its confirmed point where an older study re-measured it and it held;
- a workload study: the finalist with the most work served (median over the final rounds),
  by the same rule as the playoff (:func:`tritontune.study.duet.decide`): finalists carry no
  simplicity, so no tie ever gives work away, and each other finalist's duet with the winner
  (paired per-round ratios) says whether that order was clear, within margin or uncertain. The
  final rounds add no extra rounds: each is a whole capacity ramp per finalist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tritontune.measure.traffic import Layout
from tritontune.study.duet import Verdict, decide
from tritontune.study.figures import Finalist, Interval, OperatingPoint, PlayoffEntry
from tritontune.study.records import StudyRecord, TrialResult, WorkloadFinal


@dataclass(frozen=True)
class BestPoint:
    """A config of the verdict and the figure to state for it."""

    result: TrialResult
    point: OperatingPoint
    confirmed: bool
    """The figure was re-measured and held (playoff, or an older study's confirmation)."""
    playoff: PlayoffEntry | None = None
    """Its playoff entry: rounds, intervals, gain over the baseline within the same rounds."""

    @property
    def figures(self) -> str:
        """Where the figure comes from: ``playoff``, ``confirmed`` (older studies) or
        ``screening`` (the search's short measurement, not re-measured)."""
        if self.playoff is not None:
            return "playoff"
        return "confirmed" if self.confirmed else "screening"


def ranked(study: StudyRecord) -> list[BestPoint]:
    """The configs to state and export, best first (see the module docstring)."""
    if study.playoff is not None:
        playoff = study.playoff
        by_number = {t.number: t for t in study.trials}
        return [
            BestPoint(
                by_number[entry.trial],
                entry.operating_point(playoff.slo_p99_s, playoff.load_mode),
                True,
                entry,
            )
            for entry in playoff.held
            if entry.trial in by_number
        ]
    out = []
    for rank, result in enumerate(study.feasible):
        assert result.operating_point is not None
        confirmed = study.confirmed_point(result.number) if rank == 0 else None
        if confirmed is not None and confirmed.feasible:
            out.append(BestPoint(result, confirmed, True))
        else:
            out.append(BestPoint(result, result.operating_point, False))
    return out


def best_point(study: StudyRecord) -> BestPoint | None:
    """The winner with the one figure every output states for it; None when nothing met the
    SLO, or when the playoff found that nothing held."""
    stated = ranked(study)
    return stated[0] if stated else None


def gain_of(study: StudyRecord, point: BestPoint) -> Interval | None:
    """``point``'s gain over the baseline: the playoff's per-round ratios where it has them,
    else the screening figures' ratio (an interval of one value)."""
    if point.playoff is not None:
        return point.playoff.gain
    gain = gain_over_baseline(study.baseline, point.point.throughput)
    return None if gain is None else Interval(gain, gain, gain)


def behind_baseline(gain: Interval | None) -> str | None:
    """When the baseline (the model's own config) served more than a config in every playoff
    round, the sentence that says so; else None. The playoff never makes the baseline its
    winner (it is the reference of every ratio), so a search whose every candidate lost to it
    still has a winner: this is how the CLI and export tell the user to keep their config."""
    if gain is None or gain.high >= 0:
        return None
    return (
        f"the model's own config served more than this one in every playoff round "
        f"({gain.median:+.0%} [{gain.low:+.0%}, {gain.high:+.0%}]): no candidate beat it at this "
        "SLO; keep the model's own config, or search more trials or a wider space"
    )


def gain_over_baseline(baseline: OperatingPoint | None, throughput: float) -> float | None:
    """Throughput relative to the baseline's operating point (0.25 = 25 % better); None when the
    baseline missed the SLO or measured nothing. The one definition of "gain over the baseline"."""
    if baseline is None or not baseline.feasible or baseline.throughput <= 0:
        return None
    return throughput / baseline.throughput - 1


def workload_verdict(finalists: Sequence[Finalist]) -> Verdict[int]:
    """The final rounds' verdict over the finalists, by their position in ``finalists`` (the
    rounds pair by position: every finalist was measured in each round until it failed)."""
    return decide({i: dict(enumerate(f.served or f.rates)) for i, f in enumerate(finalists)})


def workload_winner(finalists: Sequence[Finalist]) -> Finalist | None:
    """The finalist with the most work served (median of its rounds; None: no finalists)."""
    winner = workload_verdict(finalists).winner
    return None if winner is None else finalists[winner]


def workload_final(finalists: Sequence[Finalist]) -> WorkloadFinal:
    """The final rounds decided: the winner (:func:`workload_winner`), each other finalist's
    duet with it, and the best finalist of each layout (the baseline, a shared model, counts in
    none)."""
    finalists = tuple(finalists)
    verdict = workload_verdict(finalists)
    best_by_layout = {}
    for layout in Layout:
        best = workload_winner([f for f in finalists if f.layout == layout and f.trial is not None])
        if best is not None:
            best_by_layout[layout] = best
    return WorkloadFinal(
        finalists,
        None if verdict.winner is None else finalists[verdict.winner],
        {finalists[i].label: duet for i, duet in verdict.duets.items()},
        best_by_layout,
    )
