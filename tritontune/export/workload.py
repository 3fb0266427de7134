"""Export of a workload study (``search --workload``): the winner of its final rounds.

One model (the shared layout) or one per class (``NAME_<class>``), each with its config, a copy
of the model files that were measured, the workload file (``tritontune.workload.yaml``, with
copies of the classes' request data and arrival traces) and a workload record that ``check``
reads to send the same workload again.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tritontune.config.model_config import config_digest, parse_config_text, write_config
from tritontune.errors import InputError
from tritontune.export import staging
from tritontune.measure.traffic import Layout
from tritontune.record import WORKLOAD_FILE, WorkloadRecord, write_record
from tritontune.study.figures import Finalist
from tritontune.study.records import WorkloadStudyRecord


def export_workload(
    study: WorkloadStudyRecord,
    out: Path,
    *,
    storage: str,
    model_repository: Path | None = None,
    force: bool = False,
) -> staging.ExportResult:
    """Export the winner of a workload study's final rounds (see the module docstring)."""
    if study.traffic.routed:  # the files of one model would be written for every model
        raise InputError(
            f"study {study.name!r}: its classes name their models "
            f"({', '.join(study.traffic.models)}); exporting several models is not done yet (the "
            "results JSON's winner keeps each model's config.pbtxt under `models`)"
        )
    winner = study.final.winner if study.final else None
    if study.final is None or winner is None:
        raise InputError(
            f"study {study.name!r} has no final rounds yet (the search was stopped before them); "
            "run the same search again to finish it"
        )
    if not winner.models or not winner.routes:
        raise InputError(
            f"study {study.name!r} was made by an older tritontune (its winner keeps no configs); "
            "search again to export it"
        )
    if winner.trial is None:
        raise InputError(
            f"study {study.name!r}: the model's own config won the final rounds; there is no "
            "tuned config to export"
        )
    baseline = study.final.baseline
    source, digests = staging.measured_source(study.name, study.model, study.context, model_repository)
    traffic = study.traffic

    def write(name: str, staged: Path) -> WorkloadRecord:
        config = parse_config_text(winner.models[name], source=f"study {study.name!r}, model {name}")
        config.name = name
        staging.copy_files(staging.model_files(source), staged)
        write_config(config, staged / "config.pbtxt")
        data_files, trace_files = {}, {}
        for c in traffic.classes:
            if c.request.input_data is not None:
                data_files[c.name] = f"tritontune.input_data.{c.name}.json"
                shutil.copy2(c.request.input_data, staged / data_files[c.name])
            if c.trace is not None:
                trace_files[c.name] = f"tritontune.trace.{c.name}{c.trace.source.suffix}"
                shutil.copy2(c.trace.source, staged / trace_files[c.name])
        (staged / WORKLOAD_FILE).write_text(
            yaml.safe_dump(traffic.to_file(data_files, trace_files), sort_keys=False),
            encoding="utf-8",
        )
        record = WorkloadRecord(
            model=name,
            workload_file=WORKLOAD_FILE,
            layout=winner.layout,
            routes=dict(winner.routes),
            capacity_rounds=winner.rates,
            served_rounds=winner.served,
            baseline_rounds=baseline.rates if baseline else (),
            knobs=_endpoint_knobs(winner, name),
            config_sha256=config_digest(config),
            model_files=dict(digests),
            **staging.measured_on(study.context),
            tuned_from={
                "model": source.name,
                "study": study.name,
                "storage": storage,
                "trial": winner.trial,
            },
        )
        write_record(record, staged)
        return record

    return staging.write_models(
        Path(out), list(winner.models), force, write, staging.ExportResult(out=Path(out))
    )


def _endpoint_knobs(winner: Finalist, model: str) -> dict:
    """The knobs of one model of the winner (an endpoint's own, for the endpoint layout)."""
    if winner.layout == Layout.ENDPOINTS:
        role = next(c for c, m in winner.routes.items() if m == model)
        return dict(winner.knobs.get(role, {}))
    return dict(winner.knobs)
