"""``tritontune export``: a finished study becomes a model repository Triton serves as it is.

Each exported model directory holds the tuned ``config.pbtxt`` (the user's backend kept), a copy
of the model files that were measured, and a tuning record (:mod:`tritontune.record`) saying what
the config was measured to do. Everything comes from the study: nothing is re-measured here.

A workload study (``search --workload``) exports its winner of the final rounds: one model
(the shared layout) or one per class (``NAME_<class>``), each with the workload file
(``tritontune.workload.yaml``, with copies of the classes' request data) and a workload record
that ``check`` reads to send the same workload again.

One model can be exported as several *endpoints*, e.g. ``mlp_interactive`` from a tight-SLO study
and ``mlp_batch`` from a loose-SLO one; their records then carry a routing note that says which
traffic goes where.

The output directory is written through a staging directory beside it and each model directory
is moved into place only when complete, so an error never leaves half a repository, and a
non-empty directory is only written into with ``force`` (which replaces just the model
directories being exported).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tritontune.config.model_config import config_digest, parse_config_text, write_config
from tritontune.config.repository import ModelSource, file_sha256, load_model_source
from tritontune.config.variant import Precision, variant_filename
from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo
from tritontune.measure.gpu_metrics import combine
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.traffic import Layout, Traffic
from tritontune.precision.convert import ConversionError, build_variant
from tritontune.precision.prepare import precision_data
from tritontune.precision.recipe import Recipe
from tritontune.record import (
    INPUT_DATA_FILE,
    RECORD_FILE,
    WORKLOAD_FILE,
    RecordedLoad,
    RecordedPoint,
    TuningRecord,
    WorkloadRecord,
    read_record,
    write_record,
)
from tritontune.search.operating_point import OperatingPoint
from tritontune.search.playoff import PlayoffEntry
from tritontune.search.study import (
    StudyContext,
    StudyRecord,
    TrialResult,
    WorkloadStudyRecord,
    is_workload_study,
    load_existing_study,
    read_study,
    read_workload_study,
)
from tritontune.search.workload_search import Finalist
from tritontune.units import format_duration


@dataclass(frozen=True)
class Endpoint:
    """One study to export; ``role`` (e.g. ``interactive``) is appended to the model's name."""

    study: str
    role: str | None = None


@dataclass(frozen=True)
class ExportedModel:
    name: str
    directory: Path
    record: TuningRecord | WorkloadRecord
    warnings: tuple[str, ...] = ()


@dataclass
class ExportResult:
    out: Path
    models: list[ExportedModel] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Pick:
    """A trial chosen for export, with everything needed to write it."""

    endpoint: Endpoint
    study: StudyRecord
    source: ModelSource
    result: TrialResult
    rank: int
    point: OperatingPoint
    confirmed: bool
    model_files: dict[str, str]
    """sha256 of the source's version files (checked against the study's): the copies' digests."""
    playoff: PlayoffEntry | None = None

    @property
    def name(self) -> str:
        name = self.source.name + (f"_{self.endpoint.role}" if self.endpoint.role else "")
        return name if self.rank == 1 else f"{name}_rank{self.rank}"


def parse_endpoint(text: str) -> Endpoint:
    """``interactive=mlp-p99-10ms-concurrency`` -> Endpoint(study, role)."""
    role, sep, study = text.partition("=")
    role, study = role.strip(), study.strip()
    if not sep or not role or not study:
        raise InputError(f"--endpoint {text!r}: expected ROLE=STUDY, e.g. interactive=mlp-p99-10ms")
    if not role.replace("_", "").replace("-", "").isalnum():
        raise InputError(f"--endpoint {text!r}: the role {role!r} must be letters, digits, - or _")
    return Endpoint(study=study, role=role)


def export_studies(
    endpoints: Sequence[Endpoint],
    storage: str,
    out: Path,
    *,
    top_k: int = 1,
    model_repository: Path | None = None,
    force: bool = False,
) -> ExportResult:
    """Export the best ``top_k`` configs of each endpoint's study in ``storage`` into ``out``."""
    if not endpoints:
        raise InputError("nothing to export: give --study NAME or --endpoint ROLE=STUDY")
    loaded = {e.study: load_existing_study(storage, e.study) for e in endpoints}
    workload_studies = [name for name, study in loaded.items() if is_workload_study(study)]
    if workload_studies:
        if len(endpoints) > 1 or endpoints[0].role is not None or top_k != 1:
            raise InputError(
                f"study {workload_studies[0]!r} is a workload study: export it alone, with "
                "--study NAME (its winner already says how many endpoints it serves)"
            )
        record = read_workload_study(loaded[workload_studies[0]])
        return export_workload(
            record, out, storage=storage, model_repository=model_repository, force=force
        )
    studies = {name: read_study(study) for name, study in loaded.items()}
    return export_records(
        endpoints, studies, out, storage=storage, top_k=top_k,
        model_repository=model_repository, force=force,
    )  # fmt: skip


