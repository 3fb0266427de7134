"""Checks a config before it is sent to Triton, with messages that name the field.

Model Analyzer's users meet these as "failed to load" after a server round trip (preferred batch
sizes above ``max_batch_size``, ``KIND_GPU`` on a CPU-only server, batching on a model that can't
batch). tritontune refuses them up front, so a search never spends a measurement on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup

from tritontune.config.model_config import ModelConfig, backend_of
from tritontune.config.variant import TENSORRT_PRECISIONS
from tritontune.errors import ConfigError


@dataclass(frozen=True)
class TargetCapabilities:
    """What the server a config is meant for can do (filled in by the server layer)."""

    gpu_count: int = 0
    response_cache: bool = False
    backends: frozenset[str] = field(default_factory=frozenset)


def config_problems(config: ModelConfig, target: TargetCapabilities | None = None) -> list[str]:
    """Every reason Triton would refuse (or silently misread) ``config``; empty when it is fine."""
    problems: list[str] = []
    mbs = config.max_batch_size
    if mbs < 0:
        problems.append(f"max_batch_size: {mbs} is negative; expected 0 (no batching) or more")
    if not config.input:
        problems.append("input: the model declares no inputs")
    if not config.output:
        problems.append("output: the model declares no outputs")

    if config.HasField("dynamic_batching"):
        db = config.dynamic_batching
        if mbs == 0:
            problems.append(
                "dynamic_batching: set on a model with max_batch_size 0 (it cannot batch); "
                "remove dynamic_batching or raise max_batch_size"
            )
        for size in db.preferred_batch_size:
            if size < 1:
                problems.append(f"dynamic_batching.preferred_batch_size: {size} is below 1")
            elif mbs > 0 and size > mbs:
                problems.append(
                    f"dynamic_batching.preferred_batch_size: {size} is above max_batch_size {mbs}"
                )
        if len(set(db.preferred_batch_size)) != len(db.preferred_batch_size):
            problems.append("dynamic_batching.preferred_batch_size: sizes repeat")
        if db.priority_levels and not 1 <= db.default_priority_level <= db.priority_levels:
            problems.append(
                f"dynamic_batching.default_priority_level: {db.default_priority_level} is outside "
                f"1..{db.priority_levels} (priority_levels)"
            )
        for level in db.priority_queue_policy:
            if not 1 <= level <= db.priority_levels:
                problems.append(
                    f"dynamic_batching.priority_queue_policy: level {level} is outside "
                    f"1..{db.priority_levels} (priority_levels)"
                )

    for i, group in enumerate(config.instance_group):
        if group.count < 0:
            problems.append(f"instance_group[{i}].count: {group.count} is below 1")
        if group.kind == ModelInstanceGroup.KIND_GPU and target is not None:
            if target.gpu_count == 0:
                problems.append(
                    f"instance_group[{i}].kind: KIND_GPU but the server has no GPU; use KIND_CPU"
                )
            for gpu in group.gpus:
                if gpu >= target.gpu_count:
                    problems.append(
                        f"instance_group[{i}].gpus: GPU {gpu} does not exist "
                        f"(the server has {target.gpu_count})"
                    )

    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        where = f"optimization.execution_accelerators.gpu_execution_accelerator[{accelerator.name!r}]"
        if accelerator.name == "tensorrt" and backend_of(config) != "onnxruntime":
            problems.append(f"{where}: TensorRT acceleration is an onnxruntime backend option")
        mode = accelerator.parameters.get("precision_mode")
        if mode is not None and mode not in TENSORRT_PRECISIONS:
            problems.append(
                f"{where}: precision_mode {mode!r} is not one of {', '.join(TENSORRT_PRECISIONS)}"
            )
        if target is not None and target.gpu_count == 0:
            problems.append(f"{where}: needs a GPU, and the server has none")
        if any(g.kind == ModelInstanceGroup.KIND_CPU for g in config.instance_group):
            problems.append(f"{where}: GPU accelerators need KIND_GPU instances, not KIND_CPU")

    if config.response_cache.enable and target is not None and not target.response_cache:
        problems.append(
            "response_cache.enable: the server was started without a response cache "
            "(tritonserver --cache-config)"
        )
    return problems


def validate_config(config: ModelConfig, target: TargetCapabilities | None = None) -> None:
    """Raise :class:`ConfigError` listing every problem of ``config``."""
    problems = config_problems(config, target)
    if problems:
        name = config.name or "model"
        raise ConfigError(f"config of {name!r}: " + "; ".join(problems))
