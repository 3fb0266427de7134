"""What each request carries, and the requests built from it for a loaded config.

Requests are prepared once per config (the load generator only sends), from the model's
metadata as the server reports it: real data from a perf_analyzer-style ``--input-data`` file, or
seeded synthetic tensors.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritontune.measure.inputs import (
    build_requests,
    input_specs,
    read_input_data,
    synthesize_payloads,
)
from tritontune.server.endpoint import ClientProtocol


@dataclass(frozen=True)
class RequestShape:
    """What each request carries."""

    batch_size: int = 1
    input_data: Path | None = None
    dynamic_dim: int = 16
    seed: int = 0
    priority: int = 0
    """Triton's per-request priority level (0: the config's default level)."""
    timeout_us: int = 0
    """Triton's per-request queue timeout (0: the level's queue policy decides)."""


def prepare_requests(
    model: str,
    metadata: dict[str, Any],
    shape: RequestShape,
    *,
    batching: bool,
    protocol: ClientProtocol = ClientProtocol.GRPC,
) -> list[Any]:
    """The requests for ``model`` (``metadata`` as the server reports it) in ``protocol``;
    ``batching``: the loaded config takes a batch dimension."""
    specs = input_specs(metadata, batching)
    if shape.input_data is not None:
        payloads = read_input_data(
            shape.input_data, specs, batch_size=shape.batch_size, batching=batching
        )
    else:
        payloads = synthesize_payloads(
            specs,
            batch_size=shape.batch_size,
            batching=batching,
            dynamic_dim=shape.dynamic_dim,
            seed=shape.seed,
        )
    return build_requests(
        model, payloads, specs, protocol, priority=shape.priority, timeout_us=shape.timeout_us
    )