def export_records(
    endpoints: Sequence[Endpoint],
    studies: dict[str, StudyRecord],
    out: Path,
    *,
    storage: str,
    top_k: int = 1,
    model_repository: Path | None = None,
    force: bool = False,
) -> ExportResult:
    """Export from studies already read (``studies`` by name; ``storage`` is where they are,
    for the records' provenance)."""
    if top_k < 1:
        raise InputError(f"--top-k: {top_k} is below 1")
    out = Path(out)
    result = ExportResult(out=out)
    picks: list[_Pick] = []
    for endpoint in endpoints:
        picks += _picks(endpoint, studies[endpoint.study], top_k, model_repository, result.warnings)
    names = [p.name for p in picks]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InputError(
            f"two exports would both be named {', '.join(repeated)}; give each study its own "
            "--endpoint ROLE"
        )
    _check_output(out, names, force)

    routing = _routing(picks) if len({p.endpoint.role for p in picks}) > 1 else None
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tritontune-export-", dir=out))
    try:
        for pick in picks:
            staged = staging / pick.name
            record = _write_model(pick, staged, storage, routing)
            _verify(staged, pick.name)
            target = out / pick.name
            if target.exists():
                shutil.rmtree(target)  # only with force: _check_output refused otherwise
            staged.rename(target)
            result.models.append(ExportedModel(pick.name, target, record))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _picks(
    endpoint: Endpoint,
    study: StudyRecord,
    top_k: int,
    model_repository: Path | None,
    warnings: list[str],
) -> list[_Pick]:
    verdict = study.verdict()
    if not verdict:
        if study.playoff is not None and study.feasible:
            raise InputError(
                f"study {endpoint.study!r}: no candidate held its SLO in the playoff (even at "
                "lower loads); nothing is exported (search again with more trials or a looser SLO)"
            )
        raise InputError(f"study {endpoint.study!r} has no config that met its SLO; nothing to export")
    what = "held its SLO in the playoff" if study.playoff is not None else "met the SLO"
    if len(verdict) < top_k:
        warnings.append(
            f"study {endpoint.study!r}: only {len(verdict)} config(s) {what} (--top-k {top_k})"
        )
    source, digests = _measured_source(study.name, study.identity.model, study.context, model_repository)
    picks = []
    for rank, best in enumerate(verdict[:top_k], 1):
        if rank == 1 and best.figures == "screening":
            warnings.append(
                f"study {endpoint.study!r}: the best config (trial {best.result.number}) was not "
                "re-measured by the search (no playoff); its record keeps the screening figures"
            )
        picks.append(
            _Pick(
                endpoint,
                study,
                source,
                best.result,
                rank,
                best.point,
                best.confirmed,
                digests,
                best.playoff,
            )
        )
    return picks


def _measured_source(
    study: str, model: str, context: StudyContext, model_repository: Path | None
) -> tuple[ModelSource, dict[str, str]]:
    """The user's model, checked to be the very files the search measured, and their digests
    (hashed once here: a model can be gigabytes)."""
    repository = model_repository or context.model_repository
    if not repository:
        raise InputError(
            f"study {study!r} does not say where its model repository is "
            "(made by an older tritontune); pass --model-repository DIR"
        )
    source = load_model_source(Path(repository), model)
    measured = context.model_files
    now = source.file_digests()
    if measured is not None:
        changed = sorted(k for k in set(measured) | set(now) if measured.get(k) != now.get(k))
        if changed:
            raise InputError(
                f"{source.directory}: {', '.join(changed)} changed since study "
                f"{study!r} measured it; its figures would not be true of these files "
                "(search again, or point --model-repository at the measured files)"
            )
    return source, now


