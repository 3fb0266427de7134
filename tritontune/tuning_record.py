"""The tuning record: ``tritontune.lock.yaml`` beside each exported config.

It says what a tuned config was measured to do and under which conditions: the SLO, the load
(mode, level, request shape), the operating point with its spread over windows, the knobs, digests
of the config and model files, the Triton and tritontune versions, the hardware and the date.
``tritontune export`` writes it from a study; ``tritontune check`` re-measures against it.

A pipeline (a Triton ensemble) is tuned, measured and checked end to end, so it has one record,
beside the ensemble's config: its figures are the ensemble's, and its ``pipeline`` section lists
every composing model with its knobs and the digests of its config and files (the composing
models' directories hold no record of their own). Such a record is ``record_version`` 2, which a
tritontune that does not know the section refuses (it would check the ensemble without knowing
what its models should be); a single model's record stays version 1.

Records are plain YAML meant to be read (and, for the SLO or the load, edited) by people, so
reading one validates it against a JSON schema and names the file and the field that is wrong.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tritontune import __version__
from tritontune.errors import InputError
from tritontune.hostinfo import HostInfo
from tritontune.measure.arrivals import Arrival
from tritontune.measure.gpu_metrics import NO_GPUS, GpuFigures, gpu_from_list, gpu_to_list
from tritontune.measure.loadgen import LoadMode, LoadSpec
from tritontune.measure.traffic import Layout
from tritontune.yamlfile import read_yaml

RECORD_FILE = "tritontune.lock.yaml"
#: The workload a model was tuned for (``search --workload``), written beside its record.
WORKLOAD_FILE = "tritontune.workload.yaml"
#: A copy of the request data a study was measured with, so ``check`` sends the same requests.
INPUT_DATA_FILE = "tritontune.input_data.json"
RECORD_VERSION = 1
"""The version of a single model's record and of a workload record."""
PIPELINE_RECORD_VERSION = 2
"""The version of a record with a ``pipeline`` section (see the module docstring)."""

