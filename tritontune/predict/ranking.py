"""The whole space predicted: every config's operating point under the SLO, from a calibration.

A point (given: :mod:`tritontune.search.grid`) is an execution setting, whose service curve the
calibration gives, and a scheduler part, which becomes a
:class:`~tritontune.predict.batcher.BatcherConfig` through the config tritontune would write; the
batcher simulator finds the highest load whose p99 meets the SLO, as a measured search would.
Ranking is pruned: configs are simulated in the order of their capacity, and once a capacity is
below the :data:`KEEP`-th prediction found, no later config can enter. Measurements correct the
prediction (:class:`Corrections`): a setting not measured takes the median correction of the
measured settings whose miss it shares, and which those are depends on how the measured one was
predicted (calibrated or contention-modelled: the split's miss; composed: the composition's). The
ranking is redone after every measurement (:meth:`RankedSpace.rank`), simulating only the configs
the corrections newly reach. See ``docs/concepts/prediction.md``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tritontune.config.model_config import ModelConfig
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.batcher import CLIENT_JITTER, BatcherConfig, operating_point
from tritontune.predict.calibration import (
    CORE_KNOBS,
    SPLIT_KNOBS,
    Calibration,
    Derivation,
    Prediction,
    execution_setting,
    setting_key,
)
from tritontune.predict.config import batcher_config_of

#: How many of the best predictions the ranking keeps (pruning stops below the last of them).
KEEP = 40
#: Until a setting is corrected by a measurement its prediction is taken to be this uncertain.
DEFAULT_BAND = 0.25
#: The same, by how the setting's service curve was obtained: composing knobs adds to it.
BANDS = {
    Derivation.MEASURED: DEFAULT_BAND,
    Derivation.COMPOSED: 0.35,
    Derivation.CONTENTION: 0.40,
}
#: A correction carried over from settings sharing the instances and threads is at least this
#: uncertain.
TRANSFERRED_BAND = 0.15
#: Measured over predicted throughput closer to 1 than this is noise, not a correction.
NOISE = 0.15


@dataclass(frozen=True)
class Predicted:
    """One config's prediction: its operating point under the SLO, per the model."""

    point: dict[str, Any]
    setting: str
    """The execution setting's key."""
    load: float
    throughput: float
    """Inferences per second at ``load``."""
    p99_s: float
    derivation: Derivation
    """How the setting's curve was obtained (calibrated itself, composed, with contention)."""
    sources: tuple[str, ...] = ()
    p50_s: float = float("nan")
    mean_batch: float = float("nan")

    @property
    def calibrated(self) -> bool:
        """The setting was calibrated itself (else composed from other calibrations)."""
        return self.derivation == Derivation.MEASURED

    @property
    def default_band(self) -> float:
        """How uncertain the prediction is before a measurement corrects it."""
        return BANDS[self.derivation]

    def to_dict(self, correction: float = 1.0, band: float = DEFAULT_BAND) -> dict[str, Any]:
        return {
            "throughput": self.throughput * correction,
            "raw_throughput": self.throughput,
            "correction": correction,
            "band": band,
            "load": self.load,
            "p99_s": self.p99_s,
            "p50_s": self.p50_s,
            "mean_batch": self.mean_batch,
            "setting": self.setting,
            "calibrated": self.calibrated,
            "derivation": self.derivation.value,
            "sources": list(self.sources),
        }


@dataclass
class Ranking:
    """The space predicted: the best :data:`KEEP` configs, best first."""

    predicted: list[Predicted]
    simulated: int
    """Configs simulated (the others were pruned by their capacity)."""
    configs: int
    """Configs in the (gridded) space."""
    seconds: float


