"""Interleaved rounds: a few configs re-measured head to head before a verdict.

A search's figures are *screening* figures (one short measurement each, at whatever minute it
ran), and the highest of them is biased up (the winner's curse). So both searches end by measuring
their best few configs and the baseline again, interleaved, so a disturbance of the machine hits
all of them alike; the caller's ``measure`` gives the figure of merit (a held load for the
playoff, a capacity for a traffic mix). With ``settled``, members no further round can move sit
out the rounds that follow (:func:`tritontune.study.duet.settled`). Every measurement runs under
the fault policy (:func:`tritontune.serving.faults.with_restarts`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Generic, TypeVar

from tritontune.serving.faults import ConfigFailed, Restartable, with_restarts

K = TypeVar("K")
F = TypeVar("F")


@dataclass
class Rounds(Generic[F]):
    """Each member's figures (by its position among the members), and why one stopped."""

    figures: dict[int, list[F]] = field(default_factory=dict)
    errors: dict[int, str] = field(default_factory=dict)
    settled: dict[int, int] = field(default_factory=dict)
    """Members that sat out the later rounds, by position: after how many rounds they were
    settled."""


def interleaved_rounds(
    server: Restartable,
    members: Sequence[K],
    rounds: int,
    measure: Callable[[K], F],
    on_figure: Callable[[int, K, F | None], None] | None = None,
    settled: Callable[[dict[int, list[F]]], set[int]] | None = None,
) -> Rounds[F]:
    """Measure every member once per round, in the same order each round (see the module
    docstring). ``on_figure(round, member, figure)`` reports each measurement (None: the member
    failed and leaves the rounds). ``settled(figures)``, asked after each round with every
    member's figures so far (failed members left out), names the members that sit out the rest."""
    out: Rounds[F] = Rounds({i: [] for i in range(len(members))})
    for round_number in range(1, rounds + 1):
        if settled is not None and round_number > 1:
            alive = {i: f for i, f in out.figures.items() if i not in out.errors}
            for i in sorted(settled(alive)):
                out.settled.setdefault(i, round_number - 1)
            if all(i in out.settled or i in out.errors for i in range(len(members))):
                break
        for i, member in enumerate(members):
            if i in out.errors or i in out.settled:
                continue
            try:
                figure, _ = with_restarts(server, partial(measure, member))
            except ConfigFailed as failed:
                out.errors[i] = failed.reason
                if on_figure:
                    on_figure(round_number, member, None)
                continue
            out.figures[i].append(figure)
            if on_figure:
                on_figure(round_number, member, figure)
    return out
