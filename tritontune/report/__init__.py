"""Reports of a finished study: an HTML page (tables, curves, frontier, capacity plan, warnings)."""

from tritontune.report.capacity import DEFAULT_HEADROOM, CapacityPlan, plan_capacity
from tritontune.report.data import MeasuredPoint, ReportData, collect, pareto_front
from tritontune.report.html import render_report, write_report

__all__ = [
    "DEFAULT_HEADROOM",
    "CapacityPlan",
    "MeasuredPoint",
    "ReportData",
    "collect",
    "pareto_front",
    "plan_capacity",
    "render_report",
    "write_report",
]
