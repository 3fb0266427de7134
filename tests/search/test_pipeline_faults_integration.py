"""A pipeline search's fault guarantees on the real server: an ensemble's and a BLS model's
searches share the one loop with a single model's, and what is specific to them is checked here.

After a killed server every composing model must be loaded again before the entry model, and the
trial measured again must carry the new server's per-step figures; after Ctrl-C, running the same
search again measures the interrupted config first. Budgets and ramps are the smallest that show
it (one load level a ramp, no playoff).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import kill_then_interrupt, orphaned_stubs
from tests.measuring import FAST
from tests.pipelines import BLS, PIPELINE, STEPS, write_bls, write_pipeline
from tritontune.search.optimize import SearchProgress, SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.setup import space_for
from tritontune.serving.opening import open_session
from tritontune.study.handle import TuningStudy

pytestmark = [pytest.mark.integration, pytest.mark.functional]

SLO_S = 0.100


@pytest.mark.parametrize("kind", ["ensemble", "bls"])
def test_a_pipeline_search_outlives_a_killed_server_and_resumes_after_ctrl_c(
    kind: str, tmp_path: Path, own_servers: Path
):
    """The server SIGKILLed during the first trial: restarted, every model loaded again, the
    config measured again with each step's figures. Ctrl-C at the second trial: the rerun
    measures that config, the baseline is not measured again."""
    if kind == "bls":
        repository, entry, composing = write_bls(tmp_path / "repository"), BLS, STEPS
    else:
        repository, entry, composing = write_pipeline(tmp_path / "repository"), PIPELINE, ()
    settings = SearchSettings(
        slo_p99_s=SLO_S,
        trials=2,
        seed=3,
        storage=f"sqlite:///{tmp_path / 'study.db'}",
        study_name="faults",
        measure=FAST,
        max_load=1,
        playoff=PlayoffSettings(top=0),
    )
    killed: list[int] = []
    baselines: list[int] = []

    with open_session(repository, entry, composing=composing, settings=FAST) as session:
        step_models = set(session.step_models)

        progress = SearchProgress(
            on_trial_start=kill_then_interrupt(session, killed),
            on_baseline_start=lambda: baselines.append(1),
        )
        with pytest.raises(KeyboardInterrupt):
            run_search(session, space_for(session, SLO_S), settings, progress)
        assert killed and session.server.launcher.pid != killed[0]
        assert orphaned_stubs(own_servers) == []  # the killed server's stubs went with it
        study = TuningStudy.open_existing(settings.storage_name, "faults").read()
        (first,) = [t for t in study.trials if t.counted]
        assert first.server_restarts == 1 and first.operating_point is not None
        assert {s.model for s in first.operating_point.steps} == step_models
        (cut,) = [t for t in study.trials if t.interrupted]

        again = run_search(
            session,
            space_for(session, SLO_S),
            settings,
            SearchProgress(on_baseline_start=lambda: baselines.append(1)),
        )
    assert again.resumed and again.trials_this_run == 1 and not again.failed
    assert len(baselines) == 1  # the baseline measured once, before the kill
    resumed = max(again.results, key=lambda r: r.number)
    assert resumed.params == cut.params and resumed.operating_point is not None
    assert {s.model for s in resumed.operating_point.steps} == step_models
