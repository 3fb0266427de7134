"""``tritontune profile``: one config variant, measured at a list of load levels.

The library half of the command: the CLI parses options into a :class:`Variant` and
:class:`LoadSpec` list, calls :func:`run_profile` inside a :class:`TuningSession`, and prints.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from tritontune import __version__
from tritontune.config.model_config import config_to_text
from tritontune.config.variant import FP32, Variant, describe_config
from tritontune.errors import InputError
from tritontune.measure.gpu_metrics import NO_GPUS
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import Traffic
from tritontune.precision.prepare import AccuracySettings
from tritontune.search.traffic_capacity import (
    DEFAULT_START_RATE,
    TrafficCapacity,
    find_traffic_capacity,
)
from tritontune.serving.bench import Bench
from tritontune.serving.faults import with_restarts


@dataclass(frozen=True)
class ProfileResult:
    """Everything one profile run found, JSON-ready through :meth:`to_dict`."""

    model: str
    launch: str
    server_version: str
    served_via_python: bool
    variant: Variant
    knobs: dict
    config_text: str
    switch_s: float | None
    measurements: list[Measurement] = field(default_factory=list)
    restarts: int = 0
    accuracy: dict | None = None
    """For a precision variant: its accuracy against FP32 (see :mod:`tritontune.precision`)."""
    recipe: str | None = None
    """For a precision variant: how it was built (the recipe that passed the accuracy gate)."""

    def to_dict(self) -> dict:
        return {
            "tritontune_version": __version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "model": self.model,
            "launch": self.launch,
            "server_version": self.server_version,
            "served_via_python_backend": self.served_via_python,
            "variant": self.variant.to_dict(),
            "config": self.knobs,
            "config_pbtxt": self.config_text,
            "config_switch_s": self.switch_s,
            "server_restarts": self.restarts,
            # Each level's "gpu" holds its per-GPU figures; without any, the reason in words.
            "gpu_metrics": None if any(m.gpu for m in self.measurements) else NO_GPUS,
            "accuracy": self.accuracy,
            "recipe": self.recipe,
            "levels": [m.to_dict() for m in self.measurements],
        }


def run_profile(
    session: Bench,
    variant: Variant,
    loads: list[LoadSpec],
    *,
    on_level_start: Callable[[LoadSpec], None] | None = None,
    on_level_done: Callable[[Measurement], None] | None = None,
    restart_retries: int = 1,
    accuracy_settings: AccuracySettings | None = None,
) -> ProfileResult:
    """Load ``variant`` on the session's server and measure it at each of ``loads``.

    A precision variant is built and accuracy-checked first; one that fails its check is
    refused with the reason, never measured.
    """
    accuracy = recipe = None
    if variant.precision not in (None, FP32):
        check = session.prepare_precisions([variant.precision], accuracy=accuracy_settings)[
            variant.precision
        ]
        if not check.accepted:
            raise InputError(f"precision {variant.precision}: rejected, not measured: {check.reason}")
        accuracy = check.to_dict()["accuracy"]
        recipe = check.recipe.label() if check.recipe else None
    receipt = session.load(variant)
    config, switch_s = receipt.config, receipt.switch_s
    measurements = []
    restarts = 0
    for load in loads:
        if on_level_start:
            on_level_start(load)
        measurement, restarted = with_restarts(
            session,
            partial(session.measure, load),
            reload=True,
            deaths_to_fail=restart_retries + 1,
        )
        restarts += restarted
        measurements.append(measurement)
        if on_level_done:
            on_level_done(measurement)
    return ProfileResult(
        model=session.source.name,
        launch=session.info.launch,
        server_version=session.info.version,
        served_via_python=session.via_python,
        variant=variant,
        knobs=describe_config(config),
        config_text=config_to_text(config),
        switch_s=switch_s,
        measurements=measurements,
        restarts=restarts,
        accuracy=accuracy,
        recipe=recipe,
    )


@dataclass(frozen=True)
class TrafficProfileResult:
    """One config under a mixed workload: each total rate measured, or the capacity found."""

    model: str
    server_version: str
    traffic: Traffic
    variant: Variant
    knobs: dict
    config_text: str
    levels: list[TrafficMeasurement]
    capacity: TrafficCapacity | None = None
    """Set when the capacity was searched for (no rates given)."""

    def to_dict(self) -> dict:
        return {
            "tritontune_version": __version__,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "model": self.model,
            "server_version": self.server_version,
            "workload": self.traffic.to_dict(),
            "variant": self.variant.to_dict(),
            "config": self.knobs,
            "config_pbtxt": self.config_text,
            "capacity": self.capacity.to_dict() if self.capacity else None,
            "levels": [m.to_dict(self.traffic) for m in self.levels],
        }


def run_traffic_profile(
    session: Bench,
    variant: Variant,
    traffic: Traffic,
    rates: list[float] | None = None,
    *,
    start_rate: float | None = None,
    on_level_done: Callable[[TrafficMeasurement], None] | None = None,
) -> TrafficProfileResult:
    """Load ``variant`` and measure every class of ``traffic`` at each total rate of ``rates``;
    without rates, find its capacity: the most inferences served with every class meeting its
    objective."""
    config = session.load(variant).config

    def measure(rate: float) -> TrafficMeasurement:
        measurement = session.measure_traffic(traffic, rate)
        if on_level_done:
            on_level_done(measurement)
        return measurement

    capacity = None
    if rates:
        levels = [measure(rate) for rate in rates]
    else:
        start = start_rate or traffic.nominal_rate or DEFAULT_START_RATE
        capacity = find_traffic_capacity(measure, traffic, start=start)
        levels = list(capacity.levels)
    return TrafficProfileResult(
        model=session.source.name,
        server_version=session.info.version,
        traffic=traffic,
        variant=variant,
        knobs=describe_config(config),
        config_text=config_to_text(config),
        levels=levels,
        capacity=capacity,
    )
