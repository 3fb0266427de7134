"""Precision variants before any trial, in every mode: which request data judges them, and what
leaves the space (the building and judging itself: tests/precision)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import optuna
import pytest

from tests.fakes import FakeSession
from tritontune.config.repository import load_model_source
from tritontune.errors import InputError
from tritontune.measure.inputs import read_input_data
from tritontune.measure.traffic import Layout, parse_traffic
from tritontune.precision.prepare import PrecisionCheck, config_input_specs, joined_input_data
from tritontune.search.space import Choice, SearchSpace
from tritontune.search.workload_search import WorkloadSearchSettings, run_workload_search

SPACE = SearchSpace(
    {
        "max_batch_size": Choice((16, 64)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
        "precision": Choice(("fp32", "fp16", "int8_dynamic")),
    }
)


class CheckedSession(FakeSession):
    """The fake server, with precision checks that record what they were judged on: fp16 passes,
    int8_dynamic does not."""

    def __init__(self, source) -> None:
        super().__init__(source)
        self.judged_on: list[tuple[Path, ...]] = []

    def prepare_precisions(self, precisions, *, accuracy=None, model=None, input_data=()):
        self.judged_on.append(tuple(input_data))
        return {
            p: PrecisionCheck(p, p != "int8_dynamic", None, reason="too far from fp32")
            for p in precisions
        }


def _data(path: Path, rows: int, value: float) -> Path:
    path.write_text(json.dumps({"data": [{"INPUT": [value + i] * 256} for i in range(rows)]}))
    return path


def test_a_workload_judges_precisions_on_its_classes_data_and_searches_those_that_pass(
    example_repository: Path, tmp_path: Path
):
    first, second = _data(tmp_path / "a.json", 2, 0.0), _data(tmp_path / "b.json", 3, 10.0)
    traffic = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "share": 0.3, "slo_p99": "20ms", "input_data": str(first)},
                {"name": "batch", "share": 0.7, "batch_size": 8, "input_data": str(second)},
                {"name": "more", "share": 0.1, "batch_size": 8, "input_data": str(first)},
            ]
        },
        where="test",
    )
    session = CheckedSession(load_model_source(example_repository, "mlp"))
    settings = WorkloadSearchSettings(
        trials=6, seed=1, storage=optuna.storages.InMemoryStorage(), study_name="w", rounds=1,
        layouts=(Layout.SHARED,),
    )  # fmt: skip
    result = run_workload_search(session, SPACE, traffic, settings)
    assert session.judged_on == [(first, second)]  # every class's file, each once
    assert {t.params["precision"] for t in result.trials} <= {"fp32", "fp16"}
    # the first trials measure each accepted precision, the scheduler's knobs TPE's
    first = sorted(result.trials, key=lambda t: t.number)[:2]
    assert [t.params["precision"] for t in first] == ["fp32", "fp16"]
    assert all("admission" in t.params for t in first)
    written = result.to_dict()["precisions"]
    assert written["fp16"]["accepted"] is True
    assert written["int8_dynamic"] == {**written["int8_dynamic"], "accepted": False}
    assert written["int8_dynamic"]["reason"] == "too far from fp32"


def test_a_workload_whose_every_precision_fails_is_refused(example_repository: Path):
    traffic = parse_traffic({"classes": [{"name": "a", "share": 1, "slo_p99": "20ms"}]}, where="t")
    session = CheckedSession(load_model_source(example_repository, "mlp"))
    settings = WorkloadSearchSettings(trials=1, storage=optuna.storages.InMemoryStorage())
    only_int8 = SPACE.replace("precision", Choice(("int8_dynamic",)))
    with pytest.raises(InputError, match="no precision of the space passed"):
        run_workload_search(session, only_int8, traffic, settings)
    assert session.judged_on == [()]  # no class names data: the bench's own (synthesized)


def test_several_request_data_files_are_judged_as_one(example_repository: Path, tmp_path: Path):
    config = load_model_source(example_repository, "mlp").base_config
    first, second = _data(tmp_path / "a.json", 2, 0.0), _data(tmp_path / "b.json", 3, 10.0)
    assert joined_input_data("mlp", config, []) is None
    assert joined_input_data("mlp", config, [first, first]) == first
    joined = joined_input_data("mlp", config, [first, second, first])
    assert joined is not None and joined != first
    again = joined_input_data("mlp", config, [first, second])
    assert again == joined  # named by its contents: the same inputs, the same file
    samples = read_input_data(joined, config_input_specs(config), batch_size=1, batching=True)
    firsts = [float(s["INPUT"][0][0]) for s in samples]
    assert firsts == [0.0, 1.0, 10.0, 11.0, 12.0]
    assert all(np.asarray(s["INPUT"]).shape == (1, 256) for s in samples)
