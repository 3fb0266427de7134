"""``--csv FILE`` of ``profile``, ``search`` and ``check``: one row per measured load level.

The layout follows Triton Model Analyzer's ``metrics-model-inference.csv``, so a sheet or script
made for one reads the other: the columns with Model Analyzer's header mean what its column means,
and tritontune's own come after them. A figure a measurement did not keep is empty (a study keeps
p50/p95/p99 and the mean of each level, not p90 nor Triton's split). Every column:
``docs/reference/csv.md``.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tritontune.check.gate import CheckReport
from tritontune.config.model_config import parse_config_text
from tritontune.config.variant import describe_config
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, meets_slo
from tritontune.profile import ProfileResult
from tritontune.study.records import StudyRecord

BACKEND_PARAMETER = "backend_parameter/"
"""Model Analyzer's header prefix for a backend parameter's column."""

COLUMNS = (
    "Model",
    "Measured",
    "Batch",
    "Concurrency",
    "Request Rate",
    "Model Config Path",
    "Instance Group",
    "Max Batch Size",
    "Dynamic Batching",
    "Max Queue Delay (us)",
    "Preferred Batch Sizes",
    "Precision",
    "Satisfies Constraints",
    "Throughput (infer/sec)",
    "p50 Latency (ms)",
    "p90 Latency (ms)",
    "p95 Latency (ms)",
    "p99 Latency (ms)",
    "Avg Latency (ms)",
    "Server Queue time (ms)",
    "Server Compute time (ms)",
    "Avg Server Batch",
    "Errors",
    "Stable",
    "Disturbance",
)
"""The fixed columns, in order; ``backend_parameter/KEY`` columns follow them."""


@dataclass(frozen=True)
class LevelRow:
    """One measured load level, whichever command measured it. Times in seconds."""

    model: str
    measured: str
    batch: int
    load: LoadSpec
    knobs: Mapping[str, Any]
    """The config's knobs (:func:`tritontune.config.variant.describe_config`)."""
    throughput: float
    p99_s: float
    errors: int
    stable: bool
    satisfies: bool | None
    """None where there was no SLO to satisfy."""
    p50_s: float | None = None
    p90_s: float | None = None
    p95_s: float | None = None
    mean_s: float | None = None
    queue_s: float | None = None
    compute_s: float | None = None
    avg_batch: float | None = None
    disturbance: str | None = None
    config_path: str | None = None
    parameters: Mapping[str, str] = field(default_factory=dict)

    def cells(self) -> dict[str, str]:
        knobs = self.knobs
        closed = self.load.mode == LoadMode.CONCURRENCY
        batching = knobs.get("dynamic_batching")
        cells = {
            "Model": self.model,
            "Measured": self.measured,
            "Batch": str(self.batch),
            "Concurrency": f"{int(self.load.value)}" if closed else "",
            "Request Rate": "" if closed else f"{self.load.value:g}",
            "Model Config Path": self.config_path or "",
            "Instance Group": _instance_group(knobs.get("instance_group")),
            "Max Batch Size": _text(knobs.get("max_batch_size")),
            "Dynamic Batching": "" if batching is None else ("Enabled" if batching else "Disabled"),
            "Max Queue Delay (us)": _text(knobs.get("max_queue_delay_us")),
            "Preferred Batch Sizes": " ".join(map(str, knobs.get("preferred_batch_sizes") or ())),
            "Precision": str(knobs.get("precision", "fp32")),
            "Satisfies Constraints": _yes_no(self.satisfies),
            "Throughput (infer/sec)": f"{self.throughput:.3f}",
            "p50 Latency (ms)": _ms(self.p50_s),
            "p90 Latency (ms)": _ms(self.p90_s),
            "p95 Latency (ms)": _ms(self.p95_s),
            "p99 Latency (ms)": _ms(self.p99_s),
            "Avg Latency (ms)": _ms(self.mean_s),
            "Server Queue time (ms)": _ms(self.queue_s),
            "Server Compute time (ms)": _ms(self.compute_s),
            "Avg Server Batch": "" if self.avg_batch is None else f"{self.avg_batch:.3f}",
            "Errors": str(self.errors),
            "Stable": _yes_no(self.stable),
            "Disturbance": self.disturbance or "",
        }
        for key, value in (knobs.get("parameters") or {}).items():
            cells[BACKEND_PARAMETER + key] = str(value)
        return cells


