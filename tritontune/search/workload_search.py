"""``search --workload``: the config with the highest capacity for a traffic mix.

The workload search is the one loop (:mod:`tritontune.search.loop`) with
:class:`TrafficObjective`: a trial's value is the work it served (inferences per second, every
class together) at its capacity, the workload's mix scaled up until a class missed its objective
(:func:`find_traffic_capacity`). Work served, not the rate offered: a class that may be shed
meets its objective at any rejection rate, so the offered rate rewarded the config that rejected
the most. The space grows by
the scheduler's knobs: whether the classes' priority levels are used (``priorities``),
admission control, the lowest level's ``max_queue_size`` (``admission``, ``none`` for an
unbounded queue), and, on a server tritontune launched, the serving layout (``layout``: one
shared model, or one endpoint per class split from the point's config by
:func:`endpoint_variants`, its instances and compute threads shared by demand, each endpoint with
its own batch size and instance count searched too: :class:`EndpointKnobs`). Batch sizes
smaller than a class's requests are left out of the space (those requests could not be
served). So it has every guarantee of the single-class search: budget and
``--timeout``, heartbeats and lost-trial recovery for shared studies, a dead server restarted and
the config measured again, Ctrl-C resumable.

After the budget, the top configs, the best shared one split into one endpoint per class
(:func:`endpoint_variants`: the other serving layout, unless an endpoint trial is on top) and
the baseline (the model's own config as
it is) are measured again in interleaved rounds (:mod:`tritontune.search.final_rounds`), and the
winner is the best median: one screening figure on a noisy machine picks a lucky config as often
as a good one. The winner is picked by the playoff's rule (:func:`tritontune.study.duet.decide`,
through :func:`tritontune.study.verdict.workload_winner`), with no simplicity to break a tie:
the most work served wins, and a finalist whose order against it the paired per-round ratios
could not tell is stated as uncertain (no extra rounds: each round is a capacity ramp). Each
finalist keeps the config text of every model it serves, so ``export`` writes exactly what was
measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import optuna

from tritontune.config.model_config import ModelConfig, config_to_text, copy_config
from tritontune.config.pipeline import PipelineVariant, describe_configs
from tritontune.config.variant import Variant, describe_config
from tritontune.errors import InputError
from tritontune.hostinfo import this_worker
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import Layout, Traffic
from tritontune.precision.prepare import AccuracySettings
from tritontune.search.final_rounds import interleaved_rounds
from tritontune.search.first_trials import FirstTrials, use_first_trials
from tritontune.search.instance_budget import instances_of, split_by_demand
from tritontune.search.loop import Budget, LoopProgress, optimize
from tritontune.search.objective import Evaluation
from tritontune.search.phases import Phases
from tritontune.search.pipeline_space import PipelineSpace, knob_name
from tritontune.search.precisions import PrecisionsProgress, checked_precisions
from tritontune.search.setup import make_sampler, start_study, use_space
from tritontune.search.space import Choice, IntRange, SearchSpace
from tritontune.search.traffic_capacity import (
    DEFAULT_MAX_RATE,
    DEFAULT_START_RATE,
    MIN_RATE_FRACTION,
    NEAR_STEP,
    TrafficCapacity,
    find_traffic_capacity,
)
from tritontune.serving.bench import Bench
from tritontune.study.duet import settled
from tritontune.study.figures import Finalist
from tritontune.study.handle import TuningStudy
from tritontune.study.records import (
    RecordedPrecision,
    TrialResult,
    WorkloadFinal,
    WorkloadIdentity,
)
from tritontune.study.storage import DEFAULT_STORAGE, storage_label
from tritontune.study.verdict import workload_final

#: Admission control bounds searched (the lowest priority level's queue, in requests).
ADMISSION_CHOICES: tuple[Any, ...] = ("none", 16, 64, 256)
#: A workload search's windows: each class needs its own tail (the mixed measurement also waits
#: for enough answers of every class). Where a class's replies are slow to come (MiniLM's mix:
#: 2-5 interactive replies a second), a level ends at its clean time, ``max_windows`` windows at
#: their longest: 6 s, or the time cap (11 s) where a class passes by a hair. With 6 windows
#: (7.2 s) a MiniLM trial's ten levels took 85 s; the verdict of a class far from its bound does
#: not change in the last second, and one near it takes the cap anyway.
WORKLOAD_MEASURE = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=50, max_windows=5)
#: How close a workload search's capacity ramp closes in (the gap between the rate held and the
#: lowest that missed): a bracket of x1.25 is bisected once. A level's verdict near a capacity
#: is itself this uncertain where replies are slow: of MiniLM's near-capacity levels, a third
#: that missed held on their second try, and keeping up within 10 % of a backlog is a queue
#: still filling as much as one growing; a finer walk bisected that noise. The final rounds
#: re-measure the finalists, and ``profile --workload`` keeps 10 %.
CAPACITY_PRECISION = 0.15


@dataclass(frozen=True)
class WorkloadSearchSettings:
    trials: int | None = 12
    timeout_s: float | None = None
    seed: int | None = None
    storage: str | optuna.storages.BaseStorage = DEFAULT_STORAGE
    study_name: str | None = None
    host_group: str | None = None
    """Workers on other hardware search as their own group (``NAME@GROUP``)."""
    start_rate: float = DEFAULT_START_RATE
    max_rate: float | None = None
    """The highest total rate (req/s, every class together) a capacity ramp tries (None:
    :data:`DEFAULT_MAX_RATE`): what the clients can ever send, or a small cap where a test
    checks plumbing."""
    top: int = 2
    """Configs re-measured against the baseline after the budget."""
    rounds: int = 3
    endpoints: bool = True
    """Also measure the best config as one endpoint per class (needs a server tritontune
    launched: the endpoints are models it adds to the repository)."""
    layouts: tuple[Layout, ...] | None = None
    """The serving layouts the trials search (None: both where :attr:`endpoints` allows them
    and the workload has several classes, else the shared model only)."""
    endpoint_knobs: bool = True
    """An endpoint trial also searches each endpoint's own ``max_batch_size`` and instance count
    (where the space has several), rather than only splitting the trial's config."""
    measure: MeasureSettings = WORKLOAD_MEASURE
    sampler: optuna.samplers.BaseSampler | None = None
    accuracy: AccuracySettings | None = None
    """How precision variants are judged (on the classes' own request data)."""

    def study_name_for(self, model: str, traffic: Traffic) -> str:
        names = "-".join(c.name for c in traffic.classes)
        name = self.study_name or f"{model}-workload-{names}"
        return f"{name}@{self.host_group}" if self.host_group else name

    @property
    def storage_name(self) -> str:
        return storage_label(self.storage)


