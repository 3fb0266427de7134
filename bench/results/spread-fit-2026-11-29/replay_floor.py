"""Replay: each measured config's p99 prediction again, with each setting's spread as fitted and
with it floored at the concurrency-1 level's (8a4b33b), from the studies alone (their
calibrations keep each level's latencies since 28d4080). The p99 is simulated at the predicted
load and compared with the level measured there, for predictions made before any correction.

    PYTHONPATH=. python bench/results/spread-fit-2026-11-29/replay_floor.py 'minilm/predict*.db'
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import json
import sqlite3
import statistics
from typing import Any

import optuna

from tritontune.predict.batcher import CLIENT_JITTER, BatcherConfig, ClosedLoop, simulate
from tritontune.predict.calibration import (
    Calibration,
    SettingCalibration,
    execution_setting,
    lognormal_cv,
)


def calibrations(study: dict[str, Any]) -> tuple[Calibration, Calibration]:
    """The study's calibration as fitted, and with each spread floored."""
    reference, cores = study["calibration_reference"], int(study.get("calibration_cores") or 0)
    fitted, floored = (
        Calibration(dict(reference), cores=cores),
        Calibration(dict(reference), cores=cores),
    )
    for key, value in study.items():
        if key.startswith("calibration:"):
            setting = SettingCalibration.from_dict(value)
            single = [level for level in setting.latencies if level.load == 1]
            least = min(lognormal_cv(single[-1].p50_s, single[-1].p99_s), 1.0) if single else 0.0
            fitted.add(setting)
            floored.add(dataclasses.replace(setting, cv=max(setting.cv, least)))
    return fitted, floored


def batcher(params: dict[str, Any]) -> BatcherConfig:
    size, batching = int(params.get("max_batch_size", 0)), bool(params.get("dynamic_batching", False))
    return BatcherConfig(
        max_batch_size=size,
        dynamic_batching=batching,
        max_queue_delay_s=(params.get("max_queue_delay") or 0) / 1e6 if batching else 0.0,
        preferred_batch_sizes=(size,)
        if batching and params.get("preferred_batch_size") == "max"
        else (),
        instances=int(params.get("instance_count", 1)),
    )


def replay(pattern: str) -> dict[str, list[float]]:
    errors: dict[str, list[float]] = {"fitted": [], "floored": []}
    for path in sorted(glob.glob(pattern)):
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        study = {
            k: json.loads(v) for k, v in db.execute("select key, value_json from study_user_attributes")
        }
        (name,) = db.execute("select study_name from studies").fetchone()
        both = calibrations(study)
        for trial in optuna.load_study(study_name=name, storage=f"sqlite:///{path}").trials:
            point, predicted = trial.user_attrs.get("operating_point"), trial.user_attrs.get("predicted")
            if not point or not predicted or predicted["correction"] != 1.0:
                continue
            load = max(1, round(predicted["load"]))
            level = next((lv for lv in point["levels"] if lv["load"] == load), None)
            if level is None:
                continue
            for label, calibration in zip(errors, both, strict=True):
                prediction = calibration.predict(execution_setting(trial.params))
                modelled = simulate(
                    prediction.curve,
                    batcher(trial.params),
                    ClosedLoop(load),
                    n_requests=max(2000, 8 * load),
                    overhead_s=prediction.overhead_s,
                    path_s=prediction.path_s,
                    jitter=CLIENT_JITTER,
                )
                errors[label].append(level["p99_ms"] / 1e3 / modelled.p99_s - 1)
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("pattern", help="the studies (unzipped SQLite files), a glob")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    for label, found in replay(args.pattern).items():
        if found:
            absolute, signed = statistics.median(abs(e) for e in found), statistics.median(found)
            print(
                f"{label}: {len(found)} configs, p99 error median {absolute:.1%}, signed {signed:+.1%}"
            )


if __name__ == "__main__":
    main()