def _check_output(out: Path, names: list[str], force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise InputError(f"--out {out}: exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise InputError(
            f"--out {out}: directory is not empty; pass --force to replace "
            f"{', '.join(names)} in it (other entries are left alone)"
        )


def _record_for(
    pick: _Pick,
    storage: str,
    routing: dict | None,
    config_sha256: str,
    model_files: dict[str, str],
) -> TuningRecord:
    study = pick.study
    context = study.context
    point = pick.point
    baseline = study.baseline
    playoff = study.playoff
    base_entry = playoff.baseline if playoff else None
    if playoff and base_entry and base_entry.rounds:  # measured like a candidate, in the playoff
        baseline = base_entry.operating_point(playoff.slo_p99_s, playoff.load_mode)
    return TuningRecord(
        model=pick.name,
        slo_p99_ms=study.identity.slo_p99_s * 1e3,
        load=RecordedLoad(
            mode=LoadMode(point.load_mode),
            value=point.load,
            batch_size=context.workload.batch_size,
            dynamic_dim=context.workload.dynamic_dim,
        ),
        operating_point=RecordedPoint(
            throughput=point.throughput,
            p50_ms=point.p50_s * 1e3,
            p99_ms=point.p99_s * 1e3,
            throughput_spread=point.throughput_deviation,
            p99_spread=point.p99_deviation,
            avg_batch_size=point.avg_batch_size,
            gpu=combine(lv.gpu for lv in point.levels if lv.load == point.load),
            confirmed=pick.confirmed,
        ),
        knobs=pick.result.knobs,
        config_sha256=config_sha256,
        model_files=model_files,
        precision=_precision_record(pick),
        **_measured_on(context),
        tuned_from={
            "model": pick.source.name,
            "study": study.name,
            "storage": storage,
            "trial": pick.result.number,
            "rank": pick.rank,
        },
        baseline=None
        if baseline is None
        else {
            "feasible": baseline.feasible,
            "load": baseline.load,
            "throughput": round(baseline.throughput, 3),
            "p99_ms": round(baseline.p99_s * 1e3, 4),
        },
        routing=None if routing is None else {**routing, "endpoint": pick.name},
        playoff=_playoff_record(pick),
    )


def _playoff_record(pick: _Pick) -> dict | None:
    entry, playoff = pick.playoff, pick.study.playoff
    if entry is None or playoff is None:
        return None
    ratio = entry.screening_ratio
    return {
        "rounds": len(entry.rounds),
        "throughput": entry.throughput.to_dict(),
        "p99_ms": entry.p99_s.scaled(1e3).to_dict(4),
        "gain_over_baseline": entry.gain.to_dict(4) if entry.gain else None,
        "screening_throughput": round(entry.screening_throughput, 3),
        "playoff_over_screening": None if ratio is None else round(ratio, 4),
        "loads_tried": list(entry.loads_tried),
        "disturbed_rounds": entry.disturbed_rounds,
        "winner": entry.trial == playoff.winner,
        "tied_with": [t for t in playoff.tied if t != entry.trial],
    }


def _write_model(pick: _Pick, target: Path, storage: str, routing: dict | None) -> TuningRecord:
    source = pick.source
    config = parse_config_text(pick.result.config_pbtxt, source=f"trial {pick.result.number}")
    config.name = pick.name
    files = {rel: source.directory / rel for rel in source.version_files()}
    precision = Precision(pick.result.knobs.get("precision", Precision.FP32))
    if precision != Precision.FP32:
        # The model in the chosen precision: the variant replaces the FP32 weights.
        files.pop(source.model_file.relative_to(source.directory), None)
        variant = Path(source.version) / variant_filename(source.model_file.name, precision)
        files[variant] = _precision_file(pick, precision)
    target.mkdir(parents=True)
    for relative, origin in files.items():
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(origin, destination)
    write_config(config, target / "config.pbtxt")
    input_data = pick.study.context.workload.input_data
    if input_data:
        shutil.copy2(input_data, target / INPUT_DATA_FILE)
    written = {
        str(rel): pick.model_files.get(str(rel)) or file_sha256(target / rel) for rel in sorted(files)
    }  # copies of the source have its digests; only a precision variant is hashed here
    record = _record_for(pick, storage, routing, config_digest(config), written)
    write_record(record, target)
    return record


def _precision_file(pick: _Pick, precision: Precision) -> Path:
    """The variant file the search measured: rebuilt by the recipe the search chose, from the same
    inputs (a cache hit, unless the cache was cleared; the build is deterministic)."""
    source = pick.source
    check = pick.study.precisions.get(str(precision), {})
    input_data = pick.study.context.workload.input_data
    calibration_data = check.get("calibration_data")
    data = precision_data(
        source.base_config,
        Path(input_data) if input_data else None,
        calibration_data=Path(calibration_data) if calibration_data else None,
    )
    recipe = Recipe.from_dict(check["recipe"]) if check.get("recipe") else precision
    try:
        return build_variant(source.model_file, recipe, calibration=data.calibration)
    except ConversionError as err:
        raise InputError(
            f"precision {precision} of {source.name!r} could not be rebuilt: {err}"
        ) from None


def _precision_record(pick: _Pick) -> dict | None:
    """The precision served, how it was built and its accuracy against FP32, as the search
    checked it."""
    precision = pick.result.knobs.get("precision")
    if precision is None:
        return None
    check = pick.study.precisions.get(str(precision), {})
    return {
        "precision": precision,
        "recipe": check.get("recipe_label"),
        "accuracy": check.get("accuracy"),
        "data": check.get("data"),
    }


def export_workload(
    study: WorkloadStudyRecord,
    out: Path,
    *,
    storage: str,
    model_repository: Path | None = None,
    force: bool = False,
) -> ExportResult:
    """Export the winner of a workload study's final rounds (see the module docstring)."""
    if not study.final or not study.final.get("winner"):
        raise InputError(
            f"study {study.name!r} has no final rounds yet (the search was stopped before them); "
            "run the same search again to finish it"
        )
    winner = Finalist.from_dict(study.final["winner"])
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
    baseline = next(
        (Finalist.from_dict(f) for f in study.final.get("finalists", []) if f.get("trial") is None),
        None,
    )
    source, digests = _measured_source(study.name, study.model, study.context, model_repository)
    traffic = Traffic.from_dict(study.workload, where=f"study {study.name!r}")
    out = Path(out)
    names = list(winner.models)
    _check_output(out, names, force)
    result = ExportResult(out=out)
    out.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".tritontune-export-", dir=out))
    try:
        for name, text in winner.models.items():
            staged = staging / name
            config = parse_config_text(text, source=f"study {study.name!r}, model {name}")
            config.name = name
            _copy_model_files(source, staged)
            write_config(config, staged / "config.pbtxt")
            data_files = {}
            for c in traffic.classes:
                if c.request.input_data is not None:
                    data_files[c.name] = f"tritontune.input_data.{c.name}.json"
                    shutil.copy2(c.request.input_data, staged / data_files[c.name])
            (staged / WORKLOAD_FILE).write_text(
                yaml.safe_dump(traffic.to_file(data_files), sort_keys=False), encoding="utf-8"
            )
            record = WorkloadRecord(
                model=name,
                workload_file=WORKLOAD_FILE,
                layout=winner.layout,
                routes=dict(winner.routes),
                capacity_rounds=winner.rates,
                baseline_rounds=baseline.rates if baseline else (),
                knobs=_endpoint_knobs(winner, name),
                config_sha256=config_digest(config),
                model_files=dict(digests),
                **_measured_on(study.context),
                tuned_from={
                    "model": source.name,
                    "study": study.name,
                    "storage": storage,
                    "trial": winner.trial,
                },
            )
            write_record(record, staged)
            _verify(staged, name)
            target = out / name
            if target.exists():
                shutil.rmtree(target)  # only with force: _check_output refused otherwise
            staged.rename(target)
            result.models.append(ExportedModel(name, target, record))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _measured_on(context: StudyContext) -> dict[str, Any]:
    """A record's provenance fields, from the study's context."""
    return {
        "triton_version": context.server_version,
        "triton_launch": context.launch,
        "served_via_python_backend": context.served_via_python_backend,
        "hardware": HostInfo.from_dict(context.host),
    }


