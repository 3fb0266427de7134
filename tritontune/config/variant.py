"""A *variant*: one point of the tuning space applied to a model's base config.

A :class:`Variant` names only the knobs it sets (``None`` keeps the base config's value), so the same
type describes a CLI ``profile`` request, an Optuna trial and an exported result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tritonclient.grpc import model_config_pb2
from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup, ModelQueuePolicy

from tritontune.config.model_config import ModelConfig, copy_config, set_parameter
from tritontune.enums import TextEnum
from tritontune.errors import ConfigError
from tritontune.units import format_duration

INSTANCE_KINDS = {"cpu": ModelInstanceGroup.KIND_CPU, "gpu": ModelInstanceGroup.KIND_GPU}
TIMEOUT_ACTIONS = {
    "reject": ModelQueuePolicy.REJECT,
    "delay": ModelQueuePolicy.DELAY,
}


class Precision(TextEnum):
    """The numeric precision a model file is served in: the one spelling of this concept.

    ``FP32`` is the model's own weights; the others are files built by :mod:`tritontune.precision`
    and placed beside it. The values are what users write (space files, ``--precision``) and what
    studies and tuning records keep.
    """

    FP32 = "fp32"
    FP16 = "fp16"
    FP16_IO = "fp16_io"
    """FP16 inputs and outputs too (the config's data types follow): clients send FP16."""
    INT8_DYNAMIC = "int8_dynamic"
    INT8_STATIC = "int8_static"


class GraphOptimization(TextEnum):
    """onnxruntime's graph optimization level, as the onnxruntime backend reads it from the
    config's ``optimization { graph { level } }`` (its README): unset is every optimization
    (``ORT_ENABLE_ALL``), -1 basic (constant folding, redundant nodes), 1 basic plus extended
    (fusions: GELU, LayerNorm, attention, MatMul+Add), 2 none. The Python-backend server tritontune
    runs ONNX models on (``model_repository_templates/python_onnx``) reads the same field, so a
    tuned value means the same on a GPU host's native backend."""

    ALL = "all"
    EXTENDED = "extended"
    BASIC = "basic"
    DISABLED = "disabled"


#: The config's ``optimization.graph.level`` for each level (the onnxruntime backend's numbers).
GRAPH_LEVELS = {
    GraphOptimization.ALL: 0,
    GraphOptimization.EXTENDED: 1,
    GraphOptimization.BASIC: -1,
    GraphOptimization.DISABLED: 2,
}

FP32 = Precision.FP32
FP16_IO = Precision.FP16_IO
#: TensorRT's ``precision_mode`` values (onnxruntime backend on a GPU).
TENSORRT_PRECISIONS = ("FP32", "FP16", "INT8")
DEFAULT_ONNX_FILENAME = "model.onnx"


def variant_filename(base_filename: str, precision: str) -> str:
    """``model.onnx`` -> ``model.fp16.onnx``: where a precision variant sits beside the model."""
    if precision == FP32:
        return base_filename
    stem, dot, suffix = base_filename.rpartition(".")
    return f"{stem}.{precision}.{suffix}" if dot else f"{base_filename}.{precision}"


def precision_of(config: ModelConfig, base_filename: str = DEFAULT_ONNX_FILENAME) -> str:
    """The precision a config serves, read back from its model file name (FP32 by default)."""
    name = config.default_model_filename
    stem = base_filename.rpartition(".")[0] or base_filename
    if name and name != base_filename and name.startswith(stem + "."):
        middle = name[len(stem) + 1 :].rpartition(".")[0]
        if middle:
            return middle
    return FP32


@dataclass(frozen=True)
class QueuePolicy:
    """Triton's ``ModelQueuePolicy`` for one priority level (``None`` keeps Triton's default).

    ``max_queue_size`` is admission control: past it Triton rejects a request at once instead of
    queueing it. ``timeout_us`` bounds the time a request may wait in the queue; on expiry it is
    rejected (``reject``) or kept but moved behind the others (``delay``). With
    ``allow_timeout_override`` a request's own ``timeout`` parameter (shorter than the default, or
    any when the default is 0) applies instead.
    """

    max_queue_size: int | None = None
    timeout_us: int | None = None
    timeout_action: str | None = None
    allow_timeout_override: bool | None = None

    def apply_to(self, policy: ModelQueuePolicy) -> None:
        if self.max_queue_size is not None:
            policy.max_queue_size = self.max_queue_size
        if self.timeout_us is not None:
            policy.default_timeout_microseconds = self.timeout_us
        if self.timeout_action is not None:
            action = self.timeout_action.lower()
            if action not in TIMEOUT_ACTIONS:
                raise ConfigError(
                    f"variant: timeout_action {self.timeout_action!r} is not one of "
                    f"{', '.join(TIMEOUT_ACTIONS)}"
                )
            policy.timeout_action = TIMEOUT_ACTIONS[action]
        if self.allow_timeout_override is not None:
            policy.allow_timeout_override = self.allow_timeout_override

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class Variant:
    """Knob values to apply to a base config; ``None`` means "as in the base config"."""

    max_batch_size: int | None = None
    dynamic_batching: bool | None = None
    max_queue_delay_us: int | None = None
    preferred_batch_sizes: tuple[int, ...] | None = None
    max_queue_size: int | None = None
    queue_timeout_us: int | None = None
    timeout_action: str | None = None
    allow_timeout_override: bool | None = None
    priority_levels: int | None = None
    """Triton's priority levels (1 is served first); 0 switches priorities off."""
    default_priority_level: int | None = None
    """The level of a request that names none."""
    priority_queue_policies: tuple[tuple[int, QueuePolicy], ...] = ()
    """``(level, policy)``: a queue policy of its own for a level (admission control per level)."""
    instance_count: int | None = None
    instance_kind: str | None = None
    response_cache: bool | None = None
    backend_parameters: Mapping[str, str] = field(default_factory=dict)
    precision: str | None = None
    """A precision variant of the model file (``fp16``, ``int8_dynamic``, ...); see
    :mod:`tritontune.precision`, which builds and checks the file."""
    tensorrt_precision: str | None = None
    """On a GPU with the onnxruntime backend: TensorRT's ``precision_mode`` (FP32/FP16/INT8)."""
    graph_optimization: str | None = None
    """onnxruntime's graph optimization level (see :class:`GraphOptimization`)."""

    def wants_dynamic_batching(self) -> bool | None:
        """On if asked, or implied by a batching knob; ``None`` when the variant doesn't say."""
        if self.dynamic_batching is not None:
            return self.dynamic_batching
        implied = (
            self.max_queue_delay_us,
            self.preferred_batch_sizes,
            self.max_queue_size,
            self.queue_timeout_us,
            self.timeout_action,
            self.allow_timeout_override,
            self.priority_levels,
            self.default_priority_level,
            self.priority_queue_policies or None,
        )
        return True if any(v is not None for v in implied) else None

    def default_queue_policy(self) -> QueuePolicy:
        return QueuePolicy(
            self.max_queue_size,
            self.queue_timeout_us,
            self.timeout_action,
            self.allow_timeout_override,
        )

    def to_dict(self) -> dict:
        """Only the knobs this variant sets, JSON-ready."""
        data = asdict(self)
        data["backend_parameters"] = dict(self.backend_parameters)
        if self.preferred_batch_sizes is not None:
            data["preferred_batch_sizes"] = list(self.preferred_batch_sizes)
        data["priority_queue_policies"] = {
            str(level): policy.to_dict() for level, policy in self.priority_queue_policies
        }
        return {k: v for k, v in data.items() if v not in (None, {})}


def apply_variant(base: ModelConfig, variant: Variant) -> ModelConfig:
    """A new config: ``base`` with ``variant``'s knobs set. ``base`` is left untouched.

    Knob combinations that make no sense on their own (queue settings with batching switched off)
    are refused here; checks that need the whole config are :func:`validate_config`'s.
    """
    config = copy_config(base)
    if variant.max_batch_size is not None:
        config.max_batch_size = variant.max_batch_size

    batching = variant.wants_dynamic_batching()
    if batching is False:
        knobs = {k for k in variant.to_dict() if k in _QUEUE_KNOBS}
        if knobs:
            raise ConfigError(f"variant: {', '.join(sorted(knobs))} set while dynamic batching is off")
        config.ClearField("dynamic_batching")
    elif batching:
        db = config.dynamic_batching
        db.SetInParent()  # an empty dynamic_batching {} block still switches batching on
        if variant.max_queue_delay_us is not None:
            db.max_queue_delay_microseconds = variant.max_queue_delay_us
        if variant.preferred_batch_sizes is not None:
            del db.preferred_batch_size[:]
            db.preferred_batch_size.extend(variant.preferred_batch_sizes)
        variant.default_queue_policy().apply_to(db.default_queue_policy)
        _set_priorities(db, variant)

    if variant.instance_count is not None or variant.instance_kind is not None:
        _set_instance_group(config, variant.instance_count, variant.instance_kind)

    if variant.response_cache is not None:
        config.response_cache.enable = variant.response_cache

    for key, value in variant.backend_parameters.items():
        set_parameter(config, key, value)

    if variant.precision is not None:
        _set_precision(config, base, variant.precision)
    if variant.tensorrt_precision is not None:
        _set_tensorrt(config, variant.tensorrt_precision)
    if variant.graph_optimization is not None:
        _set_graph_optimization(config, variant.graph_optimization)
    return config


def _set_priorities(db: model_config_pb2.ModelDynamicBatching, variant: Variant) -> None:
    if variant.priority_levels is not None:
        db.priority_levels = variant.priority_levels
    if variant.default_priority_level is not None:
        db.default_priority_level = variant.default_priority_level
    for level, policy in variant.priority_queue_policies:
        if not 1 <= level <= db.priority_levels:
            raise ConfigError(
                f"variant: a queue policy for priority level {level}, but the config has "
                f"{db.priority_levels} priority levels"
            )
        policy.apply_to(db.priority_queue_policy[level])
    if db.priority_levels and not 1 <= db.default_priority_level <= db.priority_levels:
        raise ConfigError(
            f"variant: default_priority_level {db.default_priority_level} is not within the "
            f"{db.priority_levels} priority levels"
        )


def _set_graph_optimization(config: ModelConfig, level: str) -> None:
    try:
        value = GRAPH_LEVELS[GraphOptimization(str(level).lower())]
    except ValueError:
        raise ConfigError(
            f"variant: graph optimization {level!r} is not one of "
            f"{', '.join(g.value for g in GraphOptimization)}"
        ) from None
    if value == 0:
        config.optimization.ClearField("graph")  # unset: every optimization
    else:
        config.optimization.graph.level = value


def _set_precision(config: ModelConfig, base: ModelConfig, precision: str) -> None:
    """Point the config at the precision's model file; FP16 I/O also changes the data types."""
    base_file = base.default_model_filename or DEFAULT_ONNX_FILENAME
    if precision == FP32:
        config.default_model_filename = base.default_model_filename
    else:
        config.default_model_filename = variant_filename(base_file, precision)
    if precision == FP16_IO:
        for tensor in list(config.input) + list(config.output):
            if tensor.data_type == model_config_pb2.TYPE_FP32:
                tensor.data_type = model_config_pb2.TYPE_FP16


def _set_tensorrt(config: ModelConfig, precision: str) -> None:
    """One TensorRT GPU accelerator with ``precision_mode`` (replacing any other TensorRT one)."""
    mode = precision.upper()
    if mode not in TENSORRT_PRECISIONS:
        raise ConfigError(
            f"variant: tensorrt precision {precision!r} is not one of {', '.join(TENSORRT_PRECISIONS)}"
        )
    accelerators = config.optimization.execution_accelerators.gpu_execution_accelerator
    kept = [a for a in accelerators if a.name != "tensorrt"]
    del accelerators[:]
    accelerators.extend(kept)
    trt = accelerators.add(name="tensorrt")
    trt.parameters["precision_mode"] = mode
    # TensorRT's default workspace is small for batched models; 1 GiB is the NGC examples' value.
    trt.parameters["max_workspace_size_bytes"] = str(1 << 30)


_QUEUE_KNOBS = {
    "max_queue_delay_us",
    "preferred_batch_sizes",
    "max_queue_size",
    "queue_timeout_us",
    "timeout_action",
    "allow_timeout_override",
    "priority_levels",
    "default_priority_level",
    "priority_queue_policies",
}


def _set_instance_group(config: ModelConfig, count: int | None, kind: str | None) -> None:
    """Replace the instance groups with one group; unset parts keep the base's first group."""
    first = config.instance_group[0] if config.instance_group else None
    new_count = count if count is not None else (first.count if first and first.count else 1)
    if kind is not None:
        if kind.lower() not in INSTANCE_KINDS:
            raise ConfigError(
                f"variant: instance kind {kind!r} is not one of {', '.join(INSTANCE_KINDS)}"
            )
        new_kind = INSTANCE_KINDS[kind.lower()]
    else:
        new_kind = first.kind if first else ModelInstanceGroup.KIND_AUTO
    del config.instance_group[:]
    config.instance_group.add(count=new_count, kind=new_kind)


def describe_config(config: ModelConfig) -> dict:
    """The tuned knobs of a config as plain values, for tables and records."""
    groups = [
        {"count": g.count or 1, "kind": ModelInstanceGroup.Kind.Name(g.kind)}
        for g in config.instance_group
    ]
    knobs: dict = {
        "max_batch_size": config.max_batch_size,
        "dynamic_batching": config.HasField("dynamic_batching"),
        "instance_group": groups or [{"count": 1, "kind": "KIND_AUTO"}],
    }
    if config.HasField("dynamic_batching"):
        db = config.dynamic_batching
        knobs["max_queue_delay_us"] = db.max_queue_delay_microseconds
        knobs["preferred_batch_sizes"] = list(db.preferred_batch_size)
        if db.priority_levels:
            knobs["priority_levels"] = db.priority_levels
            knobs["default_priority_level"] = db.default_priority_level
        policies = {"default": db.default_queue_policy} if db.HasField("default_queue_policy") else {}
        policies.update({str(level): p for level, p in sorted(db.priority_queue_policy.items())})
        if policies:
            knobs["queue_policies"] = {name: _policy_dict(p) for name, p in policies.items()}
    if config.HasField("response_cache"):
        knobs["response_cache"] = config.response_cache.enable
    if config.parameters:
        knobs["parameters"] = {k: v.string_value for k, v in sorted(config.parameters.items())}
    precision = precision_of(config)
    if precision != FP32:
        knobs["precision"] = precision
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accelerator.name == "tensorrt":
            knobs["tensorrt_precision"] = accelerator.parameters.get("precision_mode", "FP32")
    level = config.optimization.graph.level if config.HasField("optimization") else 0
    if level != 0:
        names = {v: k for k, v in GRAPH_LEVELS.items()}
        knobs["graph_optimization"] = str(names.get(level, level))
    return knobs


def _policy_dict(policy: ModelQueuePolicy) -> dict:
    return {
        "max_queue_size": policy.max_queue_size,
        "timeout_us": policy.default_timeout_microseconds,
        "timeout_action": ModelQueuePolicy.TimeoutAction.Name(policy.timeout_action).lower(),
        "allow_timeout_override": policy.allow_timeout_override,
    }


def _policy_summary(name: str, policy: dict) -> str:
    parts = []
    if policy.get("max_queue_size"):
        parts.append(f"queue<={policy['max_queue_size']}")
    if policy.get("timeout_us"):
        parts.append(f"timeout={format_duration(policy['timeout_us'] / 1e6)}:{policy['timeout_action']}")
    return f"{name}:" + ",".join(parts) if parts else ""


PIPELINE_KNOBS = "pipeline"
"""The key under which a pipeline's knobs are kept, per composing model
(:func:`tritontune.config.pipeline.describe_configs`)."""


def knobs_summary(knobs: dict) -> str:
    """A config's knobs on one line: ``max_batch_size=64 batching(delay=1ms) 1xKIND_CPU ...``;
    a pipeline's, model by model: ``tokenizer: max_batch_size=32 ... | encoder: ...``."""
    if PIPELINE_KNOBS in knobs:
        models = knobs[PIPELINE_KNOBS].items()
        return " | ".join(f"{model}: {knobs_summary(model_knobs)}" for model, model_knobs in models)
    parts = [f"max_batch_size={knobs['max_batch_size']}"]
    if knobs.get("dynamic_batching"):
        inner = [f"delay={format_duration(knobs.get('max_queue_delay_us', 0) / 1e6)}"]
        if knobs.get("preferred_batch_sizes"):
            inner.append("preferred=" + ",".join(map(str, knobs["preferred_batch_sizes"])))
        if knobs.get("priority_levels"):
            inner.append(
                f"priorities={knobs['priority_levels']}(default {knobs['default_priority_level']})"
            )
        for name, policy in knobs.get("queue_policies", {}).items():
            summary = _policy_summary("level " + name if name != "default" else name, policy)
            if summary:
                inner.append(summary)
        parts.append(f"batching({' '.join(inner)})")
    else:
        parts.append("no batching")
    parts += [f"{g['count']}x{g['kind'].removeprefix('KIND_')}" for g in knobs["instance_group"]]
    if knobs.get("response_cache"):
        parts.append("cache")
    parts += [f"{k}={v}" for k, v in knobs.get("parameters", {}).items()]
    if knobs.get("precision"):
        parts.append(knobs["precision"])
    if knobs.get("tensorrt_precision"):
        parts.append(f"tensorrt({knobs['tensorrt_precision']})")
    if knobs.get("graph_optimization"):
        parts.append(f"graph={knobs['graph_optimization']}")
    return " ".join(parts)
