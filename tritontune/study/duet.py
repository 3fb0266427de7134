"""Duets: two configs measured in the same interleaved rounds, compared round by round.

Both verdicts (the playoff and the final rounds of a workload search) measure their configs
interleaved, so a slow minute hits every config of a round alike. Two configs are therefore
compared by their **paired ratios**, A's figure over B's within each round: the machine's drift
cancels out of a ratio, not out of two separate min-max ranges. The ratios' median, the sign
test's interval for it (it assumes nothing of the noise's shape, which 3-6 rounds could not
tell; :data:`COVERAGE`) and a decision (:class:`Order`, with :data:`TIE_MARGIN` the practical
tie; fewer than 3 ratios are always *uncertain*). :func:`decide` is the one rule both verdicts
use: the leader has the highest median, the configs within margin of it are tied with it and the
simplest of them wins; simplicity never buys a config throughput it may not have. The reasons,
with the rounds that taught them: ``docs/concepts/playoff.md``.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from tritontune.enums import TextEnum

#: Two configs are as good as equal when their paired ratio is within this of 1 (both ends of its
#: interval): the noise of one config measured again in the same rounds on a quiet machine.
TIE_MARGIN = 0.03
#: The least coverage of the ratio's interval (what the min-max gives with 3 rounds).
COVERAGE = 0.75
#: A config is settled behind the leader when it served at most this share of the leader's
#: figure in every round, over at least :data:`SETTLED_ROUNDS` rounds. A paired ratio moves about
#: ±10 % between rounds on these machines (MiniLM's workload finalists: 0.74, 0.86, 0.85; its
#: precision rounds: 2.78-3.13), since a slow minute hits both configs of a round alike; a config
#: behind by more than that twice is behind, and one that is not (two configs within noise of
#: each other) is what the extra rounds are for. Were two equal configs settled by chance, the
#: one picked is as good as the other.
SETTLED_BEHIND = 0.9
SETTLED_ROUNDS = 2
#: A config serving at most this share of the leader's figure is settled after one round: no
#: round can double a figure against another measured in the same minute (the model's own
#: config served 10 infer/s beside MiniLM's tuned winner's 74).
FAR_BEHIND = 0.5

K = TypeVar("K", bound=Hashable)


class Order(TextEnum):
    """How config A (the numerator of the ratios) compares with config B."""

    AHEAD = "ahead"
    BEHIND = "behind"
    WITHIN_MARGIN = "within margin"
    UNCERTAIN = "uncertain"


@dataclass(frozen=True)
class Duet:
    """A over B in the rounds both were measured in: the median ratio, its interval and the
    decision (see the module docstring). ``rounds`` 0: no round measured both (the ratio of their
    medians stands in, and the order is uncertain)."""

    median: float
    low: float
    high: float
    rounds: int
    order: Order

    @property
    def tied(self) -> bool:
        return self.order == Order.WITHIN_MARGIN

    def text(self) -> str:
        """``x1.09 [1.04-1.15] over 3 rounds: ahead``."""
        if not self.rounds:
            return f"x{self.median:.2f} (no round measured both): {self.order}"
        spread = f"[{self.low:.2f}-{self.high:.2f}]"
        return f"x{self.median:.2f} {spread} over {self.rounds} rounds: {self.order}"

    def to_dict(self) -> dict:
        return {  # unrounded: a study read back decides exactly as it did
            "median": self.median,
            "low": self.low,
            "high": self.high,
            "rounds": self.rounds,
            "order": str(self.order),
        }

    @classmethod
    def from_dict(cls, data: Mapping) -> Duet:
        return cls(
            float(data["median"]),
            float(data["low"]),
            float(data["high"]),
            int(data["rounds"]),
            Order(data["order"]),
        )


def paired_ratios(a: Mapping[int, float], b: Mapping[int, float]) -> list[float]:
    """A's figure over B's in each round both were measured in (keyed by round); rounds where B
    measured nothing are left out."""
    return [a[r] / b[r] for r in a if r in b and b[r] > 0]


def sign_interval(ratios: Sequence[float], coverage: float = COVERAGE) -> tuple[float, float]:
    """The k-th lowest and k-th highest ratio, k as large as keeps ``coverage`` (at least 1: the
    min-max when too few rounds reach it)."""
    ordered = sorted(ratios)
    n = len(ordered)
    k = 1
    while k < n - k and _sign_coverage(n, k + 1) >= coverage:
        k += 1
    return ordered[k - 1], ordered[n - k]


def duet(ratios: Sequence[float], margin: float = TIE_MARGIN, fallback: float = 1.0) -> Duet:
    """The median, interval and decision of A over B from their paired ratios (``fallback``: the
    ratio to state when there are none)."""
    if not ratios:
        return Duet(fallback, fallback, fallback, 0, Order.UNCERTAIN)
    low, high = sign_interval(ratios)
    covered = _sign_coverage(len(ratios), 1) >= COVERAGE  # the min-max of 3 ratios or more
    order = order_of(low, high, margin) if covered else Order.UNCERTAIN
    return Duet(float(statistics.median(ratios)), low, high, len(ratios), order)


def order_of(low: float, high: float, margin: float = TIE_MARGIN) -> Order:
    """The decision for an interval of A/B (see the module docstring)."""
    if 1 / (1 + margin) <= low and high <= 1 + margin:
        return Order.WITHIN_MARGIN
    if low > 1:
        return Order.AHEAD
    if high < 1:
        return Order.BEHIND
    return Order.UNCERTAIN


@dataclass(frozen=True)
class Verdict(Generic[K]):
    """Who leads, who wins, and every other config against the leader (:func:`decide`)."""

    leader: K | None
    winner: K | None
    duets: dict[K, Duet] = field(default_factory=dict)
    """Each other config over the leader."""

    @property
    def tied(self) -> tuple[K, ...]:
        """The leader and the configs within margin of it (empty when none is)."""
        within = [k for k, d in self.duets.items() if d.tied]
        return (self.leader, *within) if within and self.leader is not None else ()

    @property
    def uncertain(self) -> tuple[K, ...]:
        """The configs whose order against the leader the rounds could not tell."""
        return tuple(k for k, d in self.duets.items() if d.order == Order.UNCERTAIN)


def decide(
    rounds: Mapping[K, Mapping[int, float]],
    simplicity: Mapping[K, tuple[float, ...]] | None = None,
    margin: float = TIE_MARGIN,
) -> Verdict[K]:
    """The verdict over configs measured in interleaved rounds (``rounds``: each config's figure
    by round; higher is better; see the module docstring for the rule). ``simplicity`` sorts the
    simplest config first (missing: no config is simpler than another)."""
    simplicity = simplicity or {}

    def median(key: K) -> float:
        figures = list(rounds[key].values())
        return float(statistics.median(figures)) if figures else 0.0

    def simplest_first(key: K) -> tuple[tuple[float, ...], float]:
        return simplicity.get(key, ()), -median(key)

    if not rounds:
        return Verdict(None, None)
    top = max(median(k) for k in rounds)
    leader = min((k for k in rounds if median(k) == top), key=simplest_first)
    lead = median(leader)
    duets = {
        key: duet(
            paired_ratios(figures, rounds[leader]),
            margin,
            fallback=median(key) / lead if lead > 0 else 1.0,
        )
        for key, figures in rounds.items()
        if key != leader
    }
    tied = [leader, *(k for k, d in duets.items() if d.tied)]
    return Verdict(leader, min(tied, key=simplest_first), duets)


def settled(rounds: Mapping[K, Mapping[int, float]]) -> set[K]:
    """The configs whose place further rounds cannot change (``rounds`` as :func:`decide`
    takes them): each one behind the leader (at most :data:`SETTLED_BEHIND` of it in every one
    of at least :data:`SETTLED_ROUNDS` paired rounds, or at most :data:`FAR_BEHIND` of it in
    every round from the first), and the leader too once every other config is, after
    :data:`SETTLED_ROUNDS` rounds of its own (it has no one left to be compared with, and its
    figure is a median). What lets the workload's final rounds stop early: the model's own
    config serving a seventh of the winner needs no second round to say so, nor a finalist
    behind it by 15 % in both rounds a third."""
    verdict = decide(rounds)
    if verdict.leader is None:
        return set()
    lead = rounds[verdict.leader]
    far = {
        key
        for key, figures in rounds.items()
        if key != verdict.leader
        and (ratios := paired_ratios(figures, lead))
        and (
            max(ratios) <= FAR_BEHIND
            or (len(ratios) >= SETTLED_ROUNDS and max(ratios) <= SETTLED_BEHIND)
        )
    }
    if len(far) == len(rounds) - 1 and len(lead) >= SETTLED_ROUNDS:
        far.add(verdict.leader)
    return far


def _sign_coverage(n: int, k: int) -> float:
    """How often the k-th lowest to k-th highest of n values holds their median."""
    tail = sum(math.comb(n, i) for i in range(k)) / 2**n
    return 1 - 2 * tail
