"""In-memory studies written through tritontune's own study module, for unit tests of its readers
(export, report): no server, no files but the example model the context points at."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import optuna

from tritontune.config.repository import load_model_source
from tritontune.hostinfo import WorkerId
from tritontune.measure.loadgen import LoadMode
from tritontune.study.figures import LevelResult, OperatingPoint, PlayoffResult, StepFigure
from tritontune.study.handle import TuningStudy
from tritontune.study.records import (
    RecordedRequestShape,
    StudyContext,
    StudyIdentity,
    StudyRecord,
)

SLO = 0.05


def point(throughput: float, p99_s: float, load: float = 8, feasible: bool = True) -> OperatingPoint:
    level = LevelResult(load, throughput, p99_s / 3, p99_s / 2, p99_s, 0, True, feasible, p99_s / 3, 900)
    return OperatingPoint(
        slo_p99_s=SLO, load_mode=LoadMode.CONCURRENCY, feasible=feasible, load=load,
        throughput=throughput, p50_s=p99_s / 3, p99_s=p99_s, p99_deviation=0.05,
        throughput_deviation=0.03, avg_batch_size=4.0, levels=[level], mean_s=p99_s / 3,
    )  # fmt: skip


def make_study(
    repository: Path,
    throughputs: list[float],
    *,
    name: str = "s",
    confirmed: OperatingPoint | None = None,
    baseline: OperatingPoint | None = None,
    playoff: PlayoffResult | None = None,
) -> TuningStudy:
    """A finished study of the example model: one measured trial per throughput (batch sizes
    4, 8, 16, ...), the baseline, and ``confirmed`` for the best trial when given."""
    identity = StudyIdentity("mlp", SLO, LoadMode.CONCURRENCY)
    study = TuningStudy.create_or_resume(
        optuna.storages.InMemoryStorage(), name, identity=identity,
        sampler=optuna.samplers.RandomSampler(seed=0),
    )  # fmt: skip
    source = load_model_source(repository, "mlp")
    study.ensure_context(
        lambda: StudyContext(
            model_repository=str(repository), model_version="1", model_files=source.file_digests(),
            request_shape=RecordedRequestShape(batch_size=1), server_version="2.51.0",
            host={"cpu_model": "test cpu", "cpu_count": 2},
        ),
    )  # fmt: skip
    study.save_baseline(baseline or point(1000, 0.02), 'name: "mlp"\n')
    for i, throughput in enumerate(throughputs):
        trial = study.ask()
        batch = 4 * 2**i
        study.save_point(trial, {"max_batch_size": batch})
        study.save_config(
            trial,
            {"max_batch_size": batch, "dynamic_batching": True},
            source_config_text(source, batch),
        )
        study.tell_measured(trial, point(throughput, 0.03), switch_s=0.5)
    if confirmed is not None:
        best = max(range(len(throughputs)), key=lambda i: throughputs[i])
        # as studies made before the playoff kept it: the winner re-measured once
        study.optuna_study.set_user_attr(
            "confirmed", {"trial": best, "operating_point": confirmed.to_dict()}
        )
    if playoff is not None:
        study.save_playoff(playoff)
    return study


def read_study(study: TuningStudy | optuna.Study) -> StudyRecord:
    """A single-class study, typed (an Optuna study made as an older version made it, too)."""
    return (study if isinstance(study, TuningStudy) else TuningStudy.of(study)).read()


def source_config_text(source, batch: int) -> str:
    from tritontune.config.model_config import config_to_text
    from tritontune.config.variant import Variant, apply_variant

    return config_to_text(apply_variant(source.base_config, Variant(max_batch_size=batch)))


def make_pipeline_study(
    repository: Path, throughputs: list[float], *, name: str = "p", step_files: bool = True
) -> TuningStudy:
    """A finished study of the test pipeline (``tests/pipelines.py`` in ``repository``): one
    measured trial per throughput, each giving ``shift`` one more instance and a longer queue
    delay (``scale`` keeps its own config), every point with its steps' figures. Without
    ``step_files`` the context lacks the composing models' digests, as studies made before
    pipelines were exported do."""
    from tritontune.config.pipeline import configs_to_text, describe_configs, load_pipeline
    from tritontune.config.variant import Variant, apply_variant

    pipeline = load_pipeline(repository, "pipe")
    identity = StudyIdentity("pipe", SLO, LoadMode.CONCURRENCY)
    study = TuningStudy.create_or_resume(
        optuna.storages.InMemoryStorage(), name, identity=identity,
        sampler=optuna.samplers.RandomSampler(seed=0),
    )  # fmt: skip
    digests = {source.name: source.file_digests() for source in pipeline.models}
    study.ensure_context(
        lambda: StudyContext(
            model_repository=str(repository), model_version="1",
            model_files=pipeline.ensemble.file_digests(),
            step_model_files=digests if step_files else None,
            request_shape=RecordedRequestShape(batch_size=1), server_version="2.51.0",
            host={"cpu_model": "test cpu", "cpu_count": 2},
        ),
    )  # fmt: skip
    base = {source.name: source.base_config for source in pipeline.models}
    study.save_baseline(pipeline_point(1000, 0.02), configs_to_text(base))
    for i, throughput in enumerate(throughputs):
        trial = study.ask()
        shift = Variant(instance_count=i + 1, max_queue_delay_us=100 * (i + 1))
        configs = {**base, "shift": apply_variant(base["shift"], shift)}
        study.save_point(trial, {"shift/instance_count": i + 1})
        study.save_config(trial, describe_configs(configs), configs_to_text(configs))
        study.tell_measured(trial, pipeline_point(throughput, 0.03), switch_s=0.5)
    return study


def pipeline_point(throughput: float, p99_s: float) -> OperatingPoint:
    """:func:`point`, with the test pipeline's steps (``shift`` the bottleneck)."""
    steps = (StepFigure("scale", 0.0002, 0.0005, 3.5), StepFigure("shift", p99_s / 4, 0.003, 7.5))
    return replace(point(throughput, p99_s), steps=steps)


def final_rounds_claimed_elsewhere(
    storage: str, study: str, trials: int, top: int
) -> Callable[..., None]:
    """An ``on_trial_done`` for a workload search: once its ``trials`` trials are done (the budget
    spent), another worker claims the final rounds over the top ``top`` trials first."""
    elsewhere = WorkerId("other-host", "boot", 1, 0.0)
    done: list[Any] = []

    def trial_done(trial: Any, best: Any, eta: Any) -> None:
        done.append(trial.number)
        if len(done) == trials:
            handle = TuningStudy.open_existing(storage, study)
            ranked = [t.number for t in handle.read_workload().results if t.served][:top]
            assert handle.claim_final_rounds("workload-final", ranked, None, elsewhere)

    return trial_done
