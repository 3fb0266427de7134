"""A Triton model config as the batcher simulator sees it (:class:`BatcherConfig`)."""

from __future__ import annotations

from tritontune.config.model_config import ModelConfig
from tritontune.predict.batcher import BatcherConfig, TimeoutAction

#: ``TimeoutAction`` of Triton's ``ModelQueuePolicy`` (REJECT = 0, DELAY = 1).
_DELAY = 1


def batcher_config_of(config: ModelConfig) -> BatcherConfig:
    """The scheduling part of ``config``: batch sizes, delay, instances, priorities and the
    default queue policy. Instance groups count their ``count`` (at least 1 each, as tritontune
    writes every count it tunes); per-level queue policies other than the default are not
    modelled (the default level's policy applies to every level)."""
    instances = sum(max(group.count, 1) for group in config.instance_group) or 1
    if not config.HasField("dynamic_batching"):
        return BatcherConfig(max_batch_size=config.max_batch_size, instances=instances)
    batching = config.dynamic_batching
    policy = batching.default_queue_policy
    timeout_s = (
        policy.default_timeout_microseconds / 1e6 if policy.default_timeout_microseconds else None
    )
    levels = int(batching.priority_levels)
    return BatcherConfig(
        max_batch_size=config.max_batch_size,
        dynamic_batching=True,
        max_queue_delay_s=batching.max_queue_delay_microseconds / 1e6,
        preferred_batch_sizes=tuple(
            int(size) for size in batching.preferred_batch_size if 0 < size <= config.max_batch_size
        ),
        instances=instances,
        priority_levels=levels,
        default_priority_level=int(batching.default_priority_level) if levels else 0,
        max_queue_size=int(policy.max_queue_size),
        default_timeout_s=timeout_s,
        timeout_action=TimeoutAction.DELAY if policy.timeout_action == _DELAY else TimeoutAction.REJECT,
        allow_timeout_override=bool(policy.allow_timeout_override),
    )
