"""The sampler a search runs with: Optuna's, with ordered choices snapped before they are stored.

An ordered choice (batch sizes, delays: :class:`~tritontune.search.space.Choice`) is sampled as a
float over its range so TPE learns that neighbours behave alike. If the float itself were
stored, optuna-dashboard would show ``max_batch_size`` 45.3 for a trial that ran with 32. This
wrapper snaps the proposed float to the choice's nearest value *before* Optuna stores it (the way
Optuna rounds an integer distribution), so the param a person reads is the value the config used,
and TPE learns from the values that were measured.

Both this and ``--strategy predict``'s sampler (:mod:`tritontune.search.predicted`) change one or
two of a sampler's calls and hand the rest to another: :class:`DelegatingSampler`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from tritontune.search.space import Choice, SearchSpace


class DelegatingSampler(optuna.samplers.BaseSampler):
    """An Optuna sampler that hands every call to ``base``: what a sampler that changes one or two
    of them (snapping values, proposing a ranking's configs) is built on."""

    def __init__(self, base: optuna.samplers.BaseSampler) -> None:
        self.base = base

    def infer_relative_search_space(
        self, study: optuna.Study, trial: FrozenTrial
    ) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


class SnappingSampler(DelegatingSampler):
    """``base`` (any Optuna sampler), with the ordered choices of ``space`` snapped."""

    def __init__(self, base: optuna.samplers.BaseSampler, space: SearchSpace) -> None:
        super().__init__(base)
        self._snaps: dict[str, Callable[[float], Any]] = {
            name: dim.snap
            for name, dim in space.dimensions.items()
            if isinstance(dim, Choice) and dim.ordered
        }

    def _snapped(self, name: str, value: Any) -> Any:
        snap = self._snaps.get(name)
        return float(snap(value)) if snap is not None else value

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        proposed = self.base.sample_relative(study, trial, search_space)
        return {name: self._snapped(name, value) for name, value in proposed.items()}

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        value = self.base.sample_independent(study, trial, param_name, param_distribution)
        return self._snapped(param_name, value)


def snapping(sampler: optuna.samplers.BaseSampler, space: SearchSpace) -> SnappingSampler:
    """``sampler`` snapping ``space``'s ordered choices (re-wrapped if it already snaps another
    space: precision preparation may narrow the space after the study is opened)."""
    base = sampler.base if isinstance(sampler, SnappingSampler) else sampler
    return SnappingSampler(base, space)
