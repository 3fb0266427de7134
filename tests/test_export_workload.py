"""Exporting a workload study's winner, and reading its repository back the way ``check`` does.

The study comes from the real search loop on the modelled server (tests/fakes.py); what is
under test is the export: the configs written are the ones the final rounds measured, the
workload file reads back to the same traffic, and the records route every class.
"""

from __future__ import annotations

import json
from pathlib import Path

import optuna
import pytest
import yaml

from tests.fakes import FakeSession
from tritontune.check.gate import find_models
from tritontune.config.model_config import read_config
from tritontune.config.repository import load_model_source
from tritontune.errors import InputError
from tritontune.export.single_class import Endpoint
from tritontune.export.studies import export_studies
from tritontune.measure.traffic import Layout, parse_traffic, read_traffic
from tritontune.search.space import Choice, SearchSpace
from tritontune.search.workload_search import WorkloadSearchSettings, run_workload_search
from tritontune.tuning_record import RECORD_FILE, WORKLOAD_FILE, WorkloadRecord, read_record

SPACE = SearchSpace(
    {
        "max_batch_size": Choice((16, 64)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
    }
)


@pytest.fixture
def traffic(tmp_path: Path):
    data = tmp_path / "batch-inputs.json"
    data.write_text(json.dumps({"data": [{"INPUT": [0.5] * 256}]}), encoding="utf-8")
    spec = {
        "classes": [
            {"name": "interactive", "share": 0.3, "priority": 1, "slo_p99": "20ms"},
            {
                "name": "batch",
                "share": 0.7,
                "batch_size": 8,
                "priority": 2,
                "timeout": "1500ms",
                "may_shed": True,
                "input_data": str(data),
            },
        ]
    }
    return parse_traffic(spec, where="test")


@pytest.fixture
def storage(tmp_path: Path, example_repository: Path, traffic) -> str:
    url = f"sqlite:///{tmp_path / 'study.db'}"
    session = FakeSession(load_model_source(example_repository, "mlp"))
    # Trials in the shared layout: the finals add the best of them split into endpoints.
    settings = WorkloadSearchSettings(
        trials=6, seed=1, storage=url, study_name="w", rounds=2, layouts=(Layout.SHARED,)
    )
    run_workload_search(session, SPACE, traffic, settings)
    return url


def test_the_shared_winner_is_exported_with_its_workload(storage, tmp_path, traffic):
    result = export_studies([Endpoint("w")], storage, tmp_path / "out")
    assert [m.name for m in result.models] == ["mlp"]
    model_dir = tmp_path / "out" / "mlp"
    record = read_record(model_dir / RECORD_FILE)
    assert isinstance(record, WorkloadRecord)
    assert record.layout == Layout.SHARED
    assert record.routes == {"interactive": "mlp", "batch": "mlp"}
    assert len(record.capacity_rounds) == 2 and record.reference_rate == min(record.capacity_rounds)
    assert record.tuned_from["study"] == "w" and record.tuned_from["trial"] is not None
    # The config written is the one the final rounds measured (priorities, admission control).
    study = optuna.load_study(study_name="w", storage=storage)
    measured = study.user_attrs["workload_final"]["winner"]["models"]["mlp"]
    config = read_config(model_dir / "config.pbtxt")
    assert config.name == "mlp" and config.dynamic_batching.priority_levels == 2
    assert 'name: "mlp"' in measured and "priority_levels: 2" in measured
    # The workload file reads back to the same traffic, its request data copied beside it.
    again = read_traffic(model_dir / WORKLOAD_FILE)
    assert again.to_dict()["classes"][0] == traffic.to_dict()["classes"][0]
    batch = again.get("batch")
    assert batch.request.input_data == (model_dir / "tritontune.input_data.batch.json").resolve()
    assert batch.request.timeout_us == 1_500_000 and batch.may_shed
    assert again.get("interactive").slo_p99_s == pytest.approx(0.020)
    # check reads it as one workload, no single-class record.
    (model,) = find_models(tmp_path / "out")
    assert model.workload is not None and model.record is None


def test_an_endpoint_winner_is_exported_as_one_model_per_class(storage, tmp_path):
    study = optuna.load_study(study_name="w", storage=storage)
    final = study.user_attrs["workload_final"]
    endpoints = next(f for f in final["finalists"] if f["layout"] == "endpoints")
    study.set_user_attr("workload_final", {**final, "winner": endpoints})  # as if it had won
    result = export_studies([Endpoint("w")], storage, tmp_path / "out")
    assert sorted(m.name for m in result.models) == ["mlp_batch", "mlp_interactive"]
    for name, role in (("mlp_interactive", "interactive"), ("mlp_batch", "batch")):
        record = read_record(tmp_path / "out" / name / RECORD_FILE)
        assert isinstance(record, WorkloadRecord) and record.layout == Layout.ENDPOINTS
        assert record.routes == {"interactive": "mlp_interactive", "batch": "mlp_batch"}
        assert record.knobs == endpoints["knobs"][role]
        config = read_config(tmp_path / "out" / name / "config.pbtxt")
        assert config.name == name and config.dynamic_batching.priority_levels == 0
    batch = read_config(tmp_path / "out" / "mlp_batch" / "config.pbtxt")
    # the class that may be shed has the trial's admission bound on its endpoint's queue
    admission = study.trials[endpoints["trial"]].params["admission"]
    bound = 0 if admission == "none" else int(admission)
    assert batch.dynamic_batching.default_queue_policy.max_queue_size == bound
    interactive = read_config(tmp_path / "out" / "mlp_interactive" / "config.pbtxt")
    assert interactive.dynamic_batching.default_queue_policy.max_queue_size == 0  # never shed
    models = find_models(tmp_path / "out")
    assert all(m.workload is not None for m in models) and len(models) == 2


def test_a_route_to_a_missing_model_is_a_clear_error(storage, tmp_path):
    study = optuna.load_study(study_name="w", storage=storage)
    final = study.user_attrs["workload_final"]
    endpoints = next(f for f in final["finalists"] if f["layout"] == "endpoints")
    study.set_user_attr("workload_final", {**final, "winner": endpoints})
    export_studies([Endpoint("w")], storage, tmp_path / "out")
    import shutil

    shutil.rmtree(tmp_path / "out" / "mlp_batch")
    with pytest.raises(InputError, match=r"workload.routes.batch: model 'mlp_batch' is not in"):
        find_models(tmp_path / "out")


def test_a_workload_study_is_exported_alone(storage, tmp_path):
    with pytest.raises(InputError, match="export it alone"):
        export_studies([Endpoint("w", role="interactive")], storage, tmp_path / "out")
    with pytest.raises(InputError, match="export it alone"):
        export_studies([Endpoint("w")], storage, tmp_path / "out", top_k=2)


def test_a_study_without_final_rounds_is_not_exported(tmp_path, example_repository, traffic):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    session = FakeSession(load_model_source(example_repository, "mlp"))
    run_workload_search(
        session, SPACE, traffic, WorkloadSearchSettings(trials=2, storage=url, study_name="w", rounds=1)
    )
    optuna.load_study(study_name="w", storage=url).set_user_attr("workload_final", None)
    with pytest.raises(InputError, match="no final rounds yet"):
        export_studies([Endpoint("w")], url, tmp_path / "out")


def test_the_workload_record_round_trips_and_names_a_bad_field(storage, tmp_path):
    export_studies([Endpoint("w")], storage, tmp_path / "out")
    path = tmp_path / "out" / "mlp" / RECORD_FILE
    data = yaml.safe_load(path.read_text())
    record = WorkloadRecord.from_dict(data)
    assert WorkloadRecord.from_dict(record.to_dict()) == record
    data["workload"]["layout"] = "sideways"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"tritontune.lock.yaml: workload.layout"):
        read_record(path)
