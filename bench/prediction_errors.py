"""Benchmark: how far the predictions of ``--strategy predict`` searches were from what they then
measured (issue 39: median throughput error <= 10 %, p99 <= 20 %, composed settings apart).

For every trial of the studies in FOLDER (``bench/seeds.py``'s SQLite files, ``*.db`` or gzipped
``*.db.gz``) that carries a prediction: the throughput measured at its operating point against the
throughput predicted (with the correction the search applied then), and the p99 of the level
measured at the predicted load (each ramp starts there) against the p99 predicted, for
predictions made before any correction. Printed overall, then by how each prediction was made
(its ``derivation``: ``measured``, the setting calibrated itself; ``composed``, one-knob ratios
multiplied; ``contention``, composed and stretched by the model of shared cores).

    python bench/prediction_errors.py bench-seeds --glob 'predict-seed*.db*'
"""

from __future__ import annotations

import argparse
import gzip
import json
import sqlite3
import statistics
import tempfile
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

QUERY = """select a.value_json, b.value_json from trials t
  join trial_user_attributes a on a.trial_id = t.trial_id and a.key = 'operating_point'
  join trial_user_attributes b on b.trial_id = t.trial_id and b.key = 'predicted'"""


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


def errors(folder: Path, pattern: str) -> dict[str, dict[str, list[float]]]:
    """{"throughput" | "p99": {derivation: [relative errors]}} over the studies in ``folder``."""
    found: dict[str, dict[str, list[float]]] = {
        "throughput": defaultdict(list),
        "p99": defaultdict(list),
    }
    for db in studies(folder, pattern):
        for point_json, predicted_json in sqlite3.connect(db).execute(QUERY):
            point, predicted = json.loads(point_json), json.loads(predicted_json)
            how = predicted.get("derivation", "measured")
            found["throughput"][how].append(abs(point["throughput"] / predicted["throughput"] - 1))
            start = max(1, round(predicted["load"] * predicted["correction"]))
            level = next((lv for lv in point["levels"] if lv["load"] == start), None)
            if level is not None and predicted["correction"] == 1.0:
                found["p99"][how].append(abs(level["p99_ms"] / 1e3 / predicted["p99_s"] - 1))
    return found


def studies(folder: Path, pattern: str) -> Iterator[Path]:
    """The SQLite files of ``folder`` matching ``pattern``; a gzipped one unpacked to a scratch
    folder that lasts until the next is asked for."""
    with tempfile.TemporaryDirectory() as scratch:
        for path in sorted(folder.glob(pattern)):
            if path.suffix != ".gz":
                yield path
                continue
            db = Path(scratch) / path.stem
            db.write_bytes(gzip.decompress(path.read_bytes()))
            yield db


def line(name: str, values: list[float], unit: str = "configs") -> str:
    if not values:
        return f"{name}: none"
    middle = statistics.median(values)
    return f"{name}: {len(values)} {unit}, median {middle:.1%}, p90 {p90(values):.1%}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--glob", default="*.db*", help="which studies of the folder")
    args = parser.parse_args(argv)
    found = errors(args.folder, args.glob)
    for figure, label in (("throughput", "throughput"), ("p99", "p99 at the predicted load")):
        every = [e for values in found[figure].values() for e in values]
        print(line(label, every))
        for how, values in sorted(found[figure].items()):
            print("  " + line(how, values))


if __name__ == "__main__":
    main()
