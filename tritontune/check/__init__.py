"""``tritontune check``: re-measure a tuned repository against its tuning records (a CI gate)."""

from tritontune.check.reports import render_summary, write_junit
from tritontune.check.runner import (
    CHECK_MEASURE,
    CheckReport,
    CheckSettings,
    ModelCheck,
    find_models,
    run_check,
)
from tritontune.check.verdict import Criterion, RoundFigures, judge, needs_more_rounds

__all__ = [
    "CHECK_MEASURE",
    "CheckReport",
    "CheckSettings",
    "Criterion",
    "ModelCheck",
    "RoundFigures",
    "find_models",
    "judge",
    "needs_more_rounds",
    "render_summary",
    "run_check",
    "write_junit",
]
