"""The study driver: the one sequence around the trial loop, for every kind of search.

A search is: the precision variants built and judged (:mod:`.precisions`), the space kept in
the study, what the trials need measured first (the single-class search's baseline), the first
trials (each accepted precision, each split of the cores: :mod:`.first_trials`), the objective
(a prediction's calibration before it, where asked), the trials (:func:`.loop.optimize`), then
the final rounds: the best few configs and the baseline re-measured head to head. Each kind of
search states what differs in a :class:`StudyPlan` (its objective, its :class:`Finals`) and
:func:`drive` runs the sequence, so a step added here reaches every mode: the single-class
search and the pipeline's (:func:`tritontune.search.optimize.run_search`), a traffic mix's and a
group of models' (:func:`tritontune.search.workload_search.run_workload_search`).

The final rounds are a study job claimed once per set of finalists
(:meth:`~tritontune.study.handle.TuningStudy.claim_final_rounds`): a resumed search, or a second
worker of a shared study, whose finalists are those of the rounds on record reuses them, and a
worker that finds them claimed by another leaves them to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from tritontune.hostinfo import WorkerId, this_worker
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import Traffic
from tritontune.precision.prepare import AccuracySettings
from tritontune.search.first_trials import FirstTrials, use_first_trials
from tritontune.search.loop import Budget, LoopOutcome, LoopProgress, optimize
from tritontune.search.objective import Objective
from tritontune.search.phases import Phases
from tritontune.search.precisions import PrecisionsProgress, checked_precisions
from tritontune.search.setup import start_study, use_space
from tritontune.search.space import SearchSpace
from tritontune.serving.bench import Bench
from tritontune.study.handle import TuningStudy

RecordT = TypeVar("RecordT")


@dataclass(frozen=True)
class FinalistsNow(Generic[RecordT]):
    """Who would enter the final rounds now, and who entered the rounds the study keeps."""

    trials: list[int]
    decided: list[int] | None
    """The trials of the rounds on record (None: no rounds on record)."""
    record: RecordT
    """The study as read to find them; the rounds are measured from it, so a search reads
    its whole study once for its finals (a slow read on a shared PostgreSQL study)."""


class Finals(Protocol[RecordT]):
    """A search's final rounds: its best configs and the baseline re-measured in interleaved
    rounds (:mod:`.final_rounds`), the verdict saved in the study."""

    @property
    def job(self) -> str:
        """The study job's name (its claims are ``JOB-<trials>``)."""
        ...

    @property
    def phase(self) -> str:
        """The phase the rounds' seconds are counted in."""
        ...

    def finalists(self, study: TuningStudy) -> FinalistsNow[RecordT] | None:
        """The finalists now (None: nothing to re-measure, no rounds to run)."""
        ...

    def run(self, study: TuningStudy, objective: Objective, now: FinalistsNow[RecordT]) -> None:
        """Measure the rounds of ``now``'s finalists and save their verdict in ``study``
        (``objective``: the trials', whose space the finalists' points are in)."""
        ...


class SearchLimits(Protocol):
    """What a search's settings say that the driver needs: the budget, the measurement windows
    and the precision gate (:class:`~tritontune.search.optimize.SearchSettings` and
    :class:`~tritontune.search.workload_search.WorkloadSearchSettings` both)."""

    @property
    def trials(self) -> int | None: ...

    @property
    def timeout_s(self) -> float | None: ...

    @property
    def measure(self) -> MeasureSettings: ...

    @property
    def accuracy(self) -> AccuracySettings | None: ...


@dataclass
class StudyPlan:
    """What one kind of search brings to :func:`drive`; the rest is the same for every kind."""

    objective: Callable[[SearchSpace, Phases], Objective]
    """The trials' objective for the space the trials search (a prediction calibrates first,
    timing its phase)."""
    finals: Finals[Any]
    limits: SearchLimits
    traffic: Traffic | None = None
    """A traffic mix: its classes' request data judge the precision variants."""
    prepare: Callable[[SearchSpace, Phases], SearchSpace] | None = None
    """What the trials need measured first (the single-class baseline), and the space they
    search after it (a pipeline's narrowed to its bottleneck)."""
    first_trials: Callable[[], bool] = lambda: True
    """Whether each accepted precision and each split of the cores are measured first (asked
    after :attr:`prepare`: a search whose strategy predicts proposes its own first configs)."""
    sized_budget: bool = True
    """The budget knows the space's size (a traffic mix's points add the scheduler's knobs,
    which the space does not count)."""
    on_precisions: PrecisionsProgress | None = None
    on_first_trials: Callable[[FirstTrials], None] | None = None
    loop: LoopProgress = field(default_factory=LoopProgress)
    worker: WorkerId = field(default_factory=this_worker)


@dataclass(frozen=True)
class DrivenStudy:
    """What :func:`drive` did in this run."""

    outcome: LoopOutcome
    phases: Phases
    restarts: int
    """Server restarts during the trials and the final rounds."""
    finals_run: bool
    """This run measured the final rounds (False: the study's were reused, or another worker
    claimed them, or there was nothing to re-measure)."""


def drive(study: TuningStudy, bench: Bench, space: SearchSpace, plan: StudyPlan) -> DrivenStudy:
    """Run (or resume, or join) the search ``plan`` describes in ``study``, on ``bench``
    (started): see the module docstring."""
    phases = Phases()
    with phases.timed("precision checks"):
        space = checked_precisions(
            study, bench, space, plan.limits.accuracy, plan.on_precisions, plan.traffic
        )
    use_space(study, space, what="--space (and --accuracy)")
    start_study(study, bench, plan.limits.measure, plan.limits.trials)
    if plan.prepare is not None:
        space = plan.prepare(space, phases)
    restarts_before = bench.restarts
    # The budget starts before a calibration: --timeout bounds the whole search.
    limits = plan.limits
    budget = Budget.start(limits.trials, limits.timeout_s, space.size() if plan.sized_budget else None)
    if plan.first_trials():
        first = use_first_trials(study, space)
        if first is not None and plan.on_first_trials:
            plan.on_first_trials(first)
    objective = plan.objective(space, phases)
    with phases.timed("trials"):
        outcome = optimize(study, objective, bench, budget, progress=plan.loop, worker=plan.worker)
    with phases.timed(plan.finals.phase):
        finals_run = _claimed_finals(study, plan.finals, objective, plan.worker)
    return DrivenStudy(outcome, phases, bench.restarts - restarts_before, finals_run)


def _claimed_finals(
    study: TuningStudy, finals: Finals[Any], objective: Objective, worker: WorkerId
) -> bool:
    """Run ``finals`` unless the study's rounds are over the same finalists or another worker
    claimed them; whether this run measured them."""
    now = finals.finalists(study)
    if now is None or not study.claim_final_rounds(finals.job, now.trials, now.decided, worker):
        return False
    finals.run(study, objective, now)
    return True
