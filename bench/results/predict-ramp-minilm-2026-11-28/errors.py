"""The prediction errors of the three predicted searches in band/searches (their studies,
gunzipped into a temporary directory): throughput against the measured operating point, and p99
against the level measured at the predicted load (each walk starts there)."""

import gzip
import json
import sqlite3
import statistics
import tempfile
from pathlib import Path

HERE = Path(__file__).parent / "band" / "searches"
QUERY = """select a.value_json, b.value_json from trials t
  join trial_user_attributes a on a.trial_id = t.trial_id and a.key = 'operating_point'
  join trial_user_attributes b on b.trial_id = t.trial_id and b.key = 'predicted'"""


def p90(values: list[float]) -> float:
    return sorted(values)[max(0, round(0.9 * len(values)) - 1)]


throughput, p99 = [], []
with tempfile.TemporaryDirectory() as scratch:
    for packed in sorted(HERE.glob("predict-seed*.db.gz")):
        db = Path(scratch) / packed.stem
        db.write_bytes(gzip.decompress(packed.read_bytes()))
        for point_json, predicted_json in sqlite3.connect(db).execute(QUERY):
            point, predicted = json.loads(point_json), json.loads(predicted_json)
            throughput.append(abs(point["throughput"] / predicted["throughput"] - 1))
            start = max(1, round(predicted["load"] * predicted["correction"]))
            level = next((lv for lv in point["levels"] if lv["load"] == start), None)
            if level is not None and predicted["correction"] == 1.0:
                p99.append(abs(level["p99_ms"] / 1e3 / predicted["p99_s"] - 1))
for name, errors in (("throughput", throughput), ("p99 at the predicted load", p99)):
    middle = statistics.median(errors)
    print(f"{name}: {len(errors)} configs, median {middle:.1%}, p90 {p90(errors):.1%}")
