from pathlib import Path

import optuna
import pytest

from tritontune.errors import InputError
from tritontune.search.study import default_study_name, is_counted, open_storage, open_study

IDENTITY = {"model": "mlp", "slo_p99_s": 0.05, "load_mode": "concurrency"}


def test_default_name():
    assert default_study_name("mlp", 0.05, "concurrency") == "mlp-p99-50ms-concurrency"


def test_storage_that_cannot_be_opened(tmp_path: Path):
    with pytest.raises(InputError, match="--storage sqlite:////nonexistent/dir/x.db: cannot be opened"):
        open_storage("sqlite:////nonexistent/dir/x.db")
    with pytest.raises(InputError, match="--storage nosuchdb://x: cannot be opened"):
        open_storage("nosuchdb://x")


def test_resume_checks_identity(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    sampler = optuna.samplers.RandomSampler(seed=0)
    study, resumed = open_study(url, "s", identity=IDENTITY, sampler=sampler)
    assert not resumed and study.user_attrs["model"] == "mlp"
    again, resumed = open_study(url, "s", identity=IDENTITY, sampler=sampler)
    assert resumed
    with pytest.raises(
        InputError, match=r"created for model 'mlp', p99 SLO 50ms.*not model 'mlp', p99 SLO 20ms"
    ):
        open_study(url, "s", identity={**IDENTITY, "slo_p99_s": 0.02}, sampler=sampler)
    with pytest.raises(InputError, match="not model 'resnet'"):
        open_study(url, "s", identity={**IDENTITY, "model": "resnet"}, sampler=sampler)


def test_interrupted_trials_do_not_count(tmp_path: Path):
    study = optuna.create_study(direction="maximize")
    done = study.ask()
    study.tell(done, 1.0)
    cut = study.ask()
    cut.set_user_attr("interrupted", True)
    study.tell(cut, state=optuna.trial.TrialState.FAIL)
    broken = study.ask()
    study.tell(broken, state=optuna.trial.TrialState.FAIL)
    assert [is_counted(t) for t in study.trials] == [True, False, True]
