"""In-memory studies written through tritontune's own study module, for unit tests of its readers
(export, report): no server, no files but the example model the context points at."""

from __future__ import annotations

from pathlib import Path

import optuna

from tritontune.config.repository import load_model_source
from tritontune.measure.loadgen import LoadMode
from tritontune.search.operating_point import LevelResult, OperatingPoint
from tritontune.search.playoff import PlayoffResult
from tritontune.search.study import (
    RecordedWorkload,
    StudyContext,
    StudyIdentity,
    ensure_context,
    open_study,
    save_baseline,
    save_config,
    save_confirmed,
    save_playoff,
    save_point,
    tell_measured,
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
) -> optuna.Study:
    """A finished study of the example model: one measured trial per throughput (batch sizes
    4, 8, 16, ...), the baseline, and ``confirmed`` for the best trial when given."""
    identity = StudyIdentity("mlp", SLO, LoadMode.CONCURRENCY)
    study, _ = open_study(
        optuna.storages.InMemoryStorage(), name, identity=identity,
        sampler=optuna.samplers.RandomSampler(seed=0),
    )  # fmt: skip
    source = load_model_source(repository, "mlp")
    ensure_context(
        study,
        lambda: StudyContext(
            model_repository=str(repository), model_version="1", model_files=source.file_digests(),
            workload=RecordedWorkload(batch_size=1), server_version="2.51.0",
            host={"cpu_model": "test cpu", "cpu_count": 2},
        ),
    )  # fmt: skip
    save_baseline(study, baseline or point(1000, 0.02), 'name: "mlp"\n')
    for i, throughput in enumerate(throughputs):
        trial = study.ask()
        batch = 4 * 2**i
        save_point(trial, {"max_batch_size": batch})
        save_config(
            trial,
            {"max_batch_size": batch, "dynamic_batching": True},
            source_config_text(source, batch),
        )
        tell_measured(study, trial, point(throughput, 0.03), switch_s=0.5)
    if confirmed is not None:
        best = max(range(len(throughputs)), key=lambda i: throughputs[i])
        save_confirmed(study, best, confirmed)
    if playoff is not None:
        save_playoff(study, playoff)
    return study


def source_config_text(source, batch: int) -> str:
    from tritontune.config.model_config import config_to_text
    from tritontune.config.variant import Variant, apply_variant

    return config_to_text(apply_variant(source.base_config, Variant(max_batch_size=batch)))
