"""The instances of one machine, shared by the models served on it together.

A model searched alone may take as many instances as the machine has CPU cores (at least 2), or
4 per GPU; models served side by side split that one budget (:class:`InstanceBudget`), since
instances beyond it time-slice the same cores and measure contention, not configs. A point over
the budget is **clamped, not pruned**: measured as the nearest point within it
(:func:`split_by_demand`), because a pruned trial would spend a trial of ``--trials`` and teach
TPE nothing (it leaves failed trials out of its model), so it would go on proposing them. Each
model's range is narrowed first to what fits beside the others (:meth:`InstanceBudget.narrow`),
fixed counts are kept, and fixed counts that cannot fit are refused before the search
(:meth:`InstanceBudget.check_fits`). Threads are not budgeted. See ``docs/concepts/workloads.md``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from tritontune.config.model_config import ModelConfig
from tritontune.config.pipeline import PipelineVariant
from tritontune.config.validate import TargetCapabilities
from tritontune.enums import TextEnum
from tritontune.errors import InputError
from tritontune.search.space import Choice, Dimension, IntRange, SearchSpace, is_fixed

#: The most instances one model's space has per GPU (``instance_count``'s range on a GPU).
GPU_INSTANCES = 4


class Device(TextEnum):
    """What the instances of a budget run on."""

    CPU = "cpu"
    GPU = "gpu"


def instances_of(config: ModelConfig) -> int:
    """The instances ``config`` runs (its instance groups' counts, one where a group says none)."""
    return sum(group.count or 1 for group in config.instance_group) or 1


def split_by_demand(units: int, demand: Mapping[str, float]) -> dict[str, int]:
    """``units`` shared in proportion to ``demand``, at least one each (so more than ``units``
    only when there are fewer units than names); the remainder goes by largest fraction."""
    floor = {name: 1 for name in demand}
    left = units - len(floor)
    total = sum(demand.values())
    if left <= 0 or total <= 0:
        return floor
    exact = {name: left * d / total for name, d in demand.items()}
    whole = {name: int(e) for name, e in exact.items()}
    by_fraction = sorted(demand, key=lambda name: exact[name] - whole[name], reverse=True)
    for name in by_fraction[: left - sum(whole.values())]:
        whole[name] += 1
    return {name: floor[name] + whole[name] for name in demand}


@dataclass(frozen=True)
class InstanceBudget:
    """The instances the tuned models of a group may have in all (see the module docstring)."""

    limit: int
    """Instances in all: the machine's CPU cores (at least 2), or per GPU on GPUs (Triton's
    ``count`` of a GPU instance group is per device, so the sum of counts is what each GPU runs)."""
    device: Device = Device.CPU
    reserved: int = 0
    """Instances of the models served with their own configs (not tuned): taken out first."""

    @classmethod
    def of(cls, target: TargetCapabilities, cpu_count: int, reserved: int = 0) -> InstanceBudget:
        if target.gpu_count > 0:
            return cls(GPU_INSTANCES, Device.GPU, reserved)
        return cls(max(2, cpu_count), Device.CPU, reserved)

    @property
    def available(self) -> int:
        """What the tuned models share (at least one instance each is always allowed)."""
        return max(self.limit - self.reserved, 1)

    def describe(self) -> str:
        where = f"{self.limit} CPU cores" if self.device == Device.CPU else f"{self.limit} per GPU"
        kept = f", {self.reserved} of them the untuned models' own" if self.reserved else ""
        return f"{self.available} instances in all ({where}{kept})"

    def narrow(self, parts: Mapping[str, SearchSpace]) -> dict[str, SearchSpace]:
        """Each model's ``instance_count`` range capped at what fits beside the fewest instances
        of every other model (:func:`fewest_instances`: one, unless its space says more)."""
        fewest = {model: fewest_instances(space) for model, space in parts.items()}
        narrowed = {}
        for model, space in parts.items():
            cap = max(self.available - (sum(fewest.values()) - fewest[model]), 1)
            count = space.dimensions.get("instance_count")
            capped = _capped(count, cap) if count is not None else None
            narrowed[model] = space.replace("instance_count", capped) if capped else space
        return narrowed

    def check_fits(self, parts: Mapping[str, SearchSpace], where: str) -> None:
        """Refuse spaces (a space file's, named ``where``) whose fewest instances add up to more
        than the budget: a fixed count, or a range's low end, the others could not fit beside.
        One instance each is always allowed (as :meth:`available` allows it)."""
        fewest = {model: fewest_instances(space) for model, space in parts.items()}
        total = sum(fewest.values())
        if total > max(self.available, len(parts)):
            asked = ", ".join(f"{model} {count}" for model, count in fewest.items())
            raise InputError(
                f"{where}: instance_count: the models' fewest instances ({asked}) add up to "
                f"{total}, more than they share: {self.describe()}; lower a fixed count or a "
                "range's min"
            )

    def clamp(self, variant: PipelineVariant, keep: Collection[str] = ()) -> PipelineVariant:
        """``variant`` within the budget: unchanged when its instances fit, else the budget split
        by the instances it proposed. The models in ``keep`` (their space fixes their count) keep
        their instances, and so does a model whose variant leaves them to its own config
        (counted as one); the others share what is left."""
        counts = {
            m: v.instance_count
            for m, v in variant.models
            if v.instance_count is not None and m not in keep
        }
        kept = sum(v.instance_count or 1 for m, v in variant.models if m not in counts)
        units = self.available - kept
        if not counts or sum(counts.values()) <= units:
            return variant
        shares = split_by_demand(units, counts)
        return PipelineVariant(
            models=tuple(
                (m, dataclasses.replace(v, instance_count=shares[m]) if m in shares else v)
                for m, v in variant.models
            )
        )

    def total(self, variant: PipelineVariant) -> int:
        """The instances ``variant`` sets in all (a model left to its own config counts one)."""
        return sum(v.instance_count or 1 for _, v in variant.models)


def fewest_instances(space: SearchSpace) -> int:
    """The fewest instances ``space`` lets its model have (one where it leaves them to the
    model's own config)."""
    count = space.dimensions.get("instance_count")
    if isinstance(count, IntRange):
        return count.low
    if isinstance(count, Choice):
        return min(int(v) for v in count.values)
    return 1


def fixed_instances(space: SearchSpace) -> bool:
    """Whether ``space`` fixes its model's instance count (one value)."""
    count = space.dimensions.get("instance_count")
    return count is not None and is_fixed(count)


def _capped(dimension: Dimension, cap: int) -> Dimension | None:
    """``dimension`` (an instance count) without values above ``cap``; None when unchanged."""
    if isinstance(dimension, IntRange) and dimension.high > cap:
        return IntRange(min(dimension.low, cap), cap)
    if isinstance(dimension, Choice) and any(int(v) > cap for v in dimension.values):
        kept = tuple(v for v in dimension.values if int(v) <= cap)
        return Choice(kept or (min(dimension.values),))
    return None
