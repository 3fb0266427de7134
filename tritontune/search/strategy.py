"""``--strategy``: how a search proposes configs, and what ``auto`` chooses.

``tpe`` treats the server as a black box; ``predict`` (:mod:`tritontune.search.predicted`)
calibrates each execution setting's service time and ranks the space with a model of Triton's
batcher. The model is of the server's compute: it pays where the model's compute is what a
config changes, and costs a calibration for nothing where a request's time is spent on the RPC
path (the example MLP on 2 cores: predict took 4.4x TPE's time to 95 % of the best known
config, ``docs/concepts/prediction.md``). ``auto`` tells the two apart from the model's own
config, measured first in every search: the share of wall time the server spent computing at
its operating point (:attr:`~tritontune.study.figures.OperatingPoint.compute_share`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tritontune.enums import TextEnum
from tritontune.study.figures import OperatingPoint


class Strategy(TextEnum):
    """How a search proposes configs (``--strategy``)."""

    TPE = "tpe"
    """Optuna's TPE sampler: the server as a black box."""
    PREDICT = "predict"
    """Calibrate, rank the space by prediction, measure the best."""
    AUTO = "auto"
    """``predict`` for a compute-bound model, ``tpe`` otherwise (:func:`choose_strategy`)."""


#: ``auto`` predicts when the model's own config kept the server computing at least this share of
#: the time at its operating point. MiniLM on 2 cores: ~0.9-1 (a request is ~20 ms of compute);
#: the example MLP: well under 0.1 (tens of microseconds of compute a request, the rest RPC).
COMPUTE_BOUND_SHARE = 0.5


@dataclass(frozen=True)
class StrategyChoice:
    """The strategy a search runs with, and why (said on the terminal)."""

    strategy: Strategy
    why: str


def choose_strategy(
    asked: Strategy, baseline: OperatingPoint | None, *, pipeline: bool
) -> StrategyChoice:
    """``asked``, or for ``auto`` the strategy the baseline (the model's own config at its
    operating point) calls for. ``pipeline``: its configs are not predicted (TPE)."""
    if asked != Strategy.AUTO:
        return StrategyChoice(asked, f"--strategy {asked.value}")
    if pipeline:
        return StrategyChoice(Strategy.TPE, "a pipeline's configs are not predicted yet")
    if baseline is None:
        return StrategyChoice(Strategy.TPE, "the baseline is another worker's, not measured yet")
    share = baseline.compute_share
    if share is None:
        return StrategyChoice(Strategy.TPE, "the model's own config has no compute time measured")
    computing = f"the model's own config computed {share:.0%} of the time at its operating point"
    if share >= COMPUTE_BOUND_SHARE:
        return StrategyChoice(Strategy.PREDICT, f"{computing}: compute-bound")
    return StrategyChoice(
        Strategy.TPE, f"{computing}: the rest is the request path, which predictions don't model"
    )
