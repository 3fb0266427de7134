"""The measuring protocol: what ``search``, ``profile`` and ``check`` use of a model on a server.

A *bench* is one model on one running server: configs are built (validated, no server needed),
loaded (a receipt says what is served and how long the switch took), and measured, one class of
load (:meth:`Bench.measure`) or a traffic mix (:meth:`Bench.measure_traffic`). A server that died
is told from a config Triton refused and restarted through the same object, which is all the
fault policy (:func:`tritontune.serving.faults.with_restarts`) needs.

:class:`tritontune.serving.session.TuningSession` is the real bench; tests drive the jobs with a
fake on a modelled server (``tests/fakes.py``), so the jobs' logic is tested without a server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from tritontune.config.model_config import ModelConfig
from tritontune.config.repository import ModelSource
from tritontune.config.variant import Variant
from tritontune.errors import ServerDiedError, ServerError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.traffic import Traffic
from tritontune.precision.prepare import AccuracySettings, PrecisionCheck
from tritontune.server.launcher import ServerInfo
from tritontune.serving.served import Capability, Served


@dataclass(frozen=True)
class LoadReceipt:
    """What a load put on the server: each served model's config, and the switch time."""

    configs: Mapping[str, ModelConfig]
    """Served model name -> its config (one entry for a shared model, one per endpoint)."""
    switch_s: float | None
    """Seconds the server took to switch (None: not measured)."""

    @property
    def config(self) -> ModelConfig:
        """The config of a single model's load."""
        return next(iter(self.configs.values()))


@runtime_checkable
class Bench(Protocol):
    """One model on one running server (see the module docstring)."""

    source: ModelSource
    """The user's model: name, own config, files."""
    request_shape: RequestShape
    """What each request of a single-class load carries."""
    serves: Served
    """What it serves: one model, a pipeline, a group of models."""

    @property
    def lacks(self) -> Mapping[Capability, str]:
        """The capabilities this kind of bench lacks, each with why (known before it is
        started)."""
        ...

    @property
    def info(self) -> ServerInfo:
        """The server: version, launch, capabilities."""
        ...

    @property
    def owns_server(self) -> bool:
        """False for a server somebody else runs: no endpoints or precision files can be added."""
        ...

    @property
    def via_python(self) -> bool:
        """The model is served through the Python backend (the server lacks its own)."""
        ...

    @property
    def batch_dim_dynamic(self) -> bool:
        """The model file takes any batch size."""
        ...

    def batch_dim_dynamic_of(self, model: str) -> bool:
        """The served model ``model``'s file takes any batch size (a pipeline's, a group's)."""
        ...

    @property
    def restarts(self) -> int:
        """Times the server was restarted after it died."""
        ...

    def build(self, variant: Variant) -> ModelConfig:
        """The validated config ``variant`` stands for (no server needed)."""
        ...

    def configs(self, variant: Variant) -> dict[str, ModelConfig]:
        """Every validated config ``variant`` stands for, by model: the model's own, or a
        pipeline's composing models' (what a trial keeps)."""
        ...

    def load(self, variant: Variant) -> LoadReceipt:
        """Serve the model with ``variant``'s config."""
        ...

    def load_endpoints(self, variants: Mapping[str, Variant]) -> LoadReceipt:
        """Serve the model as one endpoint per class (``NAME_<class>``), each with its config."""
        ...

    def measure(self, load: LoadSpec, settings: MeasureSettings | None = None) -> Measurement:
        """Measure what is loaded at one load level."""
        ...

    def measure_traffic(
        self, traffic: Traffic, total_rate: float, settings: MeasureSettings | None = None
    ) -> TrafficMeasurement:
        """Measure every class of ``traffic`` at once, at ``total_rate`` req/s in all."""
        ...

    def prepare_precisions(
        self,
        precisions: list[str],
        *,
        accuracy: AccuracySettings | None = None,
        model: str | None = None,
        input_data: Sequence[Path] = (),
    ) -> dict[str, PrecisionCheck]:
        """Build and accuracy-check precision variants of ``model`` (the bench's own model when
        None; a pipeline's composing model, a group's model, by name); accepted ones become
        loadable. ``input_data``: the request data to judge them on in place of the bench's own
        (a workload's classes' files, judged as one)."""
        ...

    def fault(self, err: ServerError) -> ServerDiedError | None:
        """The server's death behind ``err``; None when ``err`` is the config's own."""
        ...

    def restart(self, *, reload: bool = False) -> None:
        """Start a dead server again; with ``reload``, load what was loaded again."""
        ...
