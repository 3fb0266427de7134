"""The sampler a search runs with: Optuna's, with ordered choices snapped before they are stored.

An ordered choice (batch sizes, delays: :class:`~tritontune.search.space.Choice`) is sampled as a
float over its range so TPE learns that neighbours behave alike. If the float itself were
stored, optuna-dashboard would show ``max_batch_size`` 45.3 for a trial that ran with 32. This
wrapper snaps the proposed float to the choice's nearest value *before* Optuna stores it (the way
Optuna rounds an integer distribution), so the param a person reads is the value the config used,
and TPE learns from the values that were measured.

Both this and the samplers that propose configs themselves (``--strategy predict``'s,
:mod:`tritontune.search.predicted`; the first trials', :mod:`tritontune.search.first_trials`)
change one or two of a sampler's calls and hand the rest to another: :class:`DelegatingSampler`.
The proposing ones share :class:`ProposingSampler`: they choose a trial's point before it is
sampled, and the base sampler goes on where they have nothing to propose.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import optuna
from optuna.distributions import BaseDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from tritontune.search.space import Choice, SearchSpace
from tritontune.study.coordination import is_queued


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


class ProposingSampler(DelegatingSampler):
    """A sampler that picks some trials' points itself (:meth:`propose`, asked before each trial)
    and leaves the rest, and the knobs a proposal leaves out, to ``base``. A trial queued with
    fixed params (a recovered one) is never proposed for."""

    def __init__(self, base: optuna.samplers.BaseSampler) -> None:
        super().__init__(base)
        self._targets: dict[int, dict[str, Any]] = {}

    def propose(self, study: optuna.Study, trial: FrozenTrial) -> Mapping[str, Any] | None:
        """The point for ``trial`` (by dimension, in the space's values), or None."""
        raise NotImplementedError

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        if is_queued(trial):
            return
        point = self.propose(study, trial)
        if point is not None:
            self._targets[trial.number] = dict(point)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if trial.number in self._targets:
            return {}
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        param_name: str,
        param_distribution: BaseDistribution,
    ) -> Any:
        target = self._targets.get(trial.number)
        if target is None or param_name not in target:
            return self.base.sample_independent(study, trial, param_name, param_distribution)
        value = target[param_name]
        if isinstance(param_distribution, FloatDistribution):
            return float(value)  # an ordered choice, sampled as a float and snapped
        if isinstance(param_distribution, IntDistribution):
            return int(value)
        return value

    def after_trial(
        self,
        study: optuna.Study,
        trial: FrozenTrial,
        state: TrialState,
        values: Sequence[float] | None,
    ) -> None:
        self._targets.pop(trial.number, None)
        self.base.after_trial(study, trial, state, values)


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


def unsnapped(sampler: optuna.samplers.BaseSampler) -> optuna.samplers.BaseSampler:
    """The sampler a :class:`SnappingSampler` wraps (``sampler`` itself if it snaps nothing)."""
    return sampler.base if isinstance(sampler, SnappingSampler) else sampler


def snapping(sampler: optuna.samplers.BaseSampler, space: SearchSpace) -> SnappingSampler:
    """``sampler`` snapping ``space``'s ordered choices (re-wrapped if it already snaps another
    space: precision preparation may narrow the space after the study is opened)."""
    return SnappingSampler(unsnapped(sampler), space)


Proposer = TypeVar("Proposer", bound=ProposingSampler)


def propose_first(
    study: optuna.Study,
    make: Callable[[optuna.samplers.BaseSampler], Proposer],
    space: SearchSpace,
) -> Proposer:
    """Put the proposing sampler ``make`` builds around the study's own sampler, ordered
    choices still snapped; returns it."""
    proposer = make(unsnapped(study.sampler))
    study.sampler = snapping(proposer, space)
    return proposer
