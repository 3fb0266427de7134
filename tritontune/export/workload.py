"""Export of a workload study (``search --workload``): the winner of its final rounds.

One model (the shared layout), one per class (the endpoint layout), or every model of a group:
each directory holds its config, that model's files as measured, the workload file (with copies
of the classes' request data and traces) and a workload record that ``check`` reads to send the
same workload again. A group's models get **a record each, naming the whole group** (the same
figures and ``routes``), the shape the endpoint layout already exports and ``check`` reads, and
each keeps its own config's and files' digests; a pipeline needs one record only because only its
entry is ever called.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from tritontune.config.model_config import config_digest, parse_config_text, write_config
from tritontune.config.repository import ModelSource, file_sha256, load_model_source
from tritontune.config.variant import Precision, describe_config, precision_of
from tritontune.errors import InputError
from tritontune.export import staging
from tritontune.measure.traffic import Layout
from tritontune.study.figures import Finalist
from tritontune.study.records import WorkloadStudyRecord
from tritontune.study.storage import storage_label
from tritontune.tuning_record import WORKLOAD_FILE, WorkloadRecord, write_record


def export_workload(
    study: WorkloadStudyRecord,
    out: Path,
    *,
    storage: str,
    model_repository: Path | None = None,
    force: bool = False,
) -> staging.ExportResult:
    """Export the winner of a workload study's final rounds (see the module docstring)."""
    winner = _exported_winner(study)
    baseline = study.final.baseline if study.final else None
    result = staging.ExportResult(out=Path(out))
    sources = _measured_sources(study, winner, model_repository, result.warnings)
    traffic = study.traffic

    def write(name: str, staged: Path) -> WorkloadRecord:
        source, digests = sources[name]
        config = parse_config_text(winner.models[name], source=f"study {study.name!r}, model {name}")
        config.name = name
        files = staging.model_files(source)
        precision = Precision(precision_of(config, source.model_file.name))
        served_precision = None
        if precision != Precision.FP32:  # the variant measured replaces the weights
            files.pop(source.model_file.relative_to(source.directory), None)
            check = study.precision_check(precision, source.name if traffic.routed else None)
            relative, files[relative] = staging.precision_variant(source, precision, check, None)
            served_precision = staging.precision_summary(precision, check)
        staging.copy_files(files, staged)
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
            # a group's model: its own knobs (the winner's are every model's, by model)
            knobs=describe_config(config) if traffic.routed else _endpoint_knobs(winner, name),
            config_sha256=config_digest(config),
            # copies of the source have its digests; only a precision variant is hashed here
            model_files={
                str(rel): digests.get(str(rel)) or file_sha256(staged / rel) for rel in sorted(files)
            },
            precision=served_precision,
            **staging.measured_on(study.context),
            tuned_from={
                "model": source.name,
                "study": study.name,
                "storage": storage_label(storage),  # never its password
                "trial": winner.trial,
            },
        )
        write_record(record, staged)
        return record

    return staging.write_models(Path(out), list(winner.models), force, write, result)


def _exported_winner(study: WorkloadStudyRecord) -> Finalist:
    """The winner of the final rounds, refused when there is no tuned config of it to write."""
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
    return winner


def _measured_sources(
    study: WorkloadStudyRecord,
    winner: Finalist,
    model_repository: Path | None,
    warnings: list[str],
) -> dict[str, tuple[ModelSource, dict[str, str]]]:
    """Each model the winner serves -> the user's model whose files it copies (checked to be the
    files the search measured) and their digests: a group's models each their own (the
    context's ``step_model_files``); every endpoint, the one model's."""
    if not study.traffic.routed:
        measured = staging.measured_source(study.name, study.model, study.context, model_repository)
        return {name: measured for name in winner.models}
    repository = staging.measured_repository(study.name, study.context, model_repository)
    sources = {name: load_model_source(repository, name) for name in winner.models}
    now = {name: source.file_digests() for name, source in sources.items()}
    staging.refuse_changed_models(
        study.name, repository, study.context.step_model_files, now, warnings, what="models"
    )
    return {name: (sources[name], now[name]) for name in sources}


def _endpoint_knobs(winner: Finalist, model: str) -> dict:
    """The knobs of one model of the winner (an endpoint's own, for the endpoint layout)."""
    if winner.layout == Layout.ENDPOINTS:
        role = next(c for c, m in winner.routes.items() if m == model)
        return dict(winner.knobs.get(role, {}))
    return dict(winner.knobs)