class RankedSpace:
    """The ``points``' configs with their predictions made once (service curve, batcher config,
    capacity) and their simulations kept: :meth:`rank` with new corrections simulates only the
    configs those corrections newly bring into the ranking."""

    def __init__(
        self,
        points: Iterable[dict[str, Any]],
        calibration: Calibration,
        build: Callable[[dict[str, Any]], ModelConfig],
        *,
        slo_p99_s: float,
        load_mode: LoadMode,
        request_batch: int = 1,
        max_load: float | None = None,
    ) -> None:
        self._slo_p99_s = slo_p99_s
        self._load_mode = load_mode
        self._request_batch = request_batch
        self._max_load = max_load
        self._candidates: list[tuple[float, dict[str, Any], str, Prediction, BatcherConfig]] = []
        self._simulated: dict[int, Predicted | None] = {}
        started = time.monotonic()
        # Many points share an execution setting (13,056 points, 48 settings on MiniLM): each
        # setting's curve is predicted once (None: the calibration can't cover it).
        predictions: dict[str, Prediction | None] = {}
        for point in points:
            setting = execution_setting(point)
            key = setting_key(setting)
            if key not in predictions:
                try:
                    predictions[key] = calibration.predict(setting)
                except KeyError:
                    predictions[key] = None
            prediction = predictions[key]
            if prediction is None:
                continue
            config = batcher_config_of(build(point))
            capacity = _capacity(prediction, config, request_batch)
            self._candidates.append((capacity, point, key, prediction, config))
        self.seconds = time.monotonic() - started
        """Time spent predicting and simulating so far."""

    @property
    def settings(self) -> set[str]:
        """The execution settings (keys) of the space's predicted configs."""
        return {c[2] for c in self._candidates}

    def rank(
        self,
        factor: Callable[[str], float] | None = None,
        keep: int = KEEP,
        where: Callable[[str], bool] | None = None,
    ) -> Ranking:
        """The best ``keep`` configs by throughput times their setting's ``factor`` (the
        corrections; none by default), best first; only of the settings ``where`` accepts (all
        by default)."""
        started = time.monotonic()
        correct = factor or (lambda _key: 1.0)
        factors = {key: correct(key) for key in self.settings}
        order = sorted(
            (i for i, c in enumerate(self._candidates) if where is None or where(c[2])),
            key=lambda i: -self._candidates[i][0] * factors[self._candidates[i][2]],
        )
        best: list[tuple[float, Predicted]] = []
        for index in order:
            capacity, _, key, _, _ = self._candidates[index]
            if len(best) >= keep and capacity * factors[key] < best[keep - 1][0]:
                break
            predicted = self._simulate(index)
            if predicted is None:
                continue  # even the lowest load misses the SLO
            best.append((predicted.throughput * factors[key], predicted))
            best.sort(key=lambda entry: -entry[0])
            del best[keep:]
        self.seconds += time.monotonic() - started
        return Ranking([p for _, p in best], len(self._simulated), len(self._candidates), self.seconds)

    def _simulate(self, index: int) -> Predicted | None:
        if index in self._simulated:
            return self._simulated[index]
        _, point, key, prediction, config = self._candidates[index]
        load, result = operating_point(
            prediction.curve,
            config,
            slo_p99_s=self._slo_p99_s,
            mode="rate" if self._load_mode == LoadMode.RATE else "concurrency",
            request_batch=self._request_batch,
            overhead_s=prediction.overhead_s,
            path_s=prediction.path_s,
            jitter=CLIENT_JITTER,
            max_load=self._max_load,
        )
        predicted = None
        if load > 0:
            predicted = Predicted(
                point=point,
                setting=key,
                load=load,
                throughput=result.throughput_ips,
                p99_s=result.p99_s,
                derivation=prediction.derivation,
                sources=prediction.sources,
                p50_s=result.p50_s,
                mean_batch=result.mean_batch,
            )
        self._simulated[index] = predicted
        return predicted


