"""A *variant*: one point of the tuning space applied to a model's base config.

A :class:`Variant` names only the knobs it sets (``None`` keeps the base config's value), so the same
type describes a CLI ``profile`` request, an Optuna trial and an exported result.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field

from tritonclient.grpc.model_config_pb2 import ModelInstanceGroup, ModelQueuePolicy

from tritontune.config.model_config import ModelConfig, copy_config, set_parameter
from tritontune.errors import ConfigError

INSTANCE_KINDS = {"cpu": ModelInstanceGroup.KIND_CPU, "gpu": ModelInstanceGroup.KIND_GPU}
TIMEOUT_ACTIONS = {
    "reject": ModelQueuePolicy.REJECT,
    "delay": ModelQueuePolicy.DELAY,
}


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
    instance_count: int | None = None
    instance_kind: str | None = None
    response_cache: bool | None = None
    backend_parameters: Mapping[str, str] = field(default_factory=dict)

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
        )
        return True if any(v is not None for v in implied) else None

    def to_dict(self) -> dict:
        """Only the knobs this variant sets, JSON-ready."""
        data = asdict(self)
        data["backend_parameters"] = dict(self.backend_parameters)
        if self.preferred_batch_sizes is not None:
            data["preferred_batch_sizes"] = list(self.preferred_batch_sizes)
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
        policy = db.default_queue_policy
        if variant.max_queue_size is not None:
            policy.max_queue_size = variant.max_queue_size
        if variant.queue_timeout_us is not None:
            policy.default_timeout_microseconds = variant.queue_timeout_us
        if variant.timeout_action is not None:
            action = variant.timeout_action.lower()
            if action not in TIMEOUT_ACTIONS:
                raise ConfigError(
                    f"variant: timeout_action {variant.timeout_action!r} is not one of "
                    f"{', '.join(TIMEOUT_ACTIONS)}"
                )
            policy.timeout_action = TIMEOUT_ACTIONS[action]

    if variant.instance_count is not None or variant.instance_kind is not None:
        _set_instance_group(config, variant.instance_count, variant.instance_kind)

    if variant.response_cache is not None:
        config.response_cache.enable = variant.response_cache

    for key, value in variant.backend_parameters.items():
        set_parameter(config, key, value)
    return config


_QUEUE_KNOBS = {
    "max_queue_delay_us",
    "preferred_batch_sizes",
    "max_queue_size",
    "queue_timeout_us",
    "timeout_action",
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
    if config.HasField("response_cache"):
        knobs["response_cache"] = config.response_cache.enable
    if config.parameters:
        knobs["parameters"] = {k: v.string_value for k, v in sorted(config.parameters.items())}
    return knobs
