"""Optuna study handling: storage, identity of a study, and reading results back.

The study (any Optuna RDB storage, SQLite by default) is the single source of truth: every trial
keeps its knobs, its operating point and its config as user attributes, the baseline and the
search's identity (model, SLO, load mode) are study attributes. ``export``, ``check`` and ``report``
read them from there and never re-derive results. A study opens in ``optuna-dashboard`` as it is.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from tritontune import __version__
from tritontune.errors import InputError
from tritontune.search.operating_point import OperatingPoint
from tritontune.units import format_duration

DEFAULT_STORAGE = "sqlite:///tritontune.db"
IDENTITY_KEYS = ("model", "slo_p99_s", "load_mode")


def default_study_name(model: str, slo_p99_s: float, load_mode: str) -> str:
    return f"{model}-p99-{format_duration(slo_p99_s)}-{load_mode}"


def open_storage(url: str) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``, or a one-line error saying why it can't be opened."""
    try:
        return optuna.storages.RDBStorage(url)
    except Exception as err:  # SQLAlchemy and Optuna raise many kinds for a bad URL or file
        reason = " ".join(str(err).split())[:300]
        raise InputError(f"--storage {url}: cannot be opened ({reason})") from None


def load_existing_study(storage_url: str, study_name: str) -> optuna.Study:
    """A study that must already exist (``export``, ``check``, ``report`` read finished ones)."""
    if storage_url.startswith("sqlite:///"):
        path = Path(storage_url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise InputError(f"--storage {storage_url}: no such file ({path})")
    storage = open_storage(storage_url)
    names = sorted(s.study_name for s in optuna.study.get_all_study_summaries(storage))
    if study_name not in names:
        listed = ", ".join(names) if names else "none"
        raise InputError(f"study {study_name!r} not found in {storage_url} (studies there: {listed})")
    return optuna.load_study(study_name=study_name, storage=storage)


def open_study(
    storage_url: str,
    study_name: str,
    *,
    identity: dict,
    sampler: optuna.samplers.BaseSampler,
) -> tuple[optuna.Study, bool]:
    """Create or resume ``study_name``; returns the study and whether it was resumed.

    A study created for another model, SLO or load mode is refused, so results never mix.
    """
    storage = open_storage(storage_url)
    existing = {s.study_name for s in optuna.study.get_all_study_summaries(storage)}
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    resumed = study_name in existing
    if resumed:
        recorded = {k: study.user_attrs.get(k) for k in IDENTITY_KEYS}
        if recorded != {k: identity[k] for k in IDENTITY_KEYS}:
            raise InputError(
                f"study {study_name!r} in {storage_url} was created for {_describe(recorded)}, "
                f"not {_describe(identity)}; pick another --study name"
            )
    else:
        for key, value in identity.items():
            study.set_user_attr(key, value)
        study.set_user_attr("tritontune_version", __version__)
        study.set_user_attr("created", dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"))
    return study, resumed


def _describe(identity: dict) -> str:
    slo = identity.get("slo_p99_s")
    slo_text = format_duration(slo) if isinstance(slo, (int, float)) else "?"
    return f"model {identity.get('model')!r}, p99 SLO {slo_text}, {identity.get('load_mode')} load"


@dataclass(frozen=True)
class TrialResult:
    """A finished trial, read back from the study."""

    number: int
    params: dict
    knobs: dict
    operating_point: OperatingPoint | None
    config_pbtxt: str
    duration_s: float | None
    error: str | None = None
    accuracy: dict | None = None
    """For a precision variant: its accuracy against FP32 (shown wherever its speed is)."""

    @property
    def feasible(self) -> bool:
        return self.operating_point is not None and self.operating_point.feasible

    @property
    def throughput(self) -> float:
        return self.operating_point.throughput if self.operating_point else 0.0


def trial_result(trial: FrozenTrial, precisions: dict | None = None) -> TrialResult:
    """A trial as a :class:`TrialResult`; ``precisions`` is the study's record of the precision
    checks (study attribute ``precisions``), for the accuracy of a precision variant."""
    attrs = trial.user_attrs
    op = attrs.get("operating_point")
    duration = trial.duration.total_seconds() if trial.duration else None
    knobs = attrs.get("knobs", {})
    check = (precisions or {}).get(knobs.get("precision", ""))
    return TrialResult(
        number=trial.number,
        params=dict(attrs.get("point", trial.params)),
        knobs=knobs,
        operating_point=OperatingPoint.from_dict(op) if op else None,
        config_pbtxt=attrs.get("config_pbtxt", ""),
        duration_s=duration,
        error=attrs.get("error"),
        accuracy=check.get("accuracy") if check else None,
    )


def is_counted(trial: FrozenTrial) -> bool:
    """Trials that count towards ``--trials``: distinct configs that finished (measured or failed),
    not those cut off by Ctrl-C, nor re-proposals of a known point (copied, not measured)."""
    if trial.user_attrs.get("duplicate_of") is not None:
        return False
    if trial.state == TrialState.COMPLETE:
        return True
    return trial.state == TrialState.FAIL and not trial.user_attrs.get("interrupted", False)


def finished_results(study: optuna.Study) -> list[TrialResult]:
    """Completed trials, best (feasible, highest throughput) first."""
    trials = study.get_trials(deepcopy=False, states=[TrialState.COMPLETE])
    precisions = study.user_attrs.get("precisions")
    results = [trial_result(t, precisions) for t in trials if is_counted(t)]
    return sorted(results, key=lambda r: (r.feasible, r.throughput), reverse=True)


def failed_results(study: optuna.Study) -> list[TrialResult]:
    trials = study.get_trials(deepcopy=False, states=[TrialState.FAIL])
    precisions = study.user_attrs.get("precisions")
    return [trial_result(t, precisions) for t in trials if is_counted(t)]


def baseline_of(study: optuna.Study) -> OperatingPoint | None:
    data = study.user_attrs.get("baseline")
    return OperatingPoint.from_dict(data) if data else None


def confirmed_of(study: optuna.Study, trial_number: int) -> OperatingPoint | None:
    """The confirmed operating point of ``trial_number`` (the winner), if the search made one."""
    recorded = study.user_attrs.get("confirmed")
    if recorded and recorded.get("trial") == trial_number:
        return OperatingPoint.from_dict(recorded["operating_point"])
    return None