@dataclass(frozen=True)
class WorkloadSearchResult:
    study_name: str
    trials: list[TrialResult]
    """The measured (or failed) trials, best first."""
    final: WorkloadFinal = field(default_factory=lambda: WorkloadFinal((), None))
    last_capacity: dict[str, TrafficCapacity] = field(default_factory=dict)
    """Each finalist's capacity in the last round (by :attr:`Finalist.label`), every level's
    figures (for the report)."""
    stop_reason: str | None = None
    trials_this_run: int = 0
    restarts: int = 0
    precisions: dict[str, RecordedPrecision] = field(default_factory=dict)
    """The precision variants checked before the search: accepted or not, with accuracy."""
    final_rounds_reused: bool = False
    """The final rounds were not run by this run: the study's were over the same finalists
    (kept; empty while another worker of a shared study runs them)."""
    phases: Phases = field(default_factory=Phases)
    """Seconds per phase of this run."""
    settled_after: dict[str, int] = field(default_factory=dict)
    """Finalists whose place no further round could change, by label: after how many rounds
    they sat out the rest (:func:`tritontune.study.duet.settled`)."""

    @property
    def finalists(self) -> tuple[Finalist, ...]:
        return self.final.finalists

    @property
    def winner(self) -> Finalist | None:
        return self.final.winner

    @property
    def baseline(self) -> Finalist | None:
        return self.final.baseline

    def best_of(self, layout: Layout) -> Finalist | None:
        return self.final.best_of(layout)

    @property
    def layout_ratio(self) -> float | None:
        return self.final.layout_ratio

    def winner_capacity(self) -> TrafficCapacity | None:
        winner = self.winner
        return self.last_capacity.get(winner.label) if winner is not None else None

    def winner_at_capacity(self) -> dict[str, Any] | None:
        """The winner's last final round at its capacity: each class's work served, and each
        model's own figures from Triton's statistics of the same span (which class it served,
        its requests, batches, queue and compute time per request)."""
        winner, capacity = self.winner, self.winner_capacity()
        if winner is None or capacity is None or capacity.best is None:
            return None
        by_model = {}
        for model, split in capacity.best.server.items():
            by_model[model] = {
                "classes": [c for c, m in winner.routes.items() if m == model],
                "requests": split.requests,
                "executions": split.executions,
                "avg_batch_size": round(split.avg_batch_size, 3),
                "avg_queue_ms": round(split.avg_queue_s * 1e3, 4),
                "avg_compute_ms": round(split.avg_compute_s * 1e3, 4),
            }
        return {
            "total_rate_per_s": round(capacity.total_rate, 3),
            "served_infer_per_s_by_class": {
                name: round(v, 3) for name, v in capacity.served_by_class().items()
            },
            "by_class": capacity.class_figures(),
            "by_model": by_model,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "study": self.study_name,
            "precisions": {p: c.to_dict() for p, c in self.precisions.items()} or None,
            **self.final.to_dict(),
            "trials": [
                {
                    "trial": t.number,
                    "point": t.params,
                    "knobs": t.knobs,
                    "served_infer_per_s": t.served,
                    "served_infer_per_s_by_class": (
                        t.capacity.detail.get("served_infer_per_s_by_class") if t.capacity else None
                    ),
                    "total_rate_per_s": t.total_rate,
                    "error": t.error,
                }
                for t in self.trials
            ],
            "winner_at_capacity": self.winner_at_capacity(),
            "final_rounds_reused": self.final_rounds_reused,
            "final_rounds_settled_after": dict(self.settled_after),
            "phase_seconds": dict(self.phases.seconds),
            "stopped_early_because": self.stop_reason,
            "trials_this_run": self.trials_this_run,
            "server_restarts": self.restarts,
        }


