"""Optuna's study and trials to typed records, by the names in :mod:`tritontune.study.schema`.

Every field added since the first studies has a default, so studies written by earlier versions
read back unchanged.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import optuna
from optuna.trial import FrozenTrial

from tritontune.errors import InputError
from tritontune.hostinfo import WorkerId
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.traffic import Traffic
from tritontune.study.figures import CapacityFigure, Finalist, OperatingPoint, PlayoffResult
from tritontune.study.records import (
    ConfirmedPoint,
    RecordedPrecision,
    StudyContext,
    StudyIdentity,
    StudyRecord,
    TrialResult,
    WorkloadFinal,
    WorkloadIdentity,
    WorkloadStudyRecord,
)
from tritontune.study.schema import StudyKey, StudyKind, TrialKey, traffic_attr
from tritontune.study.verdict import workload_final


def identity_of(attrs: Mapping[str, Any]) -> StudyIdentity | WorkloadIdentity | None:
    """The identity a study was created for (None: not a tritontune study)."""
    traffic = traffic_attr(attrs)
    if traffic is not None and StudyKey.MODEL in attrs and StudyKey.SLO not in attrs:
        return WorkloadIdentity(model=str(attrs[StudyKey.MODEL]), traffic=traffic)
    try:
        return StudyIdentity(
            model=str(attrs[StudyKey.MODEL]),
            slo_p99_s=float(attrs[StudyKey.SLO]),
            load_mode=LoadMode(attrs[StudyKey.LOAD_MODE]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def kind_of(attrs: Mapping[str, Any]) -> StudyKind | None:
    identity = identity_of(attrs)
    if identity is None:
        return None
    return StudyKind.WORKLOAD if isinstance(identity, WorkloadIdentity) else StudyKind.SINGLE_CLASS


def identity_attrs(identity: StudyIdentity | WorkloadIdentity) -> dict[str, Any]:
    if isinstance(identity, WorkloadIdentity):
        return {StudyKey.MODEL: identity.model, StudyKey.TRAFFIC: dict(identity.traffic)}
    return {
        StudyKey.MODEL: identity.model,
        StudyKey.SLO: identity.slo_p99_s,
        StudyKey.LOAD_MODE: identity.load_mode.value,
    }


def precisions_of(attrs: Mapping[str, Any]) -> dict[str, RecordedPrecision]:
    checks = attrs.get(StudyKey.PRECISIONS) or {}
    return {str(p): RecordedPrecision.from_dict(str(p), check) for p, check in checks.items()}


def trial_result(trial: FrozenTrial, precisions: Mapping[str, RecordedPrecision]) -> TrialResult:
    attrs = trial.user_attrs
    op = attrs.get(TrialKey.OPERATING_POINT)
    capacity = attrs.get(TrialKey.TRAFFIC_CAPACITY)
    knobs = dict(attrs.get(TrialKey.KNOBS) or {})
    check = precisions.get(str(knobs.get("precision", "")))
    duplicate_of = attrs.get(TrialKey.DUPLICATE_OF)
    return TrialResult(
        number=trial.number,
        params=dict(attrs.get(TrialKey.POINT, trial.params)),
        knobs=knobs,
        operating_point=OperatingPoint.from_dict(op) if op else None,
        config_pbtxt=str(attrs.get(TrialKey.CONFIG, "")),
        duration_s=trial.duration.total_seconds() if trial.duration else None,
        error=attrs.get(TrialKey.ERROR),
        accuracy=check.accuracy if check else None,
        state=trial.state,
        switch_s=attrs.get(TrialKey.SWITCH),
        interrupted=bool(attrs.get(TrialKey.INTERRUPTED, False)),
        duplicate_of=None if duplicate_of is None else int(duplicate_of),
        server_restarts=int(attrs.get(TrialKey.SERVER_RESTARTS, 0)),
        worker=WorkerId.from_dict(attrs[TrialKey.WORKER]) if TrialKey.WORKER in attrs else None,
        surplus=bool(attrs.get(TrialKey.SURPLUS, False)),
        started=trial.datetime_start,
        finished=trial.datetime_complete,
        capacity=CapacityFigure.from_dict(capacity) if capacity else None,
        predicted=attrs.get(TrialKey.PREDICTED),
    )


def single_class_record(study: optuna.Study) -> StudyRecord:
    """A single-class study, typed. Raises :class:`InputError` for any other study."""
    attrs = study.user_attrs
    identity = identity_of(attrs)
    if isinstance(identity, WorkloadIdentity):
        raise InputError(
            f"study {study.study_name!r} is a workload study (search --workload): status and "
            "report don't read those yet (export does); its results are in the search's results "
            "JSON"
        )
    if identity is None:
        raise InputError(
            f"study {study.study_name!r} was not made by tritontune search (it has no model, SLO "
            "and load mode)"
        )
    precisions = precisions_of(attrs)
    baseline = attrs.get(StudyKey.BASELINE)
    confirmed = attrs.get(StudyKey.CONFIRMED)
    playoff = attrs.get(StudyKey.PLAYOFF)
    return StudyRecord(
        name=study.study_name,
        identity=identity,
        created=str(attrs.get(StudyKey.CREATED, "")),
        tritontune_version=str(attrs.get(StudyKey.VERSION, "")),
        space=attrs.get(StudyKey.SPACE),
        precisions=precisions,
        baseline=OperatingPoint.from_dict(baseline) if baseline else None,
        baseline_config_pbtxt=attrs.get(StudyKey.BASELINE_CONFIG),
        strategy=str(attrs.get(StudyKey.STRATEGY, "tpe")),
        confirmed=ConfirmedPoint(
            trial=int(confirmed["trial"]),
            operating_point=OperatingPoint.from_dict(confirmed["operating_point"]),
        )
        if confirmed
        else None,
        playoff=PlayoffResult.from_dict(playoff) if playoff else None,
        context=StudyContext.from_attrs(attrs),
        trials=tuple(trial_result(t, precisions) for t in study.get_trials(deepcopy=False)),
        budget_trials=attrs.get(StudyKey.BUDGET),
    )


def workload_final_of(data: Mapping[str, Any]) -> WorkloadFinal:
    """A workload study's final rounds as kept (``WorkloadFinal.to_dict``): its finalists and
    the winner it stored, with what the verdict makes of the finalists (their duets with the
    winner, each layout's best)."""
    winner = data.get("winner")
    decided = workload_final(tuple(Finalist.from_dict(f) for f in data.get("finalists") or ()))
    return dataclasses.replace(decided, winner=Finalist.from_dict(winner) if winner else None)


def workload_record(study: optuna.Study) -> WorkloadStudyRecord:
    """A workload study, typed. Raises :class:`InputError` for any other study."""
    attrs = study.user_attrs
    identity = identity_of(attrs)
    if not isinstance(identity, WorkloadIdentity):
        raise InputError(f"study {study.study_name!r} is not a workload study (search --workload)")
    final = attrs.get(StudyKey.WORKLOAD_FINAL)
    precisions = precisions_of(attrs)
    return WorkloadStudyRecord(
        name=study.study_name,
        model=identity.model,
        traffic=Traffic.from_dict(identity.traffic, where=f"study {study.study_name!r}"),
        context=StudyContext.from_attrs(attrs),
        trials=tuple(trial_result(t, precisions) for t in study.get_trials(deepcopy=False)),
        final=workload_final_of(final) if final else None,
        created=str(attrs.get(StudyKey.CREATED, "")),
        tritontune_version=str(attrs.get(StudyKey.VERSION, "")),
        space=attrs.get(StudyKey.SPACE),
        budget_trials=attrs.get(StudyKey.BUDGET),
        precisions=precisions,
    )