def _capacity(prediction: Prediction, config: BatcherConfig, request_batch: int) -> float:
    """Inferences per second with every instance busy at its best batch (and no more than the
    request path lets through): an upper bound of any load's throughput, for pruning (the best
    batch need not be the largest)."""
    curve = prediction.curve
    if not config.batching:
        best = config.instances * request_batch / curve.mean(request_batch)
    else:
        largest = max(config.max_batch_size // request_batch, 1) * request_batch
        sizes = range(request_batch, largest + 1, request_batch)
        best = config.instances * max(size / curve.mean(size) for size in sizes)
    return min(best, request_batch / prediction.path_s) if prediction.path_s else best


def _knobs(setting: str) -> dict[str, Any]:
    """The knobs of a setting key (:func:`setting_key`'s JSON); empty for any other key."""
    try:
        knobs = json.loads(setting)
    except ValueError:
        return {}
    return knobs if isinstance(knobs, dict) else {}


def core_group(setting: str) -> str | None:
    """The instances and threads of a setting key (what settings sharing a split of the cores
    have in common); None for a key without them."""
    knobs = _knobs(setting)
    if not any(name in knobs for name in CORE_KNOBS):
        return None
    return setting_key({name: knobs.get(name) for name in SPLIT_KNOBS})


def composition(setting: str) -> str | None:
    """A setting key's knobs other than its split of the cores (precision, graph level, ...):
    what settings composed alike have in common; None for a key without knobs."""
    knobs = _knobs(setting)
    if not knobs:
        return None
    return setting_key({name: value for name, value in knobs.items() if name not in SPLIT_KNOBS})


@dataclass
class Corrections:
    """Measured over predicted throughput, per execution setting."""

    by_setting: dict[str, list[float]] = field(default_factory=dict)
    composed: set[str] = field(default_factory=set)
    """The measured settings whose prediction was :attr:`Derivation.COMPOSED` around a calibrated
    split of the cores: their misses are carried over to settings composed alike, not to those
    sharing the split. On MiniLM, 2 instances x 1 thread in INT8 static at graph level ``basic``
    (INT8 dynamic's graph ratio) was predicted at 84 sentences/s and served 38; carried over to
    its split, the miss put INT8 dynamic at that split, the best known config, out of a search's
    reach for its 6 trials (``bench/results/spread-fit-2026-11-29``)."""

    @classmethod
    def of(cls, measured: Iterable[tuple[Mapping[str, Any] | None, float]]) -> Corrections:
        """From each measured config's prediction (:meth:`Predicted.to_dict`; None: none was
        made) and the throughput measured."""
        corrections = cls()
        for predicted, throughput in measured:
            if not predicted or not predicted.get("raw_throughput"):
                continue
            ratio = throughput / predicted["raw_throughput"]
            corrections.by_setting.setdefault(predicted["setting"], []).append(ratio)
            if predicted.get("derivation") == Derivation.COMPOSED.value:
                corrections.composed.add(predicted["setting"])
        return corrections

    def _shared(self, setting: str) -> list[float]:
        """The corrections of the other measured settings whose miss ``setting`` shares: its
        split of the cores (instances and threads) for a split-wide miss, its composition for a
        composed one."""
        group, kind = core_group(setting), composition(setting)

        def shares(key: str) -> bool:
            if key in self.composed:
                return kind is not None and composition(key) == kind
            return group is not None and core_group(key) == group

        return [
            r
            for key, ratios in self.by_setting.items()
            if key != setting and shares(key)
            for r in ratios
        ]

    def novelty(self, setting: str) -> int:
        """What measuring ``setting`` would teach that no measurement has: 2 for a split of the
        cores (instances and threads) never measured, 1 for a precision never measured, both
        added; 0 once the setting itself was measured."""
        if setting in self.by_setting:
            return 0
        group = core_group(setting)
        novel = 0
        if group is not None and all(core_group(key) != group for key in self.by_setting):
            novel += 2
        precision = _knobs(setting).get("precision")
        if precision is not None and all(
            _knobs(key).get("precision") != precision for key in self.by_setting
        ):
            novel += 1
        return novel

    def factor(self, setting: str) -> float:
        """The setting's median correction; before it has its own, that of the settings whose
        miss it shares (:meth:`_shared`), else of every setting's but the composed ones' (a
        composition's miss says nothing of another's). 1 while that is within :data:`NOISE`
        of 1: on a shared machine a measurement is that noisy, and correcting by noise made the
        example's predictions worse (median error 20 % corrected against 9 % uncorrected,
        ``bench/prediction.py``)."""
        own = self.by_setting.get(setting)
        every = [
            r for key, ratios in self.by_setting.items() if key not in self.composed for r in ratios
        ]
        ratios = own or self._shared(setting) or every
        if not ratios:
            return 1.0
        middle = statistics.median(ratios)
        return middle if abs(middle - 1) > NOISE else 1.0

    def band(self, setting: str, default: float = DEFAULT_BAND) -> float:
        """How far the corrected prediction may be off: the spread of the setting's own
        corrections (at least 10 %); before any, that of the settings whose miss it shares
        (:meth:`_shared`; at least :data:`TRANSFERRED_BAND`); before those, ``default`` (the prediction's
        own: :attr:`Predicted.default_band`)."""
        own = self.by_setting.get(setting)
        if own:
            return _spread(own, 0.10)
        shared = self._shared(setting)
        if shared:
            return _spread(shared, TRANSFERRED_BAND)
        return default


def _spread(ratios: Sequence[float], least: float) -> float:
    if len(ratios) == 1:
        return least
    middle = statistics.median(ratios)
    return max(least, max(abs(r / middle - 1) for r in ratios))