@dataclass
class WorkloadSearchProgress:
    on_trial_start: Callable[[int, int | None, dict[str, Any]], None] | None = None
    on_trial_done: Callable[[TrialResult, TrialResult | None, float | None], None] | None = None
    """(this trial, the best so far, ETA in seconds or None)."""
    on_final_round: Callable[[int, Finalist, float | None], None] | None = None
    """(round, finalist, its total rate; None when it failed)."""
    on_precisions: PrecisionsProgress | None = None
    """The precision variants built and checked before the search (accepted or not)."""
    on_first_trials: Callable[[FirstTrials], None] | None = None
    """The first trials (each accepted precision, each compute setting)."""
    on_settled: Callable[[dict[str, int]], None] | None = None
    """The finalists that sat out the last rounds, by label: after how many rounds."""


def workload_space(space: SearchSpace, traffic: Traffic) -> SearchSpace:
    """``space`` without batch sizes too small for a class's requests; for several models (a
    workload whose classes name them), each model's without those too small for its classes."""
    if isinstance(space, PipelineSpace) and traffic.routed:
        parts = {m: workload_space(space.part(m), traffic.served_by(m)) for m in space.models}
        return PipelineSpace.of(parts, budget=space.budget)
    largest = max(c.request.batch_size for c in traffic.classes)
    batch_sizes = space.dimensions.get("max_batch_size")
    if isinstance(batch_sizes, Choice):
        kept = tuple(v for v in batch_sizes.values if v >= largest)
        return space.replace("max_batch_size", Choice(kept or (largest,)))
    return space


#: A workload point's own keys, besides the space's knobs.
_SCHEDULER_KEYS = ("priorities", "admission", "layout")
#: An endpoint's own knobs in a point: ``endpoint.<class>.max_batch_size`` and
#: ``endpoint.<class>.instances``.
ENDPOINT_KEY_PREFIX = "endpoint."


@dataclass(frozen=True)
class EndpointKnobs:
    """One endpoint's own knobs, searched for it alone in the endpoint layout (None: what the
    split of the point's config gives it). An interactive endpoint may want small executions
    (a batch-8 execution is never preempted) while the batch endpoint wants big ones: one
    config split in two cannot say both."""

    max_batch_size: int | None = None
    instances: int | None = None

    @staticmethod
    def key(class_name: str, knob: str) -> str:
        return f"{ENDPOINT_KEY_PREFIX}{class_name}.{knob}"


def endpoint_knobs(point: Mapping[str, Any]) -> dict[str, EndpointKnobs]:
    """Each class's own endpoint knobs in ``point`` (classes without any are left out)."""
    found: dict[str, dict[str, int]] = {}
    for key, value in point.items():
        if key.startswith(ENDPOINT_KEY_PREFIX):
            name, _, knob = key[len(ENDPOINT_KEY_PREFIX) :].rpartition(".")
            found.setdefault(name, {})[knob] = int(value)
    return {name: EndpointKnobs(**knobs) for name, knobs in found.items()}


def describe_endpoint_knobs(point: Mapping[str, Any]) -> str:
    """``interactive: max_batch_size=4 1 instance; batch: ...`` (empty without any)."""
    parts = []
    for name, own in endpoint_knobs(point).items():
        said = []
        if own.max_batch_size is not None:
            said.append(f"max_batch_size={own.max_batch_size}")
        if own.instances is not None:
            said.append(f"{own.instances} instance" + ("s" if own.instances != 1 else ""))
        parts.append(f"{name}: {' '.join(said)}")
    return "; ".join(parts)


@dataclass(frozen=True)
class EndpointChoices:
    """What each endpoint's own knobs are searched over (from the space before
    :func:`workload_space` narrowed it: an endpoint serves one class, so only that class's
    requests must fit its batch size). An empty tuple: not searched per endpoint."""

    batch_sizes: tuple[int, ...] = ()
    instances: tuple[int, ...] = ()

    @classmethod
    def of(cls, space: SearchSpace) -> EndpointChoices:
        dims = space.dimensions
        sizes = dims.get("max_batch_size")
        batch_sizes = tuple(int(v) for v in sizes.values) if isinstance(sizes, Choice) else ()
        count = dims.get("instance_count")
        if isinstance(count, Choice):
            instances = tuple(int(v) for v in count.values)
        elif isinstance(count, IntRange):
            instances = tuple(range(count.low, count.high + 1))
        else:
            instances = ()
        return cls(batch_sizes if len(batch_sizes) > 1 else (), instances if len(instances) > 1 else ())

    def suggest(self, trial: optuna.Trial, traffic: Traffic) -> dict[str, int]:
        point: dict[str, int] = {}
        for c in traffic.classes:
            fitting = [b for b in self.batch_sizes if b >= c.request.batch_size]
            if len(fitting) > 1:
                key = EndpointKnobs.key(c.name, "max_batch_size")
                point[key] = trial.suggest_categorical(key, fitting)
            if self.instances:
                key = EndpointKnobs.key(c.name, "instances")
                point[key] = trial.suggest_categorical(key, list(self.instances))
        return point


@dataclass(frozen=True)
class EndpointSplit(Variant):
    """A point in the endpoint layout: the config it was split from (its own fields, which the
    trial keeps as its config) and the split, one variant per class (what is loaded)."""

    split: tuple[tuple[str, Variant], ...] = ()


