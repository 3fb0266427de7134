"""Load generation and statistics against a Triton server (knows the Triton client, not Optuna)."""

from tritontune.measure.inputs import (
    TensorSpec,
    build_requests,
    input_specs,
    read_input_data,
    synthesize_payloads,
)
from tritontune.measure.loadgen import LoadGenerator, LoadSpec
from tritontune.measure.runner import Measurement, MeasureSettings, ServerSplit, measure_load
from tritontune.measure.stats import LatencyStats, WindowSummary, is_stable

__all__ = [
    "LatencyStats",
    "LoadGenerator",
    "LoadSpec",
    "MeasureSettings",
    "Measurement",
    "ServerSplit",
    "TensorSpec",
    "WindowSummary",
    "build_requests",
    "input_specs",
    "is_stable",
    "measure_load",
    "read_input_data",
    "synthesize_payloads",
]
