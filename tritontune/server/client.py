"""A thin wrapper over tritonclient's gRPC and HTTP clients for the control plane tritontune needs.

Load a model with a config override (no server restart between variants), unload it, read the
loaded config back, server metadata, per-model statistics and the Prometheus metrics endpoint, and
one plain inference (:meth:`TritonClient.infer`, to read what a model computes, not to time it).
Triton's errors become :class:`ModelLoadError` / :class:`ServerError` carrying Triton's own reason.
The request hot path (load generation) lives in :mod:`tritontune.measure`.
"""

from __future__ import annotations

import ssl
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf.json_format import MessageToDict
from prometheus_client.parser import text_string_to_metric_families
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from tritontune.config.model_config import ModelConfig, config_from_json, config_to_json
from tritontune.errors import InputError, ModelLoadError, ServerError
from tritontune.server.endpoint import ClientProtocol, Endpoint, TlsSettings

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
class BatchCompute:
    """Executions of one batch size and their compute time in all (input + infer + output):
    what the model costs per batch, whatever the scheduler did before it ran."""

    batch_size: int
    executions: int
    compute_ns: int

    @property
    def mean_s(self) -> float:
        return self.compute_ns / self.executions / 1e9 if self.executions else 0.0


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
    batches: tuple[BatchCompute, ...] = ()
    """Executions and compute time by batch size (Triton's ``batch_stats``), ascending size."""

    def __sub__(self, earlier: ModelStatsSnapshot) -> ModelStatsSnapshot:
        counters = {name: getattr(self, name) - getattr(earlier, name) for name in _STAT_FIELDS}
        before = {b.batch_size: b for b in earlier.batches}
        batches = []
        for now in self.batches:
            then = before.get(now.batch_size, BatchCompute(now.batch_size, 0, 0))
            if now.executions > then.executions:
                batches.append(
                    BatchCompute(
                        now.batch_size,
                        now.executions - then.executions,
                        now.compute_ns - then.compute_ns,
                    )
                )
        return ModelStatsSnapshot(**counters, batches=tuple(batches))


_STAT_FIELDS = tuple(name for name in ModelStatsSnapshot.__dataclass_fields__ if name != "batches")


def _merge_batches(batches: dict[int, list[int]]) -> tuple[BatchCompute, ...]:
    return tuple(BatchCompute(size, count, ns) for size, (count, ns) in sorted(batches.items()))


def snapshot_from_statistics(response: Any) -> ModelStatsSnapshot:
    """Sum a gRPC ``ModelStatisticsResponse`` (all versions of the model) into one snapshot,
    through its JSON form, which is the HTTP API's."""
    return snapshot_from_json(MessageToDict(response, preserving_proto_field_name=True))


def snapshot_from_json(response: dict[str, Any]) -> ModelStatsSnapshot:
    """Sum the HTTP API's statistics (JSON; the same fields) into one snapshot."""
    totals = dict.fromkeys(_STAT_FIELDS, 0)
    batches: dict[int, list[int]] = {}
    for stats in response.get("model_stats", []):
        for batch in stats.get("batch_stats", []):
            entry = batches.setdefault(int(batch.get("batch_size", 0)), [0, 0])
            entry[0] += int(batch.get("compute_infer", {}).get("count", 0))
            entry[1] += sum(
                int(batch.get(part, {}).get("ns", 0))
                for part in ("compute_input", "compute_infer", "compute_output")
            )
        inf = stats.get("inference_stats", {})

        def stat(name: str, field: str, inf: dict = inf) -> int:
            return int(inf.get(name, {}).get(field, 0))

        totals["success_count"] += stat("success", "count")
        totals["fail_count"] += stat("fail", "count")
        totals["inference_count"] += int(stats.get("inference_count", 0))
        totals["execution_count"] += int(stats.get("execution_count", 0))
        totals["queue_ns"] += stat("queue", "ns")
        totals["compute_input_ns"] += stat("compute_input", "ns")
        totals["compute_infer_ns"] += stat("compute_infer", "ns")
        totals["compute_output_ns"] += stat("compute_output", "ns")
        totals["cache_hit_count"] += stat("cache_hit", "count")
    return ModelStatsSnapshot(**totals, batches=_merge_batches(batches))


def _grpc_client(endpoint: Endpoint) -> Any:
    tls = endpoint.tls
    if tls is None:
        return grpcclient.InferenceServerClient(endpoint.address, channel_args=GRPC_OPTIONS)
    return grpcclient.InferenceServerClient(
        endpoint.address,
        channel_args=GRPC_OPTIONS,
        ssl=True,
        root_certificates=_path(tls.ca),
        private_key=_path(tls.key),
        certificate_chain=_path(tls.cert),
    )


def _http_client(endpoint: Endpoint, timeout: float) -> Any:
    import tritonclient.http as httpclient  # gevent-based: imported only when HTTP is asked for

    tls = endpoint.tls
    options: dict[str, Any] = {}
    if tls is not None:
        options = {"ssl": True, "ssl_context_factory": lambda: tls_context(tls, for_gevent=True)}
    return httpclient.InferenceServerClient(
        endpoint.address, connection_timeout=10.0, network_timeout=timeout, **options
    )


