"""Opening Optuna storages and the studies in them.

Any Optuna RDB storage works (SQLite by default, PostgreSQL for many workers); tests pass an
``InMemoryStorage`` object instead of a URL. A searching worker's storage sends heartbeats
(Optuna's own ``heartbeat_interval``/``grace_period``/stale-trial callback, see
:mod:`tritontune.study.coordination`).
"""

from __future__ import annotations

import time
import warnings
from pathlib import Path
from typing import Any

import optuna

from tritontune.errors import InputError
from tritontune.redaction import redact_text, redact_url
from tritontune.study import coordination
from tritontune.study.schema import ClaimKey

DEFAULT_STORAGE = "sqlite:///tritontune.db"

#: Times to open a storage again when another worker was creating its tables at that moment.
SCHEMA_RACE_RETRIES = 3

Storage = str | optuna.storages.BaseStorage


def storage_label(storage: Storage) -> str:
    """How a storage is named in messages, results and records: its URL without the password
    (``postgresql://alice:***@db/tritontune``, see :mod:`tritontune.redaction`), or its class."""
    return redact_url(storage) if isinstance(storage, str) else type(storage).__name__


def open_storage(url: str, *, heartbeat: bool = False) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``, or a one-line error saying why it can't be opened.

    With ``heartbeat`` (a searching worker), running trials send heartbeats and a trial whose
    worker stopped sending them is failed and its config queued again.
    """
    options: dict[str, Any] = {}
    if heartbeat:
        options = {
            "heartbeat_interval": coordination.HEARTBEAT_INTERVAL_S,
            "grace_period": coordination.HEARTBEAT_GRACE_S,
            "heartbeat_stale_trial_callback": coordination.requeue,
        }
    for attempt in range(SCHEMA_RACE_RETRIES + 1):
        try:
            with warnings.catch_warnings():  # heartbeats are marked experimental
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, **options)
        except Exception as err:  # SQLAlchemy and Optuna raise many kinds for a bad URL or file
            # The driver's message may quote the URL or its password: neither goes further.
            reason = redact_text(" ".join(str(err).split()), [url])[:300]
            if _lost_schema_race(reason) and attempt < SCHEMA_RACE_RETRIES:
                # Workers started at once on an empty database all create Optuna's tables (and
                # stamp its schema version); the losers find them made a moment later.
                time.sleep(0.5 + attempt)
                continue
            raise InputError(f"--storage {storage_label(url)}: cannot be opened ({reason})") from None
    raise AssertionError("unreachable")


def _lost_schema_race(reason: str) -> bool:
    """Whether opening failed only because another process created the same tables first."""
    return "already exists" in reason or "UNIQUE constraint failed: alembic_version" in reason


def existing_storage(url: str) -> optuna.storages.BaseStorage:
    """The storage of ``url`` when it already exists (``export``, ``report``, ``status``)."""
    if url.startswith("sqlite:///"):
        path = Path(url.removeprefix("sqlite:///"))
        if not path.is_file():
            raise InputError(f"--storage {storage_label(url)}: no such file ({path})")
    return open_storage(url)


def study_names(storage: optuna.storages.BaseStorage) -> list[str]:
    """The storage's studies (claims left out: they are bookkeeping, not studies)."""
    summaries = optuna.study.get_all_study_summaries(storage, include_best_trial=False)
    return sorted(s.study_name for s in summaries if ClaimKey.SEPARATOR not in s.study_name)


def create_or_resume(
    storage: optuna.storages.BaseStorage, study_name: str, sampler: optuna.samplers.BaseSampler
) -> tuple[optuna.Study, bool]:
    """``study_name`` created, or loaded when it exists; and whether it existed."""
    existing = {s.study_name for s in optuna.study.get_all_study_summaries(storage)}
    study = optuna.create_study(
        storage=storage,
        study_name=study_name,
        direction="maximize",
        sampler=sampler,
        load_if_exists=True,
    )
    return study, study_name in existing