_NUMBER = {"type": "number", "minimum": 0}
_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "record_version",
        "model",
        "slo",
        "load",
        "operating_point",
        "knobs",
        "config_sha256",
        "triton",
        "tritontune_version",
        "hardware",
        "date",
    ],
    "properties": {
        "record_version": {"enum": [RECORD_VERSION, PIPELINE_RECORD_VERSION]},
        "model": {"type": "string", "minLength": 1},
        "tuned_from": {"type": "object"},
        "slo": {
            "type": "object",
            "required": ["p99_ms"],
            "properties": {"p99_ms": {"type": "number", "exclusiveMinimum": 0}},
        },
        "load": {
            "type": "object",
            "required": ["mode", "value"],
            "properties": {
                "mode": {"enum": ["concurrency", "rate"]},
                "value": {"type": "number", "exclusiveMinimum": 0},
                "arrival": {"enum": ["poisson", "constant"]},
                "batch_size": {"type": "integer", "minimum": 1},
                "dynamic_dim": {"type": "integer", "minimum": 1},
            },
        },
        "operating_point": {
            "type": "object",
            "required": ["throughput", "p50_ms", "p99_ms"],
            "properties": {
                "confirmed": {"type": "boolean"},
                "throughput": _NUMBER,
                "throughput_spread": _NUMBER,
                "p50_ms": _NUMBER,
                "p99_ms": _NUMBER,
                "p99_spread": _NUMBER,
                "avg_batch_size": {"type": ["number", "null"]},
                "gpu": {
                    "oneOf": [
                        {"type": "string"},
                        {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["gpu_uuid"],
                                "properties": {
                                    "gpu_uuid": {"type": "string"},
                                    "samples": {"type": "integer"},
                                    "utilization_mean": {"type": ["number", "null"]},
                                    "memory_used_max_bytes": {"type": ["number", "null"]},
                                    "memory_total_bytes": {"type": ["number", "null"]},
                                    "power_mean_w": {"type": ["number", "null"]},
                                },
                            },
                        },
                    ]
                },
            },
        },
        "baseline": {"type": ["object", "null"]},
        "playoff": {"type": ["object", "null"]},
        "knobs": {"type": "object"},
        "precision": {"type": ["object", "null"]},
        "config_sha256": {"type": "string"},
        "model_files": {"type": "object", "additionalProperties": {"type": "string"}},
        "triton": {
            "type": "object",
            "required": ["version"],
            "properties": {"version": {"type": "string"}},
        },
        "tritontune_version": {"type": "string"},
        "hardware": {
            "type": "object",
            "required": ["cpu_model", "cpu_count"],
            "properties": {
                "cpu_model": {"type": "string"},
                "cpu_count": {"type": "integer"},
                "gpus": {"type": "array", "items": {"type": "string"}},
                "gpu_driver": {"type": "string"},
            },
        },
        "date": {"type": "string"},
        "routing": {"type": ["object", "null"]},
        "pipeline": {
            "type": "object",
            "required": ["models"],
            "properties": {
                "bls": {"type": "boolean"},
                "models": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["model", "knobs", "config_sha256"],
                        "properties": {
                            "model": {"type": "string", "minLength": 1},
                            "knobs": {"type": "object"},
                            "config_sha256": {"type": "string"},
                            "model_files": {
                                "type": "object",
                                "additionalProperties": {"type": "string"},
                            },
                        },
                    },
                },
                "steps": {
                    "type": ["object", "null"],
                    "required": ["figures", "load", "models"],
                    "properties": {
                        "figures": {"enum": ["operating point", "screening"]},
                        "load": _NUMBER,
                        "models": {
                            "type": "array",
                            "items": {
                                "type": "object",
                                "required": ["model", "queue_ms", "compute_ms", "avg_batch_size"],
                                "properties": {
                                    "model": {"type": "string"},
                                    "queue_ms": _NUMBER,
                                    "compute_ms": _NUMBER,
                                    "avg_batch_size": _NUMBER,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
    # A pipeline's record is version 2: the version a reader must know to read the section.
    "if": {"required": ["pipeline"]},
    "then": {"properties": {"record_version": {"const": PIPELINE_RECORD_VERSION}}},
}


@dataclass(frozen=True)
class RecordedLoad:
    """The load a tuned config was measured at, and what each request carried."""

    mode: LoadMode
    value: float
    arrival: Arrival = Arrival.POISSON
    batch_size: int = 1
    dynamic_dim: int = 16

    def spec(self) -> LoadSpec:
        """The load to apply again (``check``)."""
        if self.mode == LoadMode.CONCURRENCY:
            return LoadSpec.concurrency(int(self.value))
        return LoadSpec.rate(self.value, self.arrival)


@dataclass(frozen=True)
class RecordedPoint:
    """The operating point as measured by the search (and confirmed, for the winner)."""

    throughput: float
    p50_ms: float
    p99_ms: float
    throughput_spread: float = 0.0
    """Largest relative distance of a window's throughput from their mean."""
    p99_spread: float = 0.0
    avg_batch_size: float | None = None
    gpu: tuple[GpuFigures, ...] | None = None
    """Per-GPU figures at the operating load (mean utilization, max memory, mean power, over
    the playoff's rounds there); None: no GPU metrics (the record says so in words)."""
    confirmed: bool = False
    """True when re-measured and held: the playoff's medians at a load that held there (records
    written before the playoff: re-measured with longer windows, every window under the SLO)."""


@dataclass(frozen=True)
class RecordedStep:
    """Where an end-to-end request spent its time in one composing model of a pipeline (Triton's
    statistics for that model over the same windows): what ``check`` shows beside its own."""

    model: str
    queue_ms: float
    compute_ms: float
    avg_batch_size: float


@dataclass(frozen=True)
class ComposingModel:
    """One composing model of an exported pipeline, as the ensemble's record lists it: what
    ``check`` compares the model's directory with (its own record, were it a single model)."""

    model: str
    knobs: dict
    config_sha256: str
    model_files: dict[str, str] = field(default_factory=dict)
    """Its files relative to its model directory -> sha256."""
    precision: dict | None = None
    """A precision variant served in place of its weights: how it was built, its accuracy
    against FP32 and what that was judged on (as the single-model record's ``precision``)."""


@dataclass(frozen=True)
class PipelineRecord:
    """The ``pipeline`` section of an ensemble's record (see the module docstring)."""

    models: tuple[ComposingModel, ...]
    """In the pipeline's order (the order its steps run)."""
    steps: tuple[RecordedStep, ...] = ()
    """Each composing model's share of a request's time, as the search measured it; empty when
    it did not (the record then says nothing of the steps)."""
    steps_load: float = 0.0
    """The load the step figures were measured at."""
    steps_figures: str = "operating point"
    """``operating point``: at the record's operating point (a playoff winner's: each figure the
    median of its rounds); ``screening``: at the search's first measurement of the config (a
    study whose playoff kept no per-step figures), at ``steps_load``."""
    bls: bool = False
    """The model is a BLS model whose code calls :attr:`models` (not an ensemble): its own
    config is tuned too, and ``check`` must be told which models it calls, as the search was."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(m.model for m in self.models)

    def to_dict(self) -> dict:
        steps = None
        if self.steps:
            steps = {
                "figures": self.steps_figures,
                "load": self.steps_load,
                "models": [
                    {
                        "model": s.model,
                        "queue_ms": round(s.queue_ms, 4),
                        "compute_ms": round(s.compute_ms, 4),
                        "avg_batch_size": round(s.avg_batch_size, 3),
                    }
                    for s in self.steps
                ],
            }
        return {
            **({"bls": True} if self.bls else {}),
            "models": [
                {
                    "model": m.model,
                    "knobs": m.knobs,
                    "config_sha256": m.config_sha256,
                    "model_files": dict(m.model_files),
                    **({"precision": m.precision} if m.precision else {}),
                }
                for m in self.models
            ],
            "steps": steps,
        }

    @classmethod
    def from_dict(cls, data: dict) -> PipelineRecord:
        steps = data.get("steps") or {}
        return cls(
            models=tuple(
                ComposingModel(
                    model=m["model"],
                    knobs=dict(m["knobs"]),
                    config_sha256=m["config_sha256"],
                    model_files=dict(m.get("model_files") or {}),
                    precision=m.get("precision"),
                )
                for m in data["models"]
            ),
            steps=tuple(
                RecordedStep(
                    str(s["model"]),
                    float(s["queue_ms"]),
                    float(s["compute_ms"]),
                    float(s["avg_batch_size"]),
                )
                for s in steps.get("models", ())
            ),
            steps_load=float(steps.get("load", 0.0)),
            steps_figures=str(steps.get("figures", "operating point")),
            bls=bool(data.get("bls", False)),
        )


@dataclass(frozen=True)
class TuningRecord:
    """One exported model's record (see the module docstring)."""

    model: str
    slo_p99_ms: float
    load: RecordedLoad
    operating_point: RecordedPoint
    knobs: dict
    config_sha256: str
    triton_version: str
    hardware: HostInfo
    tuned_from: dict = field(default_factory=dict)
    """Where the result came from: source model, study, storage, trial, rank."""
    baseline: dict | None = None
    model_files: dict[str, str] = field(default_factory=dict)
    """Model files relative to the model directory -> sha256."""
    precision: dict | None = None
    triton_launch: str = "local"
    served_via_python_backend: bool = False
    tritontune_version: str = __version__
    date: str = field(
        default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    )
    routing: dict | None = None
    playoff: dict | None = None
    """The playoff's figures: rounds, intervals (median, low, high) of throughput, p99 and the
    gain over the baseline within the same rounds, the screening figure, disturbed rounds."""
    pipeline: PipelineRecord | None = None
    """For an ensemble: its composing models (the record covers them all); None for one model."""

    @property
    def slo_p99_s(self) -> float:
        return self.slo_p99_ms / 1e3

    @property
    def reference_throughput(self) -> float:
        """What ``check`` holds the model to: the lowest playoff round's throughput (a clean
        re-measurement lands in the playoff's range; its median would fail one in two), else the
        recorded figure."""
        low = (self.playoff or {}).get("throughput", {}).get("low")
        if low is None or low <= 0:
            return self.operating_point.throughput
        return min(float(low), self.operating_point.throughput)

    def to_dict(self) -> dict:
        point = self.operating_point
        return {
            "record_version": RECORD_VERSION if self.pipeline is None else PIPELINE_RECORD_VERSION,
            "model": self.model,
            "tuned_from": self.tuned_from,
            "slo": {"p99_ms": self.slo_p99_ms},
            "load": {
                "mode": self.load.mode.value,
                "value": self.load.value,
                **({"arrival": self.load.arrival.value} if self.load.mode == LoadMode.RATE else {}),
                "batch_size": self.load.batch_size,
                "dynamic_dim": self.load.dynamic_dim,
            },
            "operating_point": {
                "confirmed": point.confirmed,
                "throughput": round(point.throughput, 3),
                "throughput_spread": round(point.throughput_spread, 4),
                "p50_ms": round(point.p50_ms, 4),
                "p99_ms": round(point.p99_ms, 4),
                "p99_spread": round(point.p99_spread, 4),
                "avg_batch_size": None
                if point.avg_batch_size is None
                else round(point.avg_batch_size, 3),
                "gpu": gpu_to_list(point.gpu) if point.gpu else NO_GPUS,
            },
            "baseline": self.baseline,
            "playoff": self.playoff,
            "knobs": self.knobs,
            "precision": self.precision,
            "config_sha256": self.config_sha256,
            "model_files": dict(self.model_files),
            **_provenance(self),
            "routing": self.routing,
            # Only in a pipeline's record: a single model's stays as version 1 wrote it.
            **({"pipeline": self.pipeline.to_dict()} if self.pipeline else {}),
        }

    @classmethod
    def from_dict(cls, data: dict) -> TuningRecord:
        load, point = data["load"], data["operating_point"]
        return cls(
            model=data["model"],
            slo_p99_ms=float(data["slo"]["p99_ms"]),
            load=RecordedLoad(
                mode=LoadMode(load["mode"]),
                value=float(load["value"]),
                arrival=Arrival(load.get("arrival", Arrival.POISSON.value)),
                batch_size=int(load.get("batch_size", 1)),
                dynamic_dim=int(load.get("dynamic_dim", 16)),
            ),
            operating_point=RecordedPoint(
                throughput=float(point["throughput"]),
                p50_ms=float(point["p50_ms"]),
                p99_ms=float(point["p99_ms"]),
                throughput_spread=float(point.get("throughput_spread", 0.0)),
                p99_spread=float(point.get("p99_spread", 0.0)),
                avg_batch_size=point.get("avg_batch_size"),
                gpu=gpu_from_list(point["gpu"]) if isinstance(point.get("gpu"), list) else None,
                confirmed=bool(point.get("confirmed", False)),
            ),
            **_provenance_from(data),
            baseline=data.get("baseline"),
            routing=data.get("routing"),
            playoff=data.get("playoff"),
            pipeline=PipelineRecord.from_dict(data["pipeline"]) if data.get("pipeline") else None,
        )


def _provenance(record: TuningRecord | WorkloadRecord) -> dict:
    """Where and with what a record's figures were measured (the same in both kinds)."""
    return {
        "triton": {
            "version": record.triton_version,
            "launch": record.triton_launch,
            "served_via_python_backend": record.served_via_python_backend,
        },
        "tritontune_version": record.tritontune_version,
        "hardware": record.hardware.to_dict(),
        "date": record.date,
    }


def _provenance_from(data: dict) -> dict[str, Any]:
    """The fields both kinds of record read alike: the config and files, and :func:`_provenance`."""
    triton = data["triton"]
    return {
        "knobs": dict(data["knobs"]),
        "config_sha256": data["config_sha256"],
        "model_files": dict(data.get("model_files") or {}),
        "precision": data.get("precision"),
        "tuned_from": dict(data.get("tuned_from") or {}),
        "triton_version": triton["version"],
        "triton_launch": triton.get("launch", "local"),
        "served_via_python_backend": bool(triton.get("served_via_python_backend", False)),
        "hardware": HostInfo.from_dict(data["hardware"]),
        "tritontune_version": data["tritontune_version"],
        "date": data["date"],
    }


_WORKLOAD_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": [
        "record_version",
        "model",
        "workload",
        "knobs",
        "config_sha256",
        "triton",
        "tritontune_version",
        "hardware",
        "date",
    ],
    "properties": {
        "record_version": {"const": RECORD_VERSION},
        **{k: _SCHEMA["properties"][k] for k in ("model", "tuned_from", "knobs", "precision")},
        **{k: _SCHEMA["properties"][k] for k in ("config_sha256", "model_files", "triton")},
        **{k: _SCHEMA["properties"][k] for k in ("tritontune_version", "hardware", "date")},
        "workload": {
            "type": "object",
            "required": ["file", "layout", "routes", "capacity"],
            "properties": {
                "file": {"type": "string", "minLength": 1},
                "layout": {"enum": ["shared", "endpoints"]},
                "routes": {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": {"type": "string", "minLength": 1},
                },
                "capacity": {
                    "type": "object",
                    "required": ["rounds_total_rate_per_s"],
                    "properties": {
                        "rounds_total_rate_per_s": {
                            "type": "array",
                            "minItems": 1,
                            "items": {"type": "number", "exclusiveMinimum": 0},
                        },
                        "rounds_served_infer_per_s": {"type": "array", "items": _NUMBER},
                    },
                },
                "baseline_rounds_total_rate_per_s": {"type": "array", "items": _NUMBER},
            },
        },
    },
}


@dataclass(frozen=True)
class WorkloadRecord:
    """The record of a model tuned for a workload (``search --workload``): the workload file
    beside it, how the classes are served (``routes``: class -> model), and the capacity the
    final rounds measured, once per round: the total rate offered (what ``check`` sends a share
    of) and the inferences served there with every class meeting its objective (what the rounds
    ranked by).

    Several models serve a workload in the endpoint layout (one per class) and when its classes
    name their models (a group on one server): each model has this record, the same but for
    its own ``model``, ``knobs``, ``config_sha256`` and ``model_files``, and the ``routes`` name
    the whole group (why a record per model: :mod:`tritontune.export.workload`)."""

    model: str
    workload_file: str
    layout: Layout
    routes: dict[str, str]
    capacity_rounds: tuple[float, ...]
    knobs: dict
    config_sha256: str
    triton_version: str
    hardware: HostInfo
    baseline_rounds: tuple[float, ...] = ()
    served_rounds: tuple[float, ...] = ()
    tuned_from: dict = field(default_factory=dict)
    model_files: dict[str, str] = field(default_factory=dict)
    triton_launch: str = "local"
    served_via_python_backend: bool = False
    tritontune_version: str = __version__
    date: str = field(
        default_factory=lambda: dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    )
    precision: dict | None = None
    """A precision variant served in place of its weights (as the single-model record's
    ``precision``): how it was built, its accuracy against FP32, what that was judged on."""

    @property
    def reference_rate(self) -> float:
        """What ``check`` holds the models to: the lowest round's capacity (a clean
        re-measurement lands in the rounds' range; their median would fail one in two)."""
        return min(self.capacity_rounds)

    @property
    def models(self) -> tuple[str, ...]:
        """Every model that serves the workload, in the order classes first name them."""
        return tuple(dict.fromkeys(self.routes.values()))

    def to_dict(self) -> dict:
        return {
            "record_version": RECORD_VERSION,
            "model": self.model,
            "tuned_from": self.tuned_from,
            "workload": {
                "file": self.workload_file,
                "layout": str(self.layout),
                "routes": dict(self.routes),
                "capacity": {
                    "rounds_total_rate_per_s": [round(r, 3) for r in self.capacity_rounds],
                    "rounds_served_infer_per_s": [round(r, 3) for r in self.served_rounds],
                },
                "baseline_rounds_total_rate_per_s": [round(r, 3) for r in self.baseline_rounds],
            },
            "knobs": self.knobs,
            **({"precision": self.precision} if self.precision else {}),
            "config_sha256": self.config_sha256,
            "model_files": dict(self.model_files),
            **_provenance(self),
        }

    @classmethod
    def from_dict(cls, data: dict) -> WorkloadRecord:
        workload = data["workload"]
        return cls(
            model=data["model"],
            workload_file=workload["file"],
            layout=Layout(workload["layout"]),
            routes=dict(workload["routes"]),
            capacity_rounds=tuple(float(r) for r in workload["capacity"]["rounds_total_rate_per_s"]),
            baseline_rounds=tuple(
                float(r) for r in workload.get("baseline_rounds_total_rate_per_s") or ()
            ),
            served_rounds=tuple(
                float(r) for r in workload["capacity"].get("rounds_served_infer_per_s") or ()
            ),
            **_provenance_from(data),
        )


_HEADER = """\
# tritontune tuning record: what this config was measured to do, and where.
# `tritontune check` re-measures the model at this load and fails when p99 exceeds the SLO or
# throughput falls more than the tolerance below the figure here. The SLO and the load may be
# edited; the rest is what was measured.
"""

_PIPELINE_HEADER = """\
# This model is a pipeline (a Triton ensemble, or a BLS model calling others): it is measured end
# to end, with each composing model (under `pipeline:`) served with its own exported config; they
# have no record of their own.
"""


_WORKLOAD_HEADER = """\
# tritontune tuning record of a model tuned for a workload (tritontune.workload.yaml beside it):
# `tritontune check` sends the workload again, every class at once, at the lowest capacity the
# search's final rounds measured less the tolerance, and fails when a class misses its objective.
"""


def write_record(record: TuningRecord | WorkloadRecord, model_dir: Path) -> Path:
    """Write ``record`` as ``model_dir/tritontune.lock.yaml``; returns the path."""
    path = Path(model_dir) / RECORD_FILE
    body = yaml.safe_dump(record.to_dict(), sort_keys=False, allow_unicode=True, width=100)
    header = _WORKLOAD_HEADER if isinstance(record, WorkloadRecord) else _HEADER
    if isinstance(record, TuningRecord) and record.pipeline is not None:
        header += _PIPELINE_HEADER
    path.write_text(header + body, encoding="utf-8")
    return path


def read_record(path: Path) -> TuningRecord | WorkloadRecord:
    """Read and validate a record (a workload's when it has ``workload:``); every problem names
    the file and the field."""
    data = read_yaml(path, "tuning record")
    if not isinstance(data, dict):
        raise InputError(
            f"{path}: expected a tuning record (a YAML mapping), found {type(data).__name__}"
        )
    schema = _WORKLOAD_SCHEMA if "workload" in data else _SCHEMA
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(data))
    if error is not None:
        where = ".".join(str(p) for p in error.absolute_path) or "(top level)"
        raise InputError(f"{path}: {where}: {error.message}")
    if "workload" in data:
        return WorkloadRecord.from_dict(data)
    return TuningRecord.from_dict(data)
