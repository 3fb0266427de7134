"""The study as the rest of tritontune sees it: :class:`TuningStudy`.

The search writes through it (ask, the point, the config, the figure or why it failed, the final
rounds) and every reader (``export``, ``report``, ``status``, the CLI) reads typed records from it,
so no module outside this package names an attribute. A study of either kind opens in
``optuna-dashboard`` as it is.
"""

from __future__ import annotations

import datetime as dt
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import optuna
from optuna.trial import TrialState

from tritontune import __version__
from tritontune.errors import InputError
from tritontune.hostinfo import WorkerId
from tritontune.predict.calibration import Calibration, SettingCalibration
from tritontune.study import coordination
from tritontune.study import storage as storages
from tritontune.study.codec import (
    identity_attrs,
    identity_of,
    kind_of,
    precisions_of,
    single_class_record,
    trial_result,
    workload_final_of,
    workload_record,
)
from tritontune.study.coordination import Snapshot
from tritontune.study.figures import CapacityFigure, OperatingPoint, PlayoffResult
from tritontune.study.records import (
    Identity,
    StudyContext,
    StudyRecord,
    TrialResult,
    WorkloadFinal,
    WorkloadIdentity,
    WorkloadStudyRecord,
    precision_key,
)
from tritontune.study.schema import ContextKey, StudyKey, StudyKind, TrialKey

#: Optuna's name for the constraint a trial reports: how far p99 is over the SLO (> 0 infeasible).
SLO_CONSTRAINT = "p99_over_slo_s"