def write_inference_csv(rows: Sequence[LevelRow], path: Path, *, option: str = "--csv") -> None:
    """Write ``rows`` to ``path``: the fixed columns, then one per backend parameter seen."""
    table = [row.cells() for row in rows]
    extra = sorted({key for cells in table for key in cells if key.startswith(BACKEND_PARAMETER)})
    try:
        with open(path, "w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=[*COLUMNS, *extra], restval="")
            writer.writeheader()
            writer.writerows(table)
    except OSError as err:
        raise InputError(f"{option}: cannot write {path}: {err.strerror or err}") from None


# -- rows of each command ----------------------------------------------------------------------


def profile_rows(result: ProfileResult) -> list[LevelRow]:
    """Each level ``profile`` measured (no SLO: ``Satisfies Constraints`` stays empty)."""
    return [
        _measurement_row(result.model, "profile", m, result.knobs, None) for m in result.measurements
    ]


def search_rows(study: StudyRecord) -> list[LevelRow]:
    """Every level the study holds: the baseline's, each measured trial's (its screening levels,
    in trial order: re-proposals told again without measuring are left out), then the
    playoff's rounds."""
    model, mode = study.identity.model, study.identity.load_mode
    batch = study.context.request_shape.batch_size
    baseline_knobs = (
        describe_config(parse_config_text(study.baseline_config_pbtxt, source="baseline config"))
        if study.baseline_config_pbtxt
        else {}
    )
    measured: list[tuple[str, Mapping[str, Any], Iterable[Any]]] = []
    if study.baseline is not None:
        measured.append(("baseline", baseline_knobs, study.baseline.levels))
    knobs_of: dict[int | None, Mapping[str, Any]] = {None: baseline_knobs}
    for trial in study.trials:
        knobs_of[trial.number] = trial.knobs
        if trial.operating_point is not None and trial.duplicate_of is None:
            measured.append((f"trial {trial.number}", trial.knobs, trial.operating_point.levels))
    rows = [
        LevelRow(
            model=model,
            measured=label,
            batch=batch,
            load=_spec(mode, level.load),
            knobs=knobs,
            throughput=level.throughput,
            p50_s=level.p50_s,
            p95_s=level.p95_s,
            p99_s=level.p99_s,
            mean_s=level.mean_s,
            errors=level.errors,
            stable=level.stable,
            satisfies=level.meets_slo,
            disturbance=level.disturbance,
        )
        for label, knobs, levels in measured
        for level in levels
    ]
    if study.playoff is not None:
        for entry in study.playoff.entries:
            for number, figure in enumerate(entry.rounds, 1):
                rows.append(
                    LevelRow(
                        model=model,
                        measured=f"playoff round {number} ({entry.label})",
                        batch=batch,
                        load=_spec(mode, entry.load),
                        knobs=knobs_of.get(entry.trial, {}),
                        throughput=figure.throughput,
                        p50_s=figure.p50_s,
                        p99_s=figure.p99_s,
                        mean_s=figure.mean_s,
                        errors=figure.errors,
                        stable=figure.stable,
                        satisfies=figure.meets_slo,
                        avg_batch=figure.avg_batch_size,
                        disturbance=figure.disturbance,
                    )
                )
    return rows


def check_rows(report: CheckReport) -> list[LevelRow]:
    """Each round ``check`` measured, per model. A round satisfies its constraints by the
    search's rule for a level, against the record's SLO (the throughput rule compares the
    rounds' median with the record: it is no constraint of one round)."""
    rows = []
    for check in report.models:
        if check.record is None:
            continue
        path = str(report.repository / check.name)
        slo = check.record.slo_p99_s
        for number, m in enumerate(check.measurements, 1):
            label, satisfies = f"check round {number}", meets_slo(m, slo)
            rows.append(_measurement_row(check.name, label, m, check.knobs, satisfies, path))
    return rows


def _measurement_row(
    model: str,
    measured: str,
    m: Measurement,
    knobs: Mapping[str, Any],
    satisfies: bool | None,
    config_path: str | None = None,
) -> LevelRow:
    lat, server = m.latency, m.server
    has_latency = lat.count > 0
    return LevelRow(
        model=model,
        measured=measured,
        batch=m.batch_size,
        load=m.load,
        knobs=knobs,
        throughput=m.throughput,
        p50_s=lat.p50 if has_latency else None,
        p90_s=lat.p90 if has_latency else None,
        p95_s=lat.p95 if has_latency else None,
        p99_s=lat.p99 if has_latency else float("nan"),
        mean_s=lat.mean if has_latency else None,
        queue_s=server.avg_queue_s if server else None,
        compute_s=server.avg_compute_s if server else None,
        avg_batch=server.avg_batch_size if server else None,
        errors=m.error_count,
        stable=m.stable,
        satisfies=satisfies,
        disturbance=m.remarks(),
        config_path=config_path,
    )


def _spec(mode: LoadMode, value: float) -> LoadSpec:
    return LoadSpec(LoadMode(mode), float(value))


def _instance_group(groups: Any) -> str:
    """Model Analyzer's form: ``2:CPU``, several groups joined by `` + ``."""
    if not groups:
        return ""
    return " + ".join(
        f"{g.get('count', 1)}:{str(g.get('kind', 'KIND_AUTO')).removeprefix('KIND_')}" for g in groups
    )


def _ms(seconds: float | None) -> str:
    if seconds is None or seconds != seconds:  # None or NaN: not measured
        return ""
    return f"{seconds * 1e3:.3f}"


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _yes_no(value: bool | None) -> str:
    return "" if value is None else ("Yes" if value else "No")
