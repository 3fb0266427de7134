"""``tritontune status``: a study's workers, trials, best and ETA, read from the study alone."""

import datetime as dt
from pathlib import Path

import optuna
from typer.testing import CliRunner

from tests.fakes import FakeSession
from tests.search.test_optimize import SPACE
from tests.studies import read_study
from tritontune.cli import app
from tritontune.config.repository import load_model_source
from tritontune.hostinfo import this_worker
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.status import study_status


def test_status_lists_the_worker_the_trials_and_the_eta(example_repository: Path, tmp_path: Path):
    storage = f"sqlite:///{tmp_path / 's.db'}"
    settings = SearchSettings(
        slo_p99_s=0.05, trials=6, seed=1, storage=storage, study_name="s",
        sampler=optuna.samplers.RandomSampler(seed=1),
    )  # fmt: skip
    session = FakeSession(load_model_source(example_repository, "mlp"))
    run_search(session, SPACE, settings)
    record = read_study(optuna.load_study(study_name="s", storage=storage))

    status = study_status(record, now=dt.datetime.now())
    (worker,) = status.workers
    assert worker.label == this_worker().label() and worker.trials == 6 and worker.running is None
    assert status.budget == 6 and status.eta_s == 0.0  # the budget is done

    shown = CliRunner().invoke(app, ["status", "--study", "s"], env={"TRITONTUNE_STORAGE": storage})
    assert shown.exit_code == 0, shown.output
    assert "study s: 6/6 trials done (6 measured, 0 failed), 0 running, 0 lost" in shown.output
    assert this_worker().label() in shown.output and "best so far: trial" in shown.output

    missing = CliRunner().invoke(app, ["status", "--study", "nope", "--storage", storage])
    assert missing.exit_code == 2 and "study 'nope' not found" in missing.output
