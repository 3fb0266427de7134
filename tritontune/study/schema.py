"""The names of what a study keeps, and how older studies' names read.

A study keeps its *context* and identity as Optuna study attributes and each trial's config and
figures as trial attributes. This is the only module that names those attributes; the rest of
the package reads and writes through the names here. The names are those earlier versions wrote,
so their studies read back unchanged, with one exception read both ways: in earlier studies
the study attribute ``workload`` meant the request payload of a single-class study
(batch size, input data) *and* the traffic mix of a workload study; they are ``request_shape``
and ``traffic`` now (:func:`legacy_workload`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tritontune.enums import TextEnum


class StudyKey:
    """Names of the study attributes."""

    MODEL = "model"
    SLO = "slo_p99_s"
    LOAD_MODE = "load_mode"
    VERSION = "tritontune_version"
    CREATED = "created"
    SPACE = "space"
    PRECISIONS = "precisions"
    BASELINE = "baseline"
    BASELINE_CONFIG = "baseline_config_pbtxt"
    CONFIRMED = "confirmed"
    PLAYOFF = "playoff"
    BUDGET = "budget_trials"
    TRAFFIC = "traffic"
    """A workload study's traffic classes (``Traffic.to_dict``): its identity."""
    WORKLOAD_FINAL = "workload_final"
    """A workload study's final rounds."""
    STRATEGY = "strategy"
    """How the search proposed configs (``tpe``, ``predict``)."""
    CALIBRATION_REFERENCE = "calibration_reference"
    """The execution setting other settings' service curves are composed from."""
    CALIBRATION_CORES = "calibration_cores"
    """The CPU cores the calibrated server computed on (the contention model's resource)."""
    #: ``calibration:SETTING``: one calibrated execution setting (``SettingCalibration.to_dict``),
    #: each its own attribute so that workers calibrating different settings never overwrite
    #: each other.
    CALIBRATION_PREFIX = "calibration:"
    LEGACY_WORKLOAD = "workload"
    """Before ``request_shape`` and ``traffic``: either of them (see :func:`legacy_workload`)."""


class ContextKey:
    """Names of the study attributes that make up its context (what export and check need)."""

    MODEL_REPOSITORY = "model_repository"
    MODEL_VERSION = "model_version"
    MODEL_FILES = "model_files"
    COMPOSING = "composing"
    """A BLS model's composing models, as the search was told them (None otherwise)."""
    STEP_MODEL_FILES = "step_model_files"
    """A pipeline's composing models' files, or a group's models' files, as measured (None for
    one model, and in studies made before pipelines or groups were exported)."""
    REQUEST_SHAPE = "request_shape"
    SERVER_VERSION = "server_version"
    LAUNCH = "launch"
    VIA_PYTHON = "served_via_python_backend"
    HOST = "host"
    MEASURE = "measure"

    ALL = (
        MODEL_REPOSITORY,
        MODEL_VERSION,
        MODEL_FILES,
        COMPOSING,
        STEP_MODEL_FILES,
        REQUEST_SHAPE,
        SERVER_VERSION,
        LAUNCH,
        VIA_PYTHON,
        HOST,
        MEASURE,
    )


class TrialKey:
    """Names of the trial attributes."""

    POINT = "point"
    KNOBS = "knobs"
    CONFIG = "config_pbtxt"
    OPERATING_POINT = "operating_point"
    TRAFFIC_CAPACITY = "traffic_capacity"
    SWITCH = "switch_s"
    ERROR = "error"
    INTERRUPTED = "interrupted"
    DUPLICATE_OF = "duplicate_of"
    SERVER_RESTARTS = "server_restarts"
    WORKER = "worker"
    SURPLUS = "surplus"
    PREDICTED = "predicted"
    """What the prediction said of the trial's config before it was measured (search
    ``--strategy predict``): never a result, kept to compare with the measurement."""
    #: ``value:KNOB`` (``value:max_queue_delay_us`` for a delay): each knob of the point as its
    #: own attribute, named with its unit, for optuna-dashboard. The trial's params show the same
    #: values (the search's sampler snaps ordered dimensions before they are stored, see
    #: :mod:`tritontune.search.sampler`); studies made before that kept the sampler's float.
    VALUE_PREFIX = "value:"


class ClaimKey:
    """Names of a claim's attributes (a claim is a study of its own, see coordination)."""

    WORKER = "worker"
    CLAIMED_AT = "claimed_at"
    #: A claim is the study ``STUDY~claim~JOB``.
    SEPARATOR = "~claim~"


class StudyKind(TextEnum):
    """What a study searched for."""

    SINGLE_CLASS = "single-class"
    """The highest throughput under one p99 SLO (``search --slo-p99``)."""
    WORKLOAD = "workload"
    """The most inferences served under a traffic mix with every class's objective met
    (``search --workload``)."""


def legacy_workload(attrs: Mapping[str, Any]) -> tuple[dict | None, dict | None]:
    """The ``(request_shape, traffic)`` an older study kept under ``workload``: a traffic mix
    has ``classes``; anything else was the request payload."""
    value = attrs.get(StudyKey.LEGACY_WORKLOAD)
    if not isinstance(value, Mapping):
        return None, None
    if "classes" in value:
        return None, dict(value)
    return dict(value), None


def request_shape_attr(attrs: Mapping[str, Any]) -> dict | None:
    """The recorded request shape, under its name or the older one."""
    value = attrs.get(ContextKey.REQUEST_SHAPE)
    if isinstance(value, Mapping):
        return dict(value)
    return legacy_workload(attrs)[0]


def traffic_attr(attrs: Mapping[str, Any]) -> dict | None:
    """A workload study's traffic classes, under their name or the older one."""
    value = attrs.get(StudyKey.TRAFFIC)
    if isinstance(value, Mapping):
        return dict(value)
    return legacy_workload(attrs)[1]
