"""What one kind of search plugs into the one loop (:mod:`tritontune.search.loop`).

An :class:`Objective` says what a point of the space means (the knobs the sampler proposes, the
config they stand for) and how a config is judged (:meth:`Objective.evaluate`, one measurement of
whatever figure the search maximizes). Everything else a search needs (the budget, the study,
heartbeats, lost-trial recovery, Ctrl-C, the fault policy) lives in the loop, so a new kind of
search is a new objective, never a second loop. Two exist:

- :class:`tritontune.search.optimize.SloObjective`: the operating point under a p99 SLO (the
  highest throughput whose p99 meets it);
- :class:`tritontune.search.traffic_objective.TrafficObjective`: the capacity for a traffic mix (the
  most inferences served with every class meeting its objective).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import optuna

from tritontune.config.variant import Variant
from tritontune.search.space import SearchSpace
from tritontune.serving.bench import Bench
from tritontune.study.figures import CapacityFigure, OperatingPoint


@dataclass(frozen=True)
class Evaluation:
    """One config's figure, as the study keeps it, and how long the server took to switch."""

    figure: OperatingPoint | CapacityFigure
    switch_s: float | None = None


class Objective(Protocol):
    """One kind of search (see the module docstring)."""

    @property
    def space(self) -> SearchSpace:
        """The dimensions the sampler proposes."""
        ...

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        """The point ``trial`` proposes: the space's knobs and any of the objective's own."""
        ...

    def variant(self, point: Mapping[str, Any]) -> Variant:
        """The config a point stands for."""
        ...

    def evaluate(self, bench: Bench, variant: Variant) -> Evaluation:
        """Load ``variant`` and measure it. A server fault propagates (the loop's fault policy
        restarts the server and calls this again)."""
        ...


class StartsNear(Objective, Protocol):
    """An objective whose walk over loads can start where a prediction puts the answer
    (``--strategy predict`` proposes configs with their predicted operating load)."""

    def evaluate_near(self, bench: Bench, variant: Variant, load: float | None) -> Evaluation:
        """:meth:`evaluate`, the walk starting at ``load`` (None: where it always starts)."""
        ...