def _split_point(point: Mapping[str, Any]) -> tuple[dict[str, Any], int | None]:
    """A workload point's knobs of the space, and its admission bound (None: unbounded)."""
    knobs = {
        k: v
        for k, v in point.items()
        if k not in _SCHEDULER_KEYS and not k.startswith(ENDPOINT_KEY_PREFIX)
    }
    admission = point.get("admission", "none")
    return knobs, None if admission == "none" else int(admission)


def point_layout(point: Mapping[str, Any]) -> Layout:
    """The serving layout a point was measured in (shared when it does not say)."""
    return Layout(point.get("layout", str(Layout.SHARED)))


def point_variant(space: SearchSpace, traffic: Traffic, point: Mapping[str, Any]) -> Variant:
    """The config a workload point stands for: the space's knobs, then the scheduler's; for the
    endpoint layout, those knobs split into one endpoint per class (an :class:`EndpointSplit`;
    the instance count and intra-op threads split are the point's, else one instance and
    onnxruntime's default threads), each endpoint with its own knobs where the point has them.
    For several models (:func:`group_variant`), a variant per model."""
    if isinstance(space, PipelineSpace) and traffic.routed:
        return group_variant(space, traffic, point)
    knobs, admission = _split_point(point)
    if point_layout(point) == Layout.ENDPOINTS:
        base = space.to_variant(knobs)
        threads = base.backend_parameters.get("intra_op_thread_count", "")
        split = endpoint_variants(
            traffic,
            base,
            base.instance_count or 1,
            admission,
            int(threads) if threads.isdigit() and int(threads) > 0 else None,
            endpoint_knobs(point),
        )
        fields = {f.name: getattr(base, f.name) for f in dataclasses.fields(Variant)}
        return EndpointSplit(**fields, split=tuple(split.items()))
    if point.get("dynamic_batching", True) is False:
        return space.to_variant(knobs)  # no scheduler queue: no priorities, timeouts or bound
    return traffic.scheduled(
        space.to_variant(knobs),
        priorities=bool(point.get("priorities", False)),
        admission=admission,
    )


def group_variant(space: PipelineSpace, traffic: Traffic, point: Mapping[str, Any]) -> PipelineVariant:
    """The configs of a point of several models, each class calling its own: each model's knobs
    (``MODEL/KNOB``) with the scheduler of the classes it serves (``MODEL/priorities``,
    ``MODEL/admission``: :func:`point_variant` on that model's part and classes), the models'
    instances together clamped to the machine's budget (:mod:`.instance_budget`)."""
    knobs = space.knobs_by_model(point)
    return space.within_budget(
        PipelineVariant(
            models=tuple(
                (m, point_variant(space.part(m), traffic.served_by(m), knobs[m])) for m in space.models
            )
        )
    )


