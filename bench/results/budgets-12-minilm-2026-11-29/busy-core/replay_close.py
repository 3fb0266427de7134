"""The disturbed search's step 1 (searches/default12-seed1), read with the first-trials rule of
15affb9: a level whose caveat says "NOT clean" is marked disturbed (studies before 15affb9 keep
only the caveat's text), then the precisions that get a second look.

    gunzip -k bench/results/budgets-12-minilm-2026-11-29/searches/default12-seed1.db.gz
    python bench/results/budgets-12-minilm-2026-11-29/busy-core/replay_close.py \
      bench/results/budgets-12-minilm-2026-11-29/searches/default12-seed1.db default12-seed1
"""

import dataclasses
import sys

from tritontune.search.first_trials import FirstTrials
from tritontune.search.space import SearchSpace
from tritontune.study.handle import TuningStudy

db, name = sys.argv[1], sys.argv[2]
record = TuningStudy.open_existing(f"sqlite:///{db}", name).read()
space = SearchSpace.from_dict(record.space)
first = FirstTrials.of(space)


def marked(r):
    p = r.operating_point
    if p is None:
        return r
    levels = [
        dataclasses.replace(lv, disturbed="NOT clean" in (lv.disturbance or "")) for lv in p.levels
    ]
    return dataclasses.replace(r, operating_point=dataclasses.replace(p, levels=levels))


results = [marked(r) for r in record.results]
step_one = first.step_one()
for r in results:
    if any(all(r.params.get(k) == v for k, v in pt.items()) for pt in step_one):
        print(
            r.number,
            r.params["precision"],
            round(r.operating_point.throughput, 1),
            "disturbed" if r.operating_point.disturbed else "clean",
        )
print(
    "second looks as stored (no 'disturbed' kept):",
    FirstTrials.of(space).close_precisions(record.results, step_one),
)
print("second looks with the caveats read:", first.close_precisions(results, step_one))
