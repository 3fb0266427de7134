"""Which trials run a config queued for them (tritontune.study.coordination)."""

from __future__ import annotations

import optuna

from tritontune.study.coordination import is_queued, requeue


def test_a_requeued_trial_is_queued_and_a_sampled_one_is_not():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize")
    sampled = study.ask({"x": optuna.distributions.IntDistribution(1, 8)})
    study.tell(sampled, state=optuna.trial.TrialState.FAIL)
    requeue(study, study.trials[0])
    queued = study.ask({"x": optuna.distributions.IntDistribution(1, 8)})
    assert not is_queued(study.trials[0])
    assert is_queued(study.trials[queued.number]) and queued.params == sampled.params
