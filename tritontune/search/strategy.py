"""``--strategy``: how a search proposes configs, and what ``auto`` chooses.

``tpe`` treats the server as a black box; ``predict`` (:mod:`tritontune.search.predicted`)
calibrates each execution setting's service time and ranks the space with a model of Triton's
batcher. The model is of the server's compute: it pays where the model's compute is what a
config changes, and costs a calibration for nothing where a request's time is spent on the RPC
path (the example MLP on 2 cores: predict took 4.4x TPE's time to 95 % of the best known
config, ``docs/concepts/prediction.md``). ``auto`` tells the two apart from the model's own
config, measured first in every search: a request's compute time in Triton over the time it
spent outside Triton (:attr:`~tritontune.study.figures.OperatingPoint.compute_ratio`). How
busy the server was does not tell them apart: the MLP's own config kept it computing 96 % of
the time (0.44 ms a request, one at a time), yet a batch of its requests costs the client and
gRPC more than the model.
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


#: ``auto`` predicts when a request of the model's own config computed at least this many times
#: as long in Triton as it spent outside it. On 2 cores (2026-11-28, concurrency 1 and 4):
#: MiniLM 53-90, the example MLP 1.0-1.2.
COMPUTE_BOUND_RATIO = 4.0


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
    ratio = baseline.compute_ratio
    if ratio is None:
        return StrategyChoice(Strategy.TPE, "the model's own config has no compute time measured")
    computing = (
        f"a request of the model's own config computed {ratio:.1f}x as long in Triton as it "
        "spent outside it"
    )
    if ratio >= COMPUTE_BOUND_RATIO:
        return StrategyChoice(Strategy.PREDICT, f"{computing}: compute-bound")
    return StrategyChoice(
        Strategy.TPE, f"{computing}: the request path, which predictions don't model, weighs as much"
    )