def tls_context(tls: TlsSettings, *, for_gevent: bool = False) -> ssl.SSLContext:
    """A client TLS context: verifies the server (``tls.ca``, else the system's CAs) and presents
    the client certificate when one is given. ``for_gevent``: gevent's own context, for the sync
    HTTP client (its sockets are gevent sockets)."""
    if for_gevent:
        from gevent import ssl as gevent_ssl  # type: ignore[import-untyped]

        factory: Callable[..., ssl.SSLContext] = gevent_ssl.create_default_context
    else:
        factory = ssl.create_default_context
    try:
        context = factory(cafile=_path(tls.ca))
        if tls.cert is not None:
            context.load_cert_chain(str(tls.cert), _path(tls.key))
    except (OSError, ssl.SSLError) as err:
        raise InputError(f"--ssl-ca/--ssl-cert/--ssl-key: cannot use the files ({err})") from None
    return context


def _path(path: Path | None) -> str | None:
    return str(path) if path is not None else None


class TritonClient:
    """Control-plane calls to one Triton server over gRPC or HTTP (an :class:`Endpoint`, or a
    plain gRPC ``host:port``), with the endpoint's TLS and headers on every call."""

    def __init__(
        self,
        endpoint: Endpoint | str,
        metrics_url: str | None = None,
        timeout: float = 120.0,
    ):
        self.endpoint = Endpoint.grpc(endpoint) if isinstance(endpoint, str) else endpoint
        self.metrics_url = metrics_url
        self.timeout = timeout
        self._http = self.endpoint.protocol == ClientProtocol.HTTP
        metadata = self.endpoint.grpc_metadata()
        self._headers = self.endpoint.header_dict() if self._http else (dict(metadata or ()) or None)
        self._client: Any = (
            _http_client(self.endpoint, timeout) if self._http else _grpc_client(self.endpoint)
        )

    @property
    def grpc_url(self) -> str:
        """Where the client talks (kept for messages; gRPC or HTTP)."""
        return self.endpoint.url()

    def close(self) -> None:
        self._client.close()

    def _call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, headers=self._headers, **kwargs)
        except InferenceServerException as err:
            raise ServerError(f"{what} on {self.grpc_url}: {triton_reason(err)}") from None
        except OSError as err:  # HTTP: refused, reset, TLS failures (gRPC reports them as above)
            raise ServerError(f"{what} on {self.grpc_url}: {err}") from None

    def _json(self) -> dict[str, Any]:
        """``as_json=True`` for gRPC calls (HTTP answers JSON anyway)."""
        return {} if self._http else {"as_json": True}

    def is_ready(self) -> bool:
        try:
            if self._http:
                return bool(self._client.is_server_ready(headers=self._headers))
            return bool(self._client.is_server_ready(headers=self._headers, client_timeout=2.0))
        except (InferenceServerException, OSError):
            return False

    def server_metadata(self) -> dict:
        return self._call("server metadata", self._client.get_server_metadata, **self._json())

    def server_version(self) -> str:
        return str(self.server_metadata().get("version", "unknown"))

    def load_model(self, name: str, config: ModelConfig | None = None) -> None:
        """(Re)load ``name``, with ``config`` overriding its config.pbtxt when given."""
        timeout = {} if self._http else {"client_timeout": self.timeout}
        try:
            self._client.load_model(
                name,
                config=config_to_json(config) if config is not None else None,
                headers=self._headers,
                **timeout,
            )
        except InferenceServerException as err:
            raise ModelLoadError(f"model {name!r} failed to load: {triton_reason(err)}") from None
        except OSError as err:
            raise ServerError(f"loading {name!r} on {self.grpc_url}: {err}") from None

    def unload_model(self, name: str) -> None:
        self._call(f"unloading {name!r}", self._client.unload_model, name)

    def model_config(self, name: str) -> ModelConfig:
        """The config the server is running for ``name`` (after auto-complete and overrides)."""
        response = self._call(f"config of {name!r}", self._client.get_model_config, name)
        return config_from_json(response) if self._http else response.config

    def model_metadata(self, name: str) -> dict:
        return self._call(f"metadata of {name!r}", self._client.get_model_metadata, name, **self._json())

    def infer(
        self,
        name: str,
        inputs: Mapping[str, np.ndarray],
        outputs: Sequence[str],
        *,
        version: str = "",
    ) -> dict[str, np.ndarray]:
        """One request to ``name`` (``version``: the newest when empty); its ``outputs``.

        Not for timing: the load generator in :mod:`tritontune.measure` sends timed requests.
        This one reads what a model computes (a pipeline step's outputs, say)."""
        module: Any = grpcclient
        if self._http:
            import tritonclient.http as module  # type: ignore[no-redef]
        tensors = []
        for tensor, value in inputs.items():
            array = np.asarray(value)
            datatype = np_to_triton_dtype(array.dtype)
            infer_input = module.InferInput(tensor, list(array.shape), datatype)
            infer_input.set_data_from_numpy(array)
            tensors.append(infer_input)
        wanted = [module.InferRequestedOutput(output) for output in outputs]
        result = self._call(
            f"inference on {name!r}",
            self._client.infer,
            name,
            tensors,
            model_version=version,
            outputs=wanted,
        )
        return {output: result.as_numpy(output) for output in outputs}

    def is_model_ready(self, name: str) -> bool:
        try:
            return bool(self._client.is_model_ready(name, headers=self._headers))
        except (InferenceServerException, OSError):
            return False

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
            self._client.load_model("__tritontune_probe_no_such_model__", headers=self._headers)
        except InferenceServerException as err:
            reason = triton_reason(err).lower()
            return "not allowed" not in reason and "polling is enabled" not in reason
        return True
