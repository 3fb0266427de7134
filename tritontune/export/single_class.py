"""Export of a single-class study: its verdict's best configs, one model directory each.

Each exported model directory holds the tuned ``config.pbtxt`` (the user's backend kept), a copy
of the model files that were measured (the precision variant's file in place of the FP32 weights
where a variant won), and a tuning record (:mod:`tritontune.tuning_record`) saying what the config was
measured to do. Everything comes from the study: nothing is re-measured here.

One model can be exported as several *endpoints*, e.g. ``mlp_interactive`` from a tight-SLO study
and ``mlp_batch`` from a loose-SLO one; their records then carry a routing note that says which
traffic goes where.

A study of a pipeline (a Triton ensemble) is a single-class study of the ensemble: its winner is
picked and recorded as here, and written as :mod:`tritontune.export.pipeline` says (the ensemble
and every composing model, one record).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from tritontune.config.model_config import (
    config_digest,
    parse_config_text,
    write_config,
)
from tritontune.config.repository import ModelSource, file_sha256
from tritontune.config.variant import Precision
from tritontune.errors import InputError
from tritontune.export import pipeline as pipelines
from tritontune.export.staging import (
    ExportResult,
    copy_files,
    measured_on,
    measured_source,
    model_files,
    precision_summary,
    precision_variant,
    write_models,
)
from tritontune.measure.gpu_metrics import combine
from tritontune.measure.loadgen import LoadMode
from tritontune.study.figures import OperatingPoint, PlayoffEntry
from tritontune.study.records import StudyRecord, TrialResult
from tritontune.study.storage import storage_label
from tritontune.study.verdict import behind_baseline, ranked
from tritontune.tuning_record import (
    INPUT_DATA_FILE,
    PipelineRecord,
    RecordedLoad,
    RecordedPoint,
    TuningRecord,
    write_record,
)
from tritontune.units import format_duration


@dataclass(frozen=True)
class Endpoint:
    """One study to export; ``role`` (e.g. ``interactive``) is appended to the model's name."""

    study: str
    role: str | None = None


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
    pipeline: pipelines.MeasuredPipeline | None = None
    """The pipeline, when the study's model is an ensemble (its source is then the ensemble)."""

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
    routing = _routing(picks) if len({p.endpoint.role for p in picks}) > 1 else None
    writers: dict[str, Callable[[Path], TuningRecord | None]] = {}
    for pick in picks:
        composing: dict[str, pipelines.ComposingExport] = {}
        if pick.pipeline is not None:
            pipelines.refuse_options(
                pick.study.name, pick.source.name,
                endpoints=len(endpoints), role=pick.endpoint.role, top_k=top_k,
            )  # fmt: skip
            composing = pipelines.composing_exports(pick.pipeline, pick.study, pick.result)
        writers[pick.name] = partial(_write_model, pick, composing, storage, routing)
        for model, export in composing.items():  # a pipeline's models, beside its entry
            writers[model] = partial(pipelines.write_composing, export)
    return write_models(out, list(writers), force, lambda name, staged: writers[name](staged), result)


def _picks(
    endpoint: Endpoint,
    study: StudyRecord,
    top_k: int,
    model_repository: Path | None,
    warnings: list[str],
) -> list[_Pick]:
    verdict = ranked(study)
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
    source, digests = measured_source(study.name, study.identity.model, study.context, model_repository)
    pipeline = pipelines.measured_pipeline(study, source, warnings)
    picks = []
    for rank, best in enumerate(verdict[:top_k], 1):
        behind = behind_baseline(best.playoff.gain) if best.playoff is not None else None
        if rank == 1 and behind is not None:
            number = best.result.number
            warnings.append(f"study {endpoint.study!r}: the winner (trial {number}): {behind}")
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
                pipeline,
            )
        )
    return picks


def _record_for(
    pick: _Pick,
    storage: str,
    routing: dict | None,
    config_sha256: str,
    model_files: dict[str, str],
    pipeline: PipelineRecord | None = None,
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
            batch_size=context.request_shape.batch_size,
            dynamic_dim=context.request_shape.dynamic_dim,
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
        **measured_on(context),
        tuned_from={
            "model": pick.source.name,
            "study": study.name,
            "storage": storage_label(storage),  # never its password
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
        pipeline=pipeline,
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
        "versus_winner": entry.versus_winner.to_dict() if entry.versus_winner else None,
        "order_uncertain": entry.trial in playoff.uncertain,
    }


def _write_model(
    pick: _Pick,
    composing: dict[str, pipelines.ComposingExport],
    storage: str,
    routing: dict | None,
    target: Path,
) -> TuningRecord:
    """The model's directory; for a pipeline, the ensemble's (``composing``: its models' configs,
    written beside it by :func:`pipelines.write_composing`, listed in its record)."""
    source = pick.source
    files = model_files(source)
    precision = Precision(pick.result.knobs.get("precision", Precision.FP32))
    if precision != Precision.FP32:
        # The model in the chosen precision: the variant replaces the FP32 weights.
        files.pop(source.model_file.relative_to(source.directory), None)
        check = pick.study.precision_check(precision)
        input_data = pick.study.context.request_shape.input_data
        relative, files[relative] = precision_variant(source, precision, check, input_data)
    copy_files(files, target)
    if pick.pipeline is None:
        config = parse_config_text(pick.result.config_pbtxt, source=f"trial {pick.result.number}")
        config.name = pick.name
        write_config(config, target / "config.pbtxt")
    elif pick.pipeline.pipeline.bls:  # a BLS model: tuned with the models it calls
        config = pipelines.entry_config(pick.pipeline, pick.result)
        write_config(config, target / "config.pbtxt")
    else:
        config = pipelines.write_ensemble(source, target)
    input_data = pick.study.context.request_shape.input_data
    if input_data:
        shutil.copy2(input_data, target / INPUT_DATA_FILE)
    written = {
        str(rel): pick.model_files.get(str(rel)) or file_sha256(target / rel) for rel in sorted(files)
    }  # copies of the source have its digests; only a precision variant is hashed here
    pipeline = None
    if pick.pipeline is not None:
        pipeline = pipelines.pipeline_record(pick.pipeline, composing, pick.result, pick.point)
    record = _record_for(pick, storage, routing, config_digest(config), written, pipeline)
    write_record(record, target)
    return record


def _precision_record(pick: _Pick) -> dict | None:
    """The precision served, how it was built and its accuracy against FP32."""
    precision = pick.result.knobs.get("precision")
    if precision is None:
        return None
    return precision_summary(precision, pick.study.precision_check(str(precision)))


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