class TuningStudy:
    """One tritontune study in one storage."""

    def __init__(
        self,
        study: optuna.Study,
        storage: optuna.storages.BaseStorage | None,
        *,
        url: str,
        resumed: bool,
    ) -> None:
        self.optuna_study = study
        """The Optuna study itself, for Optuna's own tools (visualization, the sampler)."""
        self._backend = storage
        self.url = url
        self.resumed = resumed

    @classmethod
    def of(cls, study: optuna.Study) -> TuningStudy:
        """An Optuna study made elsewhere, to read (tests make studies as older versions did)."""
        return cls(study, None, url="(given)", resumed=True)

    @property
    def storage(self) -> optuna.storages.BaseStorage:
        """The storage the study was opened in (workers coordinate through it)."""
        if self._backend is None:
            raise InputError(f"study {self.name!r} was given without its storage")
        return self._backend

    # -- opening -------------------------------------------------------------------------------
    @classmethod
    def create_or_resume(
        cls,
        storage: storages.Storage,
        study_name: str,
        *,
        identity: Identity,
        sampler: optuna.samplers.BaseSampler,
    ) -> TuningStudy:
        """Create or resume ``study_name`` (``storage``: a URL, or a storage object in tests). A
        study created for another identity (model, SLO and load mode; or model and traffic) is
        refused, so results never mix."""
        url = storages.storage_label(storage)
        backend = storages.open_storage(storage, heartbeat=True) if isinstance(storage, str) else storage
        study, resumed = storages.create_or_resume(backend, study_name, sampler)
        handle = cls(study, backend, url=url, resumed=resumed)
        if resumed:
            recorded = identity_of(study.user_attrs)
            if recorded != identity:
                what = recorded.describe() if recorded else "something else (no identity recorded)"
                differs = ""
                if isinstance(identity, WorkloadIdentity):
                    what = f"another model or workload ({what})"
                    if isinstance(recorded, WorkloadIdentity):  # name what differs, the study's first
                        differs = (
                            " (the study's, then yours: "
                            + "; ".join(recorded.differences(identity)[:3])
                            + ")"
                        )
                raise InputError(
                    f"study {study_name!r} in {url} was created for {what}, "
                    f"not {identity.describe()}{differs}; pick another --study name"
                )
        else:
            for key, value in identity_attrs(identity).items():
                study.set_user_attr(key, value)
            study.set_user_attr(StudyKey.VERSION, __version__)
            study.set_user_attr(
                StudyKey.CREATED, dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
            )
        return handle

    @classmethod
    def open_existing(cls, url: str, study_name: str) -> TuningStudy:
        """A study that must already exist (``export``, ``report``, ``status`` read finished
        ones)."""
        backend = storages.existing_storage(url)
        names = storages.study_names(backend)
        if study_name not in names:
            listed = ", ".join(names) if names else "none"
            raise InputError(f"study {study_name!r} not found in {url} (studies there: {listed})")
        study = optuna.load_study(study_name=study_name, storage=backend)
        return cls(study, backend, url=url, resumed=True)

    @property
    def name(self) -> str:
        return self.optuna_study.study_name

    @property
    def kind(self) -> StudyKind | None:
        """What the study searched for (None: not a tritontune study)."""
        return kind_of(self.optuna_study.user_attrs)

    # -- reading -------------------------------------------------------------------------------
    def read(self) -> StudyRecord:
        """The whole single-class study, typed (:class:`InputError` for a workload study or one
        tritontune did not make)."""
        return single_class_record(self.optuna_study)

    def read_workload(self) -> WorkloadStudyRecord:
        """The whole workload study, typed (:class:`InputError` for any other)."""
        return workload_record(self.optuna_study)

    def read_trial(self, number: int) -> TrialResult:
        """One trial, typed (with its precision's accuracy)."""
        precisions = precisions_of(self.optuna_study.user_attrs)
        return trial_result(self.optuna_study.get_trials(deepcopy=False)[number], precisions)

    def context(self) -> StudyContext:
        return StudyContext.from_attrs(self.optuna_study.user_attrs)

    def snapshot(self) -> Snapshot:
        """Every trial as of now: one read of the storage."""
        return Snapshot(self.optuna_study.get_trials(deepcopy=False))

    def recorded_space(self) -> dict[str, Any] | None:
        return self.optuna_study.user_attrs.get(StudyKey.SPACE)

    def baseline(self) -> OperatingPoint | None:
        baseline = self.optuna_study.user_attrs.get(StudyKey.BASELINE)
        return OperatingPoint.from_dict(baseline) if baseline else None

    # -- the study's own attributes ------------------------------------------------------------
    def _set(self, key: str, value: Any) -> None:
        self.optuna_study.set_user_attr(key, value)

    def save_space(self, space: dict[str, Any]) -> None:
        self._set(StudyKey.SPACE, space)

    def save_precisions(self, checks: Mapping[str, dict[str, Any]], model: str | None = None) -> None:
        """The precision checks made before the search (each a ``PrecisionCheck.to_dict()``, by
        precision), of ``model`` in a pipeline; another model's checks are kept."""
        kept = dict(self.optuna_study.user_attrs.get(StudyKey.PRECISIONS) or {})
        kept.update({precision_key(str(p), model): check for p, check in checks.items()})
        self._set(StudyKey.PRECISIONS, kept)

    def ensure_context(self, build: Callable[[], StudyContext]) -> None:
        """Write the study's context unless it has one: kept from the study's first run, and built
        only when missing (hashing a large model on every resume would be wasted)."""
        attrs = self.optuna_study.user_attrs
        missing = [key for key in ContextKey.ALL if key not in attrs]
        if not missing:
            return
        values = build().to_attrs()
        for key in missing:
            self._set(key, values[key])

    def save_budget(self, trials: int | None) -> None:
        self._set(StudyKey.BUDGET, trials)

    def save_baseline(self, point: OperatingPoint, config_pbtxt: str) -> None:
        self._set(StudyKey.BASELINE, point.to_dict())
        self._set(StudyKey.BASELINE_CONFIG, config_pbtxt)

    def save_playoff(self, result: PlayoffResult) -> None:
        self._set(StudyKey.PLAYOFF, result.to_dict())

    def save_workload_final(self, final: WorkloadFinal) -> WorkloadFinal:
        """Stores ``final``; returns it as stored (its figures rounded as the study keeps
        them), so a run states the figures a resume reads back."""
        stored = final.to_dict()
        self._set(StudyKey.WORKLOAD_FINAL, stored)
        return workload_final_of(stored)

    def save_strategy(self, strategy: str) -> None:
        self._set(StudyKey.STRATEGY, strategy)

    def saved_strategy(self) -> str | None:
        """The strategy the study was searched with, when one was saved (None: TPE's older
        studies, which saved none)."""
        saved = self.optuna_study.user_attrs.get(StudyKey.STRATEGY)
        return None if saved is None else str(saved)

    def calibration(self) -> Calibration | None:
        """The execution settings calibrated so far (None: calibration never started)."""
        attrs = self.optuna_study.user_attrs
        reference = attrs.get(StudyKey.CALIBRATION_REFERENCE)
        if reference is None:
            return None
        calibration = Calibration(dict(reference), cores=int(attrs.get(StudyKey.CALIBRATION_CORES, 0)))
        for key, value in attrs.items():
            if key.startswith(StudyKey.CALIBRATION_PREFIX):
                calibration.add(SettingCalibration.from_dict(value))
        return calibration

    def save_calibration_reference(self, reference: Mapping[str, Any], cores: int = 0) -> None:
        """The reference setting, and the CPU cores the server computes on (0: not a CPU
        host's, or unknown)."""
        self._set(StudyKey.CALIBRATION_CORES, int(cores))
        self._set(StudyKey.CALIBRATION_REFERENCE, dict(reference))

    def save_calibration(self, calibrated: SettingCalibration) -> None:
        self._set(StudyKey.CALIBRATION_PREFIX + calibrated.key, calibrated.to_dict())

    def save_prediction(self, trial: optuna.Trial, prediction: Mapping[str, Any]) -> None:
        trial.set_user_attr(TrialKey.PREDICTED, dict(prediction))

    # -- trials ----------------------------------------------------------------------------------
    def ask(self) -> optuna.Trial:
        with warnings.catch_warnings():  # Optuna expects heartbeats with optimize(); we ask/tell
            warnings.filterwarnings("ignore", message="Heartbeat of storage")
            return self.optuna_study.ask()

    def save_point(
        self, trial: optuna.Trial, point: Mapping[str, Any], units: Mapping[str, str] | None = None
    ) -> None:
        """The point the sampler proposed (as the search uses it: snapped values, ``None`` kept),
        and each of its knobs as a ``value:`` attribute for optuna-dashboard (``units``: by knob,
        the unit its name carries there)."""
        trial.set_user_attr(TrialKey.POINT, dict(point))
        for name, value in dashboard_values(point, units or {}).items():
            trial.set_user_attr(name, value)

    def save_config(self, trial: optuna.Trial, knobs: Mapping[str, Any], config_pbtxt: str) -> None:
        """The config a trial measures, kept before measuring so a failed trial still shows it."""
        trial.set_user_attr(TrialKey.KNOBS, dict(knobs))
        trial.set_user_attr(TrialKey.CONFIG, config_pbtxt)

    def save_worker(self, trial: optuna.Trial, worker: WorkerId) -> None:
        trial.set_user_attr(TrialKey.WORKER, worker.to_dict())

    def tell_measured(
        self,
        trial: optuna.Trial,
        figure: OperatingPoint | CapacityFigure,
        *,
        switch_s: float | None = None,
        server_restarts: int = 0,
    ) -> None:
        """A measured config. An operating point's throughput is the objective and its SLO excess
        the constraint (an infeasible config teaches the sampler instead of being filtered out
        afterwards); a capacity's work served is the objective."""
        trial.set_user_attr(TrialKey.SWITCH, switch_s)
        if server_restarts:
            trial.set_user_attr(TrialKey.SERVER_RESTARTS, server_restarts)
        if isinstance(figure, CapacityFigure):
            trial.set_user_attr(TrialKey.TRAFFIC_CAPACITY, figure.to_dict())
            self.optuna_study.tell(trial, figure.served)
            return
        trial.set_user_attr(TrialKey.OPERATING_POINT, figure.to_dict())
        trial.set_constraint(SLO_CONSTRAINT, figure.slo_excess_s)
        self.optuna_study.tell(trial, figure.throughput)

    def tell_failed(self, trial: optuna.Trial, error: str, *, server_restarts: int = 0) -> None:
        """A config that could not be measured (Triton refused it, or it brought the server
        down)."""
        trial.set_user_attr(TrialKey.ERROR, error)
        if server_restarts:
            trial.set_user_attr(TrialKey.SERVER_RESTARTS, server_restarts)
        self.optuna_study.tell(trial, state=TrialState.FAIL)

    def tell_interrupted(self, trial: optuna.Trial) -> None:
        """Cut off by Ctrl-C: not counted, and queued to be measured first when the search
        resumes."""
        trial.set_user_attr(TrialKey.INTERRUPTED, True)
        self.optuna_study.tell(trial, state=TrialState.FAIL)
        self.optuna_study.enqueue_trial(trial.params)

    def tell_copy(self, trial: optuna.Trial, twin: int) -> None:
        """Tell ``trial`` the result of the finished trial ``twin`` with the same point, without
        measuring it again (the sampler proposed a known config)."""
        other = self.optuna_study.get_trials(deepcopy=False)[twin]
        for key, value in other.user_attrs.items():
            if key != TrialKey.POINT:
                trial.set_user_attr(key, value)
        trial.set_user_attr(TrialKey.DUPLICATE_OF, other.number)
        if other.state == TrialState.COMPLETE:
            for key, value in other.constraints.items():
                trial.set_constraint(key, value)
            self.optuna_study.tell(trial, other.value)
        else:
            self.optuna_study.tell(trial, state=TrialState.FAIL)

    def tell_deferred(self, trial: optuna.Trial, twin: int) -> None:
        """``trial`` drew a config that ``twin`` is measuring: not measured, not counted."""
        trial.set_user_attr(TrialKey.DUPLICATE_OF, twin)
        self.optuna_study.tell(trial, state=TrialState.FAIL)

    def tell_surplus(self, trial: optuna.Trial) -> None:
        """``trial`` started after other workers' trials had filled the budget: not measured."""
        trial.set_user_attr(TrialKey.SURPLUS, True)
        self.optuna_study.tell(trial, state=TrialState.FAIL)

    # -- workers ---------------------------------------------------------------------------------
    @contextmanager
    def heartbeat(self, trial: optuna.Trial) -> Iterator[None]:
        """Send ``trial``'s heartbeats while the block runs."""
        with coordination.heartbeat(self.storage, self.name, trial.number):
            yield

    def recover_lost_trials(self) -> list[int]:
        """Fail the running trials whose worker is gone and queue their configs again."""
        return coordination.recover_lost_trials(self.storage, self.optuna_study)

    def claim(self, job: str, worker: WorkerId) -> bool:
        """Claim ``job`` of this study for ``worker``; True for the one worker that gets it."""
        return coordination.claim(self.storage, self.name, job, worker)

    def claim_final_rounds(
        self, job: str, trials: Iterable[int], decided: Iterable[int] | None, worker: WorkerId
    ) -> bool:
        """Whether ``worker`` runs the final rounds ``job`` (the playoff, a workload's rounds)
        over ``trials``: not when the rounds the study keeps were over the same trials
        (``decided``; their verdict stands: a resumed search or a second worker reuses them),
        nor when another worker claimed these."""
        numbers = sorted(set(trials))
        if decided is not None and sorted(set(decided)) == numbers:
            return False
        return self.claim(f"{job}-" + "-".join(map(str, numbers)), worker)


def dashboard_values(point: Mapping[str, Any], units: Mapping[str, str]) -> dict[str, Any]:
    """The ``value:`` attributes of ``point``: one per knob, named with its unit where it has
    one (``value:max_batch_size`` 16, ``value:max_queue_delay_us`` 2000)."""
    return {
        f"{TrialKey.VALUE_PREFIX}{name}{'_' + units[name] if units.get(name) else ''}": value
        for name, value in point.items()
    }


def study_names(url: str) -> list[str]:
    """The tritontune studies in the storage at ``url`` (claims left out)."""
    return storages.study_names(storages.existing_storage(url))