def _endpoint_knobs(winner: Finalist, model: str) -> dict:
    """The knobs of one model of the winner (an endpoint's own, for the endpoint layout)."""
    if winner.layout == Layout.ENDPOINTS:
        role = next(c for c, m in winner.routes.items() if m == model)
        return dict(winner.knobs.get(role, {}))
    return dict(winner.knobs)


def _copy_model_files(source: ModelSource, target: Path) -> None:
    for relative in source.version_files():
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source.directory / relative, destination)


def _verify(model_dir: Path, name: str) -> None:
    """Read the written model back the way ``check`` and Triton will."""
    load_model_source(model_dir.parent, name)
    read_record(model_dir / RECORD_FILE)


def _routing(picks: list[_Pick]) -> dict:
    """Which traffic goes to which endpoint: tightest SLO for interactive traffic."""
    firsts = sorted((p for p in picks if p.rank == 1), key=lambda p: p.study.identity.slo_p99_s)
    endpoints = {}
    lines = []
    for pick in firsts:
        slo = pick.study.identity.slo_p99_s
        endpoints[pick.name] = {
            "slo_p99_ms": slo * 1e3,
            "throughput": round(pick.point.throughput, 1),
            "load": pick.point.load,
        }
        lines.append(
            f"{pick.name} keeps p99 <= {format_duration(slo)} up to "
            f"{pick.point.throughput:,.0f} infer/s per server"
        )
    tight, loose = firsts[0].name, firsts[-1].name
    note = (
        "; ".join(lines)
        + f". Route latency-sensitive (user-facing) requests to {tight} and bulk or offline "
        f"scoring to {loose}; all endpoints serve the same model weights."
    )
    return {"endpoints": endpoints, "note": note}
