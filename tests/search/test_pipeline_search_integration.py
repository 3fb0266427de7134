"""A real search of a pipeline (an ensemble of two Python models) on the real tritonserver."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import PipelineStudy
from tests.measuring import FAST, FAST_OPTIONS
from tests.pipelines import BLS, PIPELINE, STEPS, write_bls, write_pipeline
from tritontune.config.pipeline import PipelineVariant, configs_from_text
from tritontune.config.variant import Variant
from tritontune.errors import ConfigError, InputError
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.loadgen import LoadEngine, LoadSpec
from tritontune.serving.opening import open_session
from tritontune.serving.served import ServedPipeline
from tritontune.study.figures import bottleneck

pytestmark = pytest.mark.integration


def test_the_search_tunes_every_composing_model_for_the_end_to_end_figure(pipeline_study: PipelineStudy):
    result = pipeline_study.result
    assert len(result.results) == 3 and not result.failed
    baseline = result.baseline
    assert baseline is not None and baseline.feasible
    # Triton's statistics of each composing model, over the same windows as the end-to-end figure.
    assert [s.model for s in baseline.steps] == list(STEPS)
    shift = dict((s.model, s) for s in baseline.steps)["shift"]
    assert shift.compute_s >= 0.0015  # it sleeps 2 ms per execution (of one request or several)
    assert shift.busy_s > dict((s.model, s) for s in baseline.steps)["scale"].busy_s
    for trial in result.results:
        assert set(trial.knobs["pipeline"]) == set(STEPS)
        assert set(configs_from_text(trial.config_pbtxt, source="trial")) == set(STEPS)
        assert trial.operating_point is not None and trial.operating_point.steps
    # Bottleneck first: shift (2 ms a batch) is searched alone for the first trials.
    first = min(result.results, key=lambda r: r.number)
    assert first.number == 0 and all(name.startswith("shift/") for name in first.params)
    winner = result.winner
    assert winner is not None and winner.point.feasible
    assert winner.point.throughput >= 0.8 * baseline.throughput  # the playoff's rounds are noisy
    results = result.to_dict()
    assert results["best"]["config"]["pipeline"].keys() == set(STEPS)
    assert [s["model"] for s in results["baseline"]["steps"]] == list(STEPS)


def test_a_pipeline_session_loads_each_models_config_and_measures_the_ensemble(
    pipeline_repository: Path,
):
    with open_session(pipeline_repository, PIPELINE, settings=FAST) as session:
        assert isinstance(session.serves, ServedPipeline)
        variant = PipelineVariant(models=(("shift", Variant(instance_count=2, max_queue_delay_us=500)),))
        receipt = session.load(variant)
        assert receipt.configs["shift"].instance_group[0].count == 2
        assert receipt.configs["scale"] == session.serves.source_of("scale").base_config
        m = session.measure(LoadSpec.concurrency(4))
        assert m.throughput > 0 and set(m.steps) == set(STEPS)
        assert all(split.requests > 0 for split in m.steps.values())
        with pytest.raises(ConfigError, match="its knobs are its models'"):
            session.configs(Variant(max_batch_size=4))
        with pytest.raises(InputError, match="precision variants of pipeline 'pipe': name one"):
            session.prepare_precisions(["fp16"])
        with pytest.raises(InputError, match="'shift' uses the 'python' backend"):
            session.prepare_precisions(["fp16"], model="shift")


@pytest.mark.parametrize("kind", ["ensemble", "bls"])
def test_every_load_engine_reads_each_steps_statistics(kind: str, tmp_path: Path):
    """Several load processes and perf_analyzer measure a pipeline (an ensemble, or a BLS model
    and the models it calls) as the asyncio engine does: end to end, with each composing model's
    statistics over the same windows (what the bottleneck focus, the report's per-step table and
    the exported record read)."""
    engines = {
        "two processes": LoadSettings(processes=2),
        "perf_analyzer": LoadSettings(LoadEngine.PERF_ANALYZER, 1),
    }
    if kind == "bls":
        repository, entry, composing = write_bls(tmp_path / "repository"), BLS, STEPS
    else:
        repository, entry, composing = write_pipeline(tmp_path / "repository"), PIPELINE, ()
    with open_session(repository, entry, composing=composing, settings=FAST) as session:
        session.load(PipelineVariant(models=(("shift", Variant(max_queue_delay_us=500)),)))
        for name, load in engines.items():
            session.load_settings = load
            m = session.measure(LoadSpec.concurrency(4))
            assert m.engine == load.engine, name
            assert m.throughput > 0 and m.error_count == 0, name
            assert set(m.steps) == set(session.step_models) >= set(STEPS), name
            # every end-to-end request ran each step once, over the same span
            assert m.server is not None
            for split in m.steps.values():
                assert split.requests == pytest.approx(m.server.requests, rel=0.2, abs=2), name
            if load.processes == 2:
                assert m.client is not None and m.client.processes == 2


def test_a_bls_model_is_tuned_with_the_models_it_calls(bls_study: PipelineStudy):
    from tests.pipelines import BLS
    from tritontune.search.setup import space_for

    with open_session(bls_study.repository, BLS, composing=STEPS) as session:
        assert isinstance(session.serves, ServedPipeline) and session.serves.pipeline.bls
        space = space_for(session, bls_study.slo_s)
        assert space.models == (BLS, *STEPS)  # type: ignore[attr-defined]
    # The BLS model's own limit is its clients' contract; its instances and batcher are searched.
    assert space.dimensions[f"{BLS}/max_batch_size"].values == (8,)  # type: ignore[union-attr]
    assert f"{BLS}/instance_count" in space.dimensions
    result = bls_study.result
    baseline = result.baseline
    assert baseline is not None and baseline.feasible
    assert [s.model for s in baseline.steps] == [BLS, *STEPS]
    # The focus is the step with the most time of its own (the BLS model's wait for its calls
    # taken out): here the BLS model itself, whose one instance runs one request at a time, so
    # requests queue for it while shift (2 ms an execution) never gets a batch to form.
    own = {s.model: s for s in baseline.steps}
    focus = bottleneck(baseline.steps, caller=BLS)
    assert focus is not None
    called = own["scale"].busy_s + own["shift"].busy_s
    chain_own = own[BLS].queue_s + max(0.0, own[BLS].compute_s - called)
    shares = {BLS: chain_own, "scale": own["scale"].busy_s, "shift": own["shift"].busy_s}
    assert focus.model == max(shares, key=lambda model: shares[model])
    first = min(result.results, key=lambda r: r.number)
    assert first.params and all(name.startswith(f"{focus.model}/") for name in first.params)
    for trial in result.results:
        assert set(trial.knobs["pipeline"]) == {BLS, *STEPS}
        assert trial.operating_point is not None and trial.operating_point.feasible


def test_the_report_shows_where_a_requests_time_went_per_model(pipeline_study: PipelineStudy, tmp_path):
    from tritontune.report.html import write_report
    from tritontune.study.handle import TuningStudy

    study = TuningStudy.open_existing(pipeline_study.storage, pipeline_study.name)
    data = write_report(study, tmp_path / "report.html")
    figures = data.to_dict()["steps"]
    assert set(figures) == {"baseline", "winner"}
    for which in figures.values():
        assert [s["model"] for s in which["steps"]] == list(STEPS)
        assert which["bottleneck"] in STEPS
    assert figures["baseline"]["bottleneck"] == "shift"  # 2 ms an execution, scale none
    assert not data.calls  # an ensemble is not one of its own steps
    html = (tmp_path / "report.html").read_text()
    assert 'id="pipeline-steps"' in html and "bottleneck" in html


def test_the_report_of_a_bls_model_shows_its_steps_and_its_calls(bls_study: PipelineStudy, tmp_path):
    """A BLS model's study reaches the report as an ensemble's does, with the BLS model among the
    steps and the note that its compute includes the calls it waits for."""
    from tritontune.report.html import write_report
    from tritontune.study.handle import TuningStudy

    study = TuningStudy.open_existing(bls_study.storage, bls_study.name)
    data = write_report(study, tmp_path / "report.html")
    figures = data.to_dict()["steps"]
    assert figures and all([s["model"] for s in f["steps"]] == [BLS, *STEPS] for f in figures.values())
    assert data.calls
    page = (tmp_path / "report.html").read_text()
    assert 'id="pipeline-steps"' in page and "includes the calls it waits for" in page


@pytest.mark.slow  # two runs of the CLI, each starting the server: 19-23 s on 2 cores
def test_a_space_file_fixes_one_models_knobs_while_the_others_are_searched(
    pipeline_repository: Path, tmp_path: Path
):
    """``--space`` keyed by model, through the CLI on the real server: shift (the bottleneck,
    searched alone in both trials) has its instances fixed and its queue delay narrowed, and
    scale (not searched while shift is) keeps the instances the file fixes, which its own config
    does not have; the same command resumes the study (its space kept as searched). What is
    under test is the space, not the figures: one load level a ramp (--max-load 1)."""
    import json

    from typer.testing import CliRunner

    from tritontune.cli import app
    from tritontune.study.handle import TuningStudy

    space = tmp_path / "space.yaml"
    space.write_text(
        "shift:\n  instance_count: 2\n  dynamic_batching: true\n"
        "  max_queue_delay: {min: 1ms, max: 4ms}\n"
        "scale:\n  instance_count: 2\n  max_batch_size: [8, 16]\n"
    )
    results, storage = tmp_path / "results.json", f"sqlite:///{tmp_path / 's.db'}"
    command = [
        "search", "-r", str(pipeline_repository), "-m", PIPELINE, "--slo-p99", "100ms",
        "--space", str(space), "--trials", "2", "--seed", "5", "--max-load", "1",
        *FAST_OPTIONS, "--playoff-top", "0",
        "--storage", storage, "--study", "fixed", "--results", str(results),
    ]  # fmt: skip
    runner = CliRunner()
    done = runner.invoke(app, command, catch_exceptions=False)
    assert done.exit_code == 0, done.output
    assert "shift/instance_count=2" in done.output and "shift/max_queue_delay=1ms..4ms" in done.output
    data = json.loads(results.read_text())
    assert data["space"]["shift"]["instance_count"] == [2]
    assert data["space"]["scale"]["max_batch_size"] == [8, 16]
    study = TuningStudy.open_existing(storage, "fixed").read()
    assert len(study.results) == 2 and not study.failed
    for trial in study.results:
        shift = trial.knobs["pipeline"]["shift"]
        assert [g["count"] for g in shift["instance_group"]] == [2], shift
        assert shift["dynamic_batching"] and 1000 <= shift["max_queue_delay_us"] <= 4000, shift
        scale = trial.knobs["pipeline"]["scale"]  # its own config's but for its instances
        assert [g["count"] for g in scale["instance_group"]] == [2], scale
        assert scale["max_batch_size"] == 8, scale
        assert {n for n in trial.params if not n.startswith("shift/")} == {"scale/instance_count"}
        assert 'name: "shift"' in trial.config_pbtxt
    again = runner.invoke(app, command, catch_exceptions=False)  # resumed: the same space
    assert again.exit_code == 0, again.output
    assert json.loads(results.read_text())["trials_this_run"] == 0
