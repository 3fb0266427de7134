"""Benchmark: the prediction at every load a ``--strategy predict`` search measured (issue 39).

``bench/prediction_errors.py`` compares p99 at one load, the predicted operating point. That
load sits at the knee, where a closed loop's latency grows by ``1 / throughput`` a client, so
a throughput a few percent high moves p99 a lot. This script tells the two apart: for every
trial of the studies in FOLDER that carries a prediction, each load level its ramp measured is
simulated with the study's calibration (the curve the proposal was ranked by, as
``tritontune predict`` rebuilds it: no correction) at that level's load, and the simulated
throughput and p99 are set beside the measured ones. Printed: every level of every trial, then
the median and p90 error over the levels that met the SLO, by how each setting's curve was
made (``measured``, ``composed``, ``contention``).

    python bench/prediction_levels.py FOLDER --glob 'predict-seed*.db*'
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import optuna

from tritontune.predict.calibration import execution_setting
from tritontune.predict.config import batcher_config_of
from tritontune.search.whatif import study_model
from tritontune.study.handle import TuningStudy
from tritontune.study.schema import TrialKey

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prediction_errors import line, studies  # noqa: E402


def levels_of(db: Path) -> list[dict]:
    """Every measured level of every predicted trial of the study in ``db``, simulated."""
    url = f"sqlite:///{db}"
    rows = []
    for summary in optuna.get_all_study_summaries(url):
        if "~" in summary.study_name:
            continue  # a claim's bookkeeping study, not a search
        study = TuningStudy.open_existing(url, summary.study_name)
        if study.calibration() is not None:
            rows += _levels(study, summary.study_name)
    return rows


def _levels(study: TuningStudy, name: str) -> list[dict]:
    model = study_model(study)
    rows = []
    for trial in study.optuna_study.get_trials(deepcopy=False):
        if TrialKey.PREDICTED not in trial.user_attrs:
            continue
        point = trial.user_attrs.get(TrialKey.POINT)
        measured = trial.user_attrs.get(TrialKey.OPERATING_POINT)
        if not point or not measured:
            continue
        prediction = model.calibration.predict(execution_setting(point))
        config = batcher_config_of(model.build(point))
        for level in measured["levels"]:
            simulated = model.simulate(prediction, config, float(level["load"]))
            rows.append(
                {
                    "study": name,
                    "trial": trial.number,
                    "derivation": str(prediction.derivation),
                    "load": float(level["load"]),
                    "throughput": (level["throughput"], simulated.throughput_ips),
                    "p99_s": (level["p99_ms"] / 1e3, simulated.p99_s),
                    "meets_slo": bool(level.get("meets_slo")),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--glob", default="*.db*", help="which studies of the folder")
    args = parser.parse_args(argv)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    rows = [row for db in studies(args.folder, args.glob) for row in levels_of(db)]
    print("study trial derivation load: throughput measured/simulated, p99 ms measured/simulated")
    for row in rows:
        (tm, ts), (pm, ps) = row["throughput"], row["p99_s"]
        slo = "" if row["meets_slo"] else "  (missed the SLO)"
        print(
            f"{row['study']} #{row['trial']} {row['derivation']} {row['load']:g}: "
            f"{tm:.1f}/{ts:.1f}, {pm * 1e3:.0f}/{ps * 1e3:.0f}{slo}"
        )
    errors: dict[str, dict[str, list[float]]] = {
        "throughput": defaultdict(list),
        "p99": defaultdict(list),
    }
    for row in rows:
        if not row["meets_slo"]:
            continue
        for figure, key in (("throughput", "throughput"), ("p99", "p99_s")):
            measured, simulated = row[key]
            errors[figure][row["derivation"]].append(abs(simulated / measured - 1))
    for figure, values_by in errors.items():
        every = [e for values in values_by.values() for e in values]
        print(line(f"{figure} at the levels that met the SLO", every, "levels"))
        for how, values in sorted(values_by.items()):
            print("  " + line(how, values, "levels"))


if __name__ == "__main__":
    main()
