"""Search: the tuning space, operating points, Optuna studies, and the search loop."""

from tritontune.search.operating_point import OperatingPoint, find_operating_point, meets_slo
from tritontune.search.runner import (
    SEARCH_MEASURE,
    SearchProgress,
    SearchResult,
    SearchSettings,
    run_search,
    space_for_session,
)
from tritontune.search.space import Choice, IntRange, SearchSpace, default_space, load_space_file
from tritontune.search.study import DEFAULT_STORAGE, TrialResult, default_study_name

__all__ = [
    "DEFAULT_STORAGE",
    "SEARCH_MEASURE",
    "Choice",
    "IntRange",
    "OperatingPoint",
    "SearchProgress",
    "SearchResult",
    "SearchSettings",
    "SearchSpace",
    "TrialResult",
    "default_space",
    "default_study_name",
    "find_operating_point",
    "load_space_file",
    "meets_slo",
    "run_search",
    "space_for_session",
]