def endpoint_variants(
    traffic: Traffic,
    variant: Variant,
    instances: int,
    admission: int | None,
    threads: int | None = None,
    own: Mapping[str, EndpointKnobs] | None = None,
) -> dict[str, Variant]:
    """The other layout of a config: one endpoint per class, each with ``variant``'s knobs and no
    priority levels (it serves one class), the class's queue timeout as its queue's, the
    admission bound on the endpoints of classes that may be shed, and the class's share of the
    ``instances`` by inference demand (rate x batch size), at least one each.

    ``threads`` (onnxruntime's ``intra_op_thread_count`` of the shared config; None or 0: its
    default, left alone) is split too: the shared config ran ``instances x threads`` compute
    threads, and the endpoints share that many by demand, at least one per instance, instead of
    each taking ``threads`` per instance. On 2 cores, MiniLM's interactive endpoint (1 thread)
    beside a batch endpoint of 2 threads had a p99 of 163 ms; beside one of 1 thread, 83-98 ms
    (docs/concepts/workloads.md). A config without the dynamic batcher has no scheduler queue:
    its endpoints only split the instances and threads.

    ``own``: an endpoint's own knobs (:class:`EndpointKnobs`), searched for it alone, in place
    of what the split gives it: its ``max_batch_size`` (a preferred batch size of the shared
    config's largest follows it), its instance count (its share of the compute threads is then
    spread over that many)."""
    own = own or {}
    fractions = traffic.fractions()
    demand = {c.name: fractions[c.name] * c.request.batch_size for c in traffic.classes}
    total = sum(demand.values())
    counts = {c: max(1, round(instances * d / total)) for c, d in demand.items()}
    budget = split_by_demand(instances * threads, demand) if threads else None
    out = {}
    for c in traffic.classes:
        timeout = c.request.timeout_us or None
        knobs = own.get(c.name, EndpointKnobs())
        share = knobs.instances or counts[c.name]
        parameters = dict(variant.backend_parameters)
        if budget is not None:
            parameters["intra_op_thread_count"] = str(max(1, budget[c.name] // share))
        sized = variant
        if knobs.max_batch_size is not None:
            preferred = variant.preferred_batch_sizes
            if preferred and variant.max_batch_size in preferred:
                preferred = (knobs.max_batch_size,)
            sized = dataclasses.replace(
                variant, max_batch_size=knobs.max_batch_size, preferred_batch_sizes=preferred
            )
        if variant.wants_dynamic_batching() is False:
            out[c.name] = dataclasses.replace(sized, instance_count=share, backend_parameters=parameters)
            continue
        out[c.name] = dataclasses.replace(
            sized,
            instance_count=share,
            backend_parameters=parameters,
            priority_levels=0,
            default_priority_level=None,
            priority_queue_policies=(),
            max_queue_size=admission if c.may_shed else None,
            queue_timeout_us=timeout,
            timeout_action="reject" if timeout else None,
            allow_timeout_override=None,
        )
    return out


@dataclass(frozen=True)
class TrafficObjective:
    """The workload objective: a config's capacity for the traffic mix (the most work served
    with every class meeting its objective)."""

    space: SearchSpace
    traffic: Traffic
    start_rate: float = DEFAULT_START_RATE
    measure: MeasureSettings = WORKLOAD_MEASURE
    max_rate: float | None = None
    layouts: tuple[Layout, ...] = (Layout.SHARED,)
    """The serving layouts searched (both only on a server tritontune launched: endpoints are
    models it adds to the repository)."""
    endpoint_choices: EndpointChoices = EndpointChoices()
    """What an endpoint trial searches each endpoint's own knobs over."""
    known_capacity: Callable[[], float | None] | None = None
    """The best total rate a trial of the study has held so far (None: none yet): a trial's
    ramp starts there (:meth:`capacity` with ``near``) instead of walking up from the start
    rate."""
    finalist_bar: Callable[[], float | None] | None = None
    """The lowest total rate a trial that would enter the final rounds now has held (None: fewer
    trials than finalists so far): a trial that misses at or below it cannot be a finalist, so
    its capacity is not bisected further (:meth:`capacity` with ``coarse_below``)."""

    def suggest(self, trial: optuna.Trial) -> dict[str, Any]:
        point = self.space.suggest(trial)
        if isinstance(self.space, PipelineSpace) and self.traffic.routed:
            # several models: each gets the scheduler of the classes it serves
            for model, knobs in self.space.knobs_by_model(point).items():
                served = self.traffic.served_by(model)
                point.update(self._scheduler(trial, knobs, served, Layout.SHARED, knob_name(model, "")))
            return point
        layout = self.layouts[0]
        if len(self.layouts) > 1:
            layout = Layout(trial.suggest_categorical("layout", [str(x) for x in self.layouts]))
        if layout != Layout.SHARED or len(self.layouts) > 1:  # a shared-only study says nothing
            point["layout"] = str(layout)
        point.update(self._scheduler(trial, point, self.traffic, layout))
        return point

    def _scheduler(
        self,
        trial: optuna.Trial,
        knobs: Mapping[str, Any],
        traffic: Traffic,
        layout: Layout,
        prefix: str = "",
    ) -> dict[str, Any]:
        """The scheduler's knobs for a model serving ``traffic`` with ``knobs`` (names after
        ``prefix``): none without the dynamic batcher's queue."""
        point: dict[str, Any] = {}
        if knobs.get("dynamic_batching", True) is False:
            return point
        if layout == Layout.ENDPOINTS:
            point.update(self.endpoint_choices.suggest(trial, traffic))
        if traffic.priority_levels and layout == Layout.SHARED:  # an endpoint: one class
            name = prefix + "priorities"
            point[name] = trial.suggest_categorical(name, [True, False])
        name = prefix + "admission"
        point[name] = trial.suggest_categorical(name, list(ADMISSION_CHOICES))
        return point

    def variant(self, point: Mapping[str, Any]) -> Variant:
        return point_variant(self.space, self.traffic, point)

    def evaluate(self, bench: Bench, variant: Variant) -> Evaluation:
        if isinstance(variant, EndpointSplit):
            switch_s = bench.load_endpoints(dict(variant.split)).switch_s
        else:
            switch_s = bench.load(variant).switch_s
        known = self.known_capacity() if self.known_capacity else None
        bar = self.finalist_bar() if self.finalist_bar else None
        capacity = self.capacity(bench, known or self.start_rate, near=known, coarse_below=bar)
        return Evaluation(capacity.figure(), switch_s)

    def at_rate(self, bench: Bench, rate: float) -> TrafficCapacity:
        """What ``bench`` has loaded measured at ``rate`` alone: its capacity when every class
        meets its objective there, none (:attr:`TrafficCapacity.best` None) when one misses."""
        level = bench.measure_traffic(self.traffic, rate, self.measure)
        return TrafficCapacity(
            self.traffic, (level,), level if level.meets(self.traffic) else None, min_rate=rate
        )

    @property
    def min_rate(self) -> float:
        """The lowest total rate any of the search's ramps steps down to, wherever it started."""
        return self.start_rate * MIN_RATE_FRACTION

    def capacity(
        self,
        bench: Bench,
        start_rate: float,
        *,
        near: float | None = None,
        coarse_below: float | None = None,
    ) -> TrafficCapacity:
        """The capacity of what ``bench`` has loaded, its ramp started at ``start_rate`` (and
        stepping down to :attr:`min_rate` should that miss), in small steps near ``near``, a
        capacity it is expected close to (a finalist's own in the search; the best trial's so
        far, for the next trial): walking up from a start rate far below the answer cost most
        of a ramp's levels (on MiniLM's mix, 2 req/s doubling up to ~20); not bisected under
        ``coarse_below``, a rate only capacities above which are compared."""
        return traffic_capacity(
            bench,
            self.traffic,
            start_rate,
            self.measure,
            max_rate=self.max_rate,
            min_rate=self.min_rate,
            near=near,
            coarse_below=coarse_below,
        )


def traffic_capacity(
    bench: Bench,
    traffic: Traffic,
    start_rate: float,
    settings: MeasureSettings | None = None,
    *,
    max_rate: float | None = None,
    min_rate: float | None = None,
    near: float | None = None,
    coarse_below: float | None = None,
) -> TrafficCapacity:
    """The capacity of what is loaded (one shared model, or one endpoint per class), to
    :data:`CAPACITY_PRECISION`; a ramp whose first rate misses steps down to ``min_rate`` (None:
    1/64 of the start); ``near`` and ``coarse_below``: see
    :func:`~tritontune.search.traffic_capacity.find_traffic_capacity`."""

    def measure(rate: float) -> TrafficMeasurement:
        return bench.measure_traffic(traffic, rate, settings)

    top = max_rate if max_rate is not None else DEFAULT_MAX_RATE
    start = min(start_rate, top)
    floor = min(min_rate, start) if min_rate is not None else None
    return find_traffic_capacity(
        measure,
        traffic,
        start=start,
        max_rate=top,
        min_rate=floor,
        near=near,
        coarse_below=coarse_below,
        precision=CAPACITY_PRECISION,
    )


def searched_layouts(
    settings: WorkloadSearchSettings, owns_server: bool, traffic: Traffic
) -> tuple[Layout, ...]:
    """The serving layouts the trials search: both where the settings allow endpoints, the
    server is tritontune's (endpoints are models it adds to the repository) and the workload has
    several classes; else the shared model only. A workload whose classes name their models has
    no endpoints to split (each class has its model already): asking for them is refused."""
    if traffic.routed:
        if settings.layouts is not None and Layout.ENDPOINTS in settings.layouts:
            raise InputError(_ROUTED_ENDPOINTS)
        return (Layout.SHARED,)
    both = settings.endpoints and owns_server and len(traffic.classes) > 1
    layouts = settings.layouts or ((Layout.SHARED, Layout.ENDPOINTS) if both else (Layout.SHARED,))
    return layouts if owns_server else (Layout.SHARED,)


_ROUTED_ENDPOINTS = (
    "--layout endpoints: the classes of this workload name their models, so each class has its "
    "own model already; the endpoints layout splits one model's classes (leave --layout out)"
)


def run_workload_search(
    session: Bench,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    progress: WorkloadSearchProgress | None = None,
) -> WorkloadSearchResult:
    """Search, then re-measure the top configs and the baseline (the bench's server must be
    started)."""
    progress = progress or WorkloadSearchProgress()
    endpoint_choices = EndpointChoices.of(space)  # before the shared model's batch sizes narrow
    space = workload_space(space, traffic)
    model = session.source.name
    name = settings.study_name_for(model, traffic)
    study = TuningStudy.create_or_resume(
        settings.storage,
        name,
        identity=WorkloadIdentity(model, traffic.to_dict()),
        sampler=make_sampler(settings.trials, settings.seed, settings.sampler),
    )
    phases = Phases()
    with phases.timed("precision checks"):
        space = checked_precisions(
            study, session, space, settings.accuracy, progress.on_precisions, traffic
        )
    use_space(study, space, what="--space (and --accuracy)")
    start_study(study, session, settings.measure, settings.trials)
    restarts_before = session.restarts
    layouts = searched_layouts(settings, session.owns_server, traffic)
    if not isinstance(space, PipelineSpace):
        # what sets a config's scale is measured first, as for one class (each accepted
        # precision, each split of the cores); the scheduler's knobs are TPE's from the start
        first = use_first_trials(study, space)
        if progress.on_first_trials:
            progress.on_first_trials(first)
    objective = TrafficObjective(
        space,
        traffic,
        settings.start_rate,
        settings.measure,
        settings.max_rate,
        layouts=layouts,
        endpoint_choices=endpoint_choices if settings.endpoint_knobs else EndpointChoices(),
        known_capacity=lambda: _best_rate(study),
        finalist_bar=lambda: _finalist_bar(study, settings.top),
    )
    with phases.timed("trials"):
        outcome = optimize(
            study,
            objective,
            session,
            Budget.start(settings.trials, settings.timeout_s, None),
            progress=LoopProgress(progress.on_trial_start, progress.on_trial_done),
        )
    record = study.read_workload()
    top = [t.number for t in _top_trials(record.results, settings.top)]
    decided = [f.trial for f in record.final.finalists if f.trial is not None] if record.final else None
    final = record.final or WorkloadFinal((), None)
    last: dict[str, TrafficCapacity] = {}
    settled_after: dict[str, int] = {}
    reused = True
    if study.claim_final_rounds("workload-final", top, decided, this_worker()):
        with phases.timed("final rounds"):
            final, last, settled_after = _final_rounds(
                session, objective, settings, record.results, progress
            )
        study.save_workload_final(final)
        reused = False
    return WorkloadSearchResult(
        name,
        record.results,
        final,
        last,
        stop_reason=outcome.stop_reason,
        trials_this_run=outcome.trials_this_run,
        restarts=session.restarts - restarts_before,
        precisions=record.precisions,
        final_rounds_reused=reused,
        phases=phases,
        settled_after=settled_after,
    )


def _top_trials(trials: list[TrialResult], top: int) -> list[TrialResult]:
    """The trials that enter the final rounds: the ``top`` best that served anything (``trials``
    best first)."""
    return [t for t in trials if t.served][:top]


def _finalist_bar(study: TuningStudy, top: int) -> float | None:
    """The lowest total rate among the ``top`` trials that would enter the final rounds now
    (None: fewer trials than that have held a rate)."""
    rates = [t.total_rate for t in _top_trials(study.read_workload().results, top) if t.total_rate]
    return min(rates) if len(rates) >= top else None


def _best_rate(study: TuningStudy) -> float | None:
    """The total rate the best trial of the study held at its capacity (None: none held)."""
    rates = [t.total_rate for t in study.read_workload().results if t.feasible and t.total_rate]
    return max(rates, default=None)


@dataclass(frozen=True)
class _Entry:
    """A finalist before its rounds, and what it loads."""

    finalist: Finalist
    load: Variant | dict[str, Variant]
    screened_rate: float | None = None
    """Its capacity in the search (a trial's), where its rounds' ramps start from."""
    ramp_from: float | None = None
    """Where its first round's ramp starts when it has no capacity yet (None: the start rate),
    stepping by :data:`NEAR_STEP` near it: for the best shared trial split into endpoints, that
    trial's capacity; for the baseline, the lowest capacity a trial held (the search's configs
    are meant to beat it: from the start rate, MiniLM's baseline halved down through three
    misses)."""


def _final_rounds(
    session: Bench,
    objective: TrafficObjective,
    settings: WorkloadSearchSettings,
    trials: list[TrialResult],
    progress: WorkloadSearchProgress,
) -> tuple[WorkloadFinal, dict[str, TrafficCapacity], dict[str, int]]:
    """Each finalist measured in interleaved rounds, as the playoff measures its contenders: at
    the capacity it held (its trial's for the first round, then its own last round's), one level
    per round; one that misses there is measured a step lower (:data:`NEAR_STEP`) and lower
    again until it holds, as the playoff steps a contender down (:func:`_stepped_down`); only one
    with no capacity yet (the baseline, the best config split into endpoints) walks a ramp, near
    where it is likely to be. A held rate so only steps down: the highest of a finalist's noisy
    rounds is not what the next one starts from. Every round
    walking a whole ramp per finalist was most of a workload search's time (20 of MiniLM's 32
    minutes). A finalist behind the leader by over 10 % in every round so far sits out the rest
    (:func:`tritontune.study.duet.settled`), and the rounds end once every place is settled:
    the third round of a baseline serving a fifth of the winner decided nothing. Also returns
    who sat out, by label: after how many rounds."""
    entries = _finalist_entries(session, objective, settings, trials)
    last: dict[str, TrafficCapacity] = {}
    done: dict[str, list[TrafficCapacity]] = {e.finalist.label: [] for e in entries}
    held = {e.finalist.label: e.screened_rate for e in entries if e.screened_rate}

    def measure(entry: _Entry) -> TrafficCapacity:
        label = entry.finalist.label
        if isinstance(entry.load, dict):
            session.load_endpoints(entry.load)
        else:
            session.load(entry.load)
        rate = held.get(label)
        if rate is None:  # no capacity yet: a ramp from where it is likely to be
            start = entry.ramp_from or objective.start_rate
            capacity = objective.capacity(session, start, near=entry.ramp_from)
        else:
            capacity = _stepped_down(session, objective, rate)
        if capacity.best is not None:
            held[label] = capacity.total_rate
        last[label] = capacity
        return capacity

    def report(round_number: int, entry: _Entry, capacity: TrafficCapacity | None) -> None:
        if progress.on_final_round is None:
            return
        if capacity is not None:
            done[entry.finalist.label].append(capacity)
        shown = _with_rounds(entry.finalist, done[entry.finalist.label])
        progress.on_final_round(round_number, shown, capacity.served if capacity else None)

    def settled_now(figures: dict[int, list[TrafficCapacity]]) -> set[int]:
        return settled({i: dict(enumerate(c.served for c in caps)) for i, caps in figures.items()})

    rounds = interleaved_rounds(session, entries, settings.rounds, measure, report, settled_now)
    finalists = tuple(
        dataclasses.replace(_with_rounds(entry.finalist, rounds.figures[i]), error=rounds.errors.get(i))
        for i, entry in enumerate(entries)
    )
    settled_after = {entries[i].finalist.label: n for i, n in rounds.settled.items()}
    if progress.on_settled is not None and settled_after:
        progress.on_settled(settled_after)
    return workload_final(finalists), last, settled_after


def _stepped_down(session: Bench, objective: TrafficObjective, rate: float) -> TrafficCapacity:
    """A finalist's round at the rate it held: one level there, and where that misses, one step
    (:data:`NEAR_STEP`) lower after another until a level holds, down to the search's floor, as
    the playoff steps a contender down. Never a ramp up: a finalist that missed where it held has
    no better figure to find above it in this round (a ramp from below found a higher rate after
    two misses on a noisy minute, at eight levels' cost), and the rounds' median takes care of
    one unlucky round."""
    levels: list[TrafficMeasurement] = []
    while True:
        capacity = objective.at_rate(session, rate)
        levels.extend(capacity.levels)
        if capacity.best is not None or rate / NEAR_STEP < objective.min_rate:
            break
        rate /= NEAR_STEP
    return dataclasses.replace(
        capacity,
        levels=tuple(sorted(levels, key=lambda m: m.total_rate)),
        stepped_down=len(levels) > 1,
        min_rate=objective.min_rate,
    )


def _with_rounds(finalist: Finalist, capacities: list[TrafficCapacity]) -> Finalist:
    """``finalist`` with its rounds' figures: work served, and the rate offered there."""
    return dataclasses.replace(
        finalist,
        served=tuple(c.served for c in capacities),
        rates=tuple(c.total_rate for c in capacities),
        class_rounds=tuple(c.class_figures() for c in capacities),
    )


def _finalist_entries(
    session: Bench,
    objective: TrafficObjective,
    settings: WorkloadSearchSettings,
    trials: list[TrialResult],
) -> list[_Entry]:
    """The finalists (not yet measured) and what each loads: the top trials, the best one as
    one endpoint per class, and the baseline."""
    space, traffic = objective.space, objective.traffic
    everyone = traffic.routes(session.source.name)
    entries: list[_Entry] = []
    top = _top_trials(trials, settings.top)
    for t in top:
        variant = point_variant(space, traffic, t.params)
        if isinstance(variant, EndpointSplit):
            entries.append(_endpoint_entry(session, t.number, dict(variant.split), t.total_rate))
            continue
        configs = session.configs(variant)
        entries.append(
            _Entry(
                Finalist(t.number, t.knobs, (), Layout.SHARED, _texts(configs), everyone),
                variant,
                t.total_rate,
            )
        )
    shared = [t for t in top if point_layout(t.params) == Layout.SHARED]
    if (
        shared
        and point_layout(top[0].params) == Layout.SHARED
        and settings.endpoints
        and session.owns_server
        and not traffic.routed
    ):
        best = top[0]
        split = shared_split(session, space, traffic, best.params)
        entries.append(
            dataclasses.replace(
                _endpoint_entry(session, best.number, split), ramp_from=best.total_rate or None
            )
        )
    baseline = Variant()
    configs = session.configs(baseline)
    lowest = min((t.total_rate for t in trials if t.feasible and t.total_rate), default=None)
    entries.append(
        _Entry(
            Finalist(None, describe_configs(configs), (), Layout.SHARED, _texts(configs), everyone),
            baseline,
            ramp_from=lowest,
        )
    )
    return entries


def shared_split(
    bench: Bench, space: SearchSpace, traffic: Traffic, params: Mapping[str, Any]
) -> dict[str, Variant]:
    """A shared trial's config served as one endpoint per class (:func:`endpoint_variants`,
    split by its built instances and threads): the other layout of the best shared trial."""
    knobs, admission = _split_point(params)
    variant = space.to_variant(knobs)
    built = bench.build(variant)
    return endpoint_variants(traffic, variant, instances_of(built), admission, _threads(built))


def finalist_load(
    bench: Bench,
    space: SearchSpace,
    traffic: Traffic,
    finalist: Finalist,
    trials: list[TrialResult],
) -> Variant | dict[str, Variant]:
    """What ``finalist`` loads (``space`` as the search narrowed it: :func:`workload_space`):
    the model's own config (the baseline), its trial's config, or one endpoint per class (an
    endpoint trial's split, or the best shared trial split for the final rounds)."""
    if finalist.trial is None:
        return Variant()
    params = next(t.params for t in trials if t.number == finalist.trial)
    variant = point_variant(space, traffic, params)
    if isinstance(variant, EndpointSplit):
        return dict(variant.split)
    if finalist.layout == Layout.ENDPOINTS:
        return shared_split(bench, space, traffic, params)
    return variant


def _endpoint_entry(
    session: Bench, trial: int, split: dict[str, Variant], screened_rate: float | None = None
) -> _Entry:
    """A finalist in the endpoint layout: each class's model ``NAME_<class>`` and its config."""
    name = session.source.name
    models = {f"{name}_{role}": session.build(v) for role, v in split.items()}
    described = {role: describe_config(models[f"{name}_{role}"]) for role in split}
    routes = {role: f"{name}_{role}" for role in split}
    finalist = Finalist(trial, described, (), Layout.ENDPOINTS, _texts(models), routes)
    return _Entry(finalist, split, screened_rate)


def _threads(config: ModelConfig) -> int | None:
    """onnxruntime's intra-op threads per instance in ``config`` (None: its default)."""
    value = (
        config.parameters["intra_op_thread_count"].string_value
        if "intra_op_thread_count" in config.parameters
        else ""
    )
    return int(value) if value.strip().isdigit() and int(value) > 0 else None


def _texts(configs: dict[str, ModelConfig]) -> dict[str, str]:
    """Each config's text, named for the model that serves it (as an export writes it)."""
    out = {}
    for model, config in configs.items():
        named = copy_config(config)
        named.name = model
        out[model] = config_to_text(named)
    return out
