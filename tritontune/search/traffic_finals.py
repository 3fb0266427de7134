"""A traffic mix's final rounds: the best configs, the best shared one split into one endpoint
per class, and the baseline, re-measured in interleaved rounds at the capacity each held.

One screening figure on a noisy machine picks a lucky config as often as a good one, so after the
trials the top configs, the best shared one split into one endpoint per class
(:func:`~tritontune.search.endpoint_layout.endpoint_variants`: the other serving layout, unless an
endpoint trial is on top) and the baseline (the model's own config as it is) are measured again in
interleaved rounds (:mod:`tritontune.search.final_rounds`), and the winner is the best median, by
the playoff's rule (:func:`tritontune.study.duet.decide`, through
:func:`tritontune.study.verdict.workload_final`), with no simplicity to break a tie: the most work
served wins, and a finalist whose order against it the paired per-round ratios could not tell is
stated as uncertain. Each finalist keeps the config text of every model it serves, so ``export``
writes exactly what was measured. :class:`TrafficFinals` is the driver's :class:`Finals`
(:mod:`tritontune.search.driver`): claimed once per set of finalists, reused on a resume.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from tritontune.config.model_config import ModelConfig, config_to_text, copy_config
from tritontune.config.pipeline import describe_configs
from tritontune.config.variant import Variant, describe_config
from tritontune.measure.mixed import TrafficMeasurement
from tritontune.measure.traffic import Layout, Traffic
from tritontune.search.driver import FinalistsNow
from tritontune.search.endpoint_layout import EndpointSplit, point_layout, point_variant, shared_split
from tritontune.search.final_rounds import interleaved_rounds
from tritontune.search.objective import Objective
from tritontune.search.space import SearchSpace
from tritontune.search.traffic_capacity import NEAR_STEP, TrafficCapacity
from tritontune.search.traffic_objective import TrafficObjective, top_trials
from tritontune.serving.bench import Bench
from tritontune.study.duet import settled
from tritontune.study.figures import Finalist
from tritontune.study.handle import TuningStudy
from tritontune.study.records import TrialResult, WorkloadFinal, WorkloadStudyRecord
from tritontune.study.verdict import workload_final


@dataclass
class TrafficFinals:
    """The final rounds of a traffic mix's search (the module docstring), as the driver runs
    them; after :meth:`run`, what they measured."""

    bench: Bench
    top: int
    rounds: int
    endpoints: bool
    """Also measure the best shared config as one endpoint per class (where the server is
    tritontune's and the classes do not name their models)."""
    on_final_round: Callable[[int, Finalist, float | None], None] | None = None
    on_settled: Callable[[dict[str, int]], None] | None = None
    job: str = "workload-final"
    phase: str = "final rounds"
    final: WorkloadFinal | None = None
    """The verdict this run measured (None: not run)."""
    record: WorkloadStudyRecord | None = None
    """The study as last read for the finals (after the trials; None: not read)."""
    last: dict[str, TrafficCapacity] = field(default_factory=dict)
    """Each finalist's capacity in its last round, by label."""
    settled_after: dict[str, int] = field(default_factory=dict)
    """Finalists that sat out the later rounds, by label: after how many rounds."""

    def finalists(self, study: TuningStudy) -> FinalistsNow[WorkloadStudyRecord]:
        record = study.read_workload()
        top = [t.number for t in top_trials(record.results, self.top)]
        decided = (
            [f.trial for f in record.final.finalists if f.trial is not None] if record.final else None
        )
        self.record = record
        return FinalistsNow(top, decided, record)

    def run(
        self, study: TuningStudy, objective: Objective, now: FinalistsNow[WorkloadStudyRecord]
    ) -> None:
        assert isinstance(objective, TrafficObjective)
        trials = now.record.results
        final, self.last, self.settled_after = _final_rounds(self, objective, trials)
        self.final = study.save_workload_final(final)


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
    finals: TrafficFinals, objective: TrafficObjective, trials: list[TrialResult]
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
    session = finals.bench
    entries = _finalist_entries(finals, objective, trials)
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
        if finals.on_final_round is None:
            return
        if capacity is not None:
            done[entry.finalist.label].append(capacity)
        shown = _with_rounds(entry.finalist, done[entry.finalist.label])
        finals.on_final_round(round_number, shown, capacity.served if capacity else None)

    def settled_now(figures: dict[int, list[TrafficCapacity]]) -> set[int]:
        return settled({i: dict(enumerate(c.served for c in caps)) for i, caps in figures.items()})

    rounds = interleaved_rounds(session, entries, finals.rounds, measure, report, settled_now)
    finalists = tuple(
        dataclasses.replace(_with_rounds(entry.finalist, rounds.figures[i]), error=rounds.errors.get(i))
        for i, entry in enumerate(entries)
    )
    settled_after = {entries[i].finalist.label: n for i, n in rounds.settled.items()}
    if finals.on_settled is not None and settled_after:
        finals.on_settled(settled_after)
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
    finals: TrafficFinals, objective: TrafficObjective, trials: list[TrialResult]
) -> list[_Entry]:
    """The finalists (not yet measured) and what each loads: the top trials, the best one as
    one endpoint per class, and the baseline."""
    session, space, traffic = finals.bench, objective.space, objective.traffic
    everyone = traffic.routes(session.source.name)
    entries: list[_Entry] = []
    top = top_trials(trials, finals.top)
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
        and finals.endpoints
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


def _texts(configs: dict[str, ModelConfig]) -> dict[str, str]:
    """Each config's text, named for the model that serves it (as an export writes it)."""
    out = {}
    for model, config in configs.items():
        named = copy_config(config)
        named.name = model
        out[model] = config_to_text(named)
    return out
