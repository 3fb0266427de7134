"""A thin wrapper over tritonclient's gRPC client for the control plane tritontune needs.

Load a model with a config override (no server restart between variants), unload it, read the
loaded config back, server metadata, per-model statistics and the Prometheus metrics endpoint.
Triton's errors become :class:`ModelLoadError` / :class:`ServerError` carrying Triton's own reason.
The request hot path (load generation) lives in :mod:`tritontune.measure`.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tritonclient.grpc as grpcclient
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException

from tritontune.config.model_config import ModelConfig, config_to_json
from tritontune.errors import ModelLoadError, ServerError

#: gRPC messages up to this size (large batched tensors exceed gRPC's 4 MiB default).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
GRPC_OPTIONS = [
    ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
    ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
]


def triton_reason(err: InferenceServerException) -> str:
    """Triton's own message on one line, without the Python traceback the Python backend appends."""
    text = err.message() if hasattr(err, "message") and err.message() else str(err)
    return one_line(str(text))


def one_line(text: str) -> str:
    """Collapse a server message to one line, cutting a trailing ``At: <traceback>``."""
    head = text.split("\nAt:", 1)[0].split(" At: ", 1)[0]
    return " ".join(head.split())


@dataclass(frozen=True)
class ModelStatsSnapshot:
    """Cumulative counters of one model from Triton's statistics extension."""

    success_count: int = 0
    fail_count: int = 0
    inference_count: int = 0
    execution_count: int = 0
    queue_ns: int = 0
    compute_input_ns: int = 0
    compute_infer_ns: int = 0
    compute_output_ns: int = 0
    cache_hit_count: int = 0

    def __sub__(self, earlier: ModelStatsSnapshot) -> ModelStatsSnapshot:
        return ModelStatsSnapshot(
            **{name: getattr(self, name) - getattr(earlier, name) for name in _STAT_FIELDS}
        )


_STAT_FIELDS = tuple(ModelStatsSnapshot.__dataclass_fields__)


def snapshot_from_statistics(response: Any) -> ModelStatsSnapshot:
    """Sum a ``ModelStatisticsResponse`` (all versions of the model) into one snapshot."""
    totals = dict.fromkeys(_STAT_FIELDS, 0)
    for stats in response.model_stats:
        inf = stats.inference_stats
        totals["success_count"] += inf.success.count
        totals["fail_count"] += inf.fail.count
        totals["inference_count"] += stats.inference_count
        totals["execution_count"] += stats.execution_count
        totals["queue_ns"] += inf.queue.ns
        totals["compute_input_ns"] += inf.compute_input.ns
        totals["compute_infer_ns"] += inf.compute_infer.ns
        totals["compute_output_ns"] += inf.compute_output.ns
        totals["cache_hit_count"] += inf.cache_hit.count
    return ModelStatsSnapshot(**totals)


class TritonClient:
    """Control-plane calls to one Triton server over gRPC (``host:port``)."""

    def __init__(self, grpc_url: str, metrics_url: str | None = None, timeout: float = 120.0):
        self.grpc_url = grpc_url
        self.metrics_url = metrics_url
        self.timeout = timeout
        self._client = grpcclient.InferenceServerClient(grpc_url, channel_args=GRPC_OPTIONS)

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except InferenceServerException as err:
            raise ServerError(f"{what} on {self.grpc_url}: {triton_reason(err)}") from None

    def is_ready(self) -> bool:
        try:
            return bool(self._client.is_server_ready(client_timeout=2.0))
        except InferenceServerException:
            return False

    def server_metadata(self) -> dict:
        return self._call("server metadata", self._client.get_server_metadata, as_json=True)

    def server_version(self) -> str:
        return str(self.server_metadata().get("version", "unknown"))

    def load_model(self, name: str, config: ModelConfig | None = None) -> None:
        """(Re)load ``name``, with ``config`` overriding its config.pbtxt when given."""
        try:
            self._client.load_model(
                name,
                config=config_to_json(config) if config is not None else None,
                client_timeout=self.timeout,
            )
        except InferenceServerException as err:
            raise ModelLoadError(f"model {name!r} failed to load: {triton_reason(err)}") from None

    def unload_model(self, name: str) -> None:
        self._call(f"unloading {name!r}", self._client.unload_model, name)

    def model_config(self, name: str) -> ModelConfig:
        """The config the server is running for ``name`` (after auto-complete and overrides)."""
        response = self._call(f"config of {name!r}", self._client.get_model_config, name)
        return response.config

    def model_metadata(self, name: str) -> dict:
        return self._call(f"metadata of {name!r}", self._client.get_model_metadata, name, as_json=True)

    def is_model_ready(self, name: str) -> bool:
        try:
            return bool(self._client.is_model_ready(name))
        except InferenceServerException:
            return False

    def repository_index(self) -> list[dict]:
        index = self._call("repository index", self._client.get_model_repository_index, as_json=True)
        return list(index.get("models", []))

    def model_statistics(self, name: str) -> ModelStatsSnapshot:
        """Cumulative counters for ``name`` (all versions summed)."""
        response = self._call(f"statistics of {name!r}", self._client.get_inference_statistics, name)
        return snapshot_from_statistics(response)

    def metrics(self) -> dict[str, list[tuple[dict[str, str], float]]]:
        """Prometheus metrics: family name -> [(labels, value), ...]."""
        if not self.metrics_url:
            raise ServerError("no metrics URL is known for this server")
        try:
            with urllib.request.urlopen(self.metrics_url, timeout=5) as response:
                text = response.read().decode("utf-8")
        except OSError as err:
            raise ServerError(f"metrics endpoint {self.metrics_url}: {err}") from None
        families: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                families.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
        return families

    def gpu_count(self) -> int:
        """GPUs the server sees, from its per-GPU metrics (0 on a CPU-only server)."""
        try:
            samples = self.metrics().get("nv_gpu_utilization", [])
        except ServerError:
            return 0
        return len({labels.get("gpu_uuid") for labels, _ in samples})

    def explicit_model_control(self) -> bool:
        """Whether the server accepts load/unload requests (``--model-control-mode=explicit``).

        A load of a name that can't exist fails differently in explicit mode (the model is not in
        the repository) than in the other modes (loading is not allowed at all).
        """
        try:
            self._client.load_model("__tritontune_probe_no_such_model__")
        except InferenceServerException as err:
            reason = triton_reason(err).lower()
            return "not allowed" not in reason and "polling is enabled" not in reason
        return True
