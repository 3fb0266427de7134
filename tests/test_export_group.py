"""Exporting a workload study of several models on one server (each class naming its model), and
reading the repository back the way ``check`` does, with no server: the study comes from the real
search loop on the modelled server (``FakeGroupSession``, tests/fakes.py), over a repository of
two copies of the example MLP (tests/groups.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest
import yaml

from tests.fakes import FakeGroupSession
from tests.groups import MODELS, two_model_repository
from tests.search.test_group_search import SPACE, TRAFFIC, settings
from tritontune.check.gate import WorkloadCheck, find_models
from tritontune.config.model_config import parse_config_text, read_config
from tritontune.config.repository import load_model_source
from tritontune.config.variant import describe_config
from tritontune.errors import InputError
from tritontune.export.single_class import Endpoint
from tritontune.export.studies import export_studies
from tritontune.measure.traffic import Layout, read_traffic
from tritontune.search.setup import _step_model_files
from tritontune.search.workload_search import run_workload_search
from tritontune.serving.opening import open_group_session
from tritontune.study.schema import ContextKey
from tritontune.tuning_record import RECORD_FILE, WORKLOAD_FILE, WorkloadRecord, read_record

ROUTES = {"chat": "mlp_a", "embed": "mlp_b"}


@pytest.fixture
def repository(tmp_path: Path, example_repository: Path) -> Path:
    return two_model_repository(tmp_path, example_repository)


@pytest.fixture
def storage(tmp_path: Path, repository: Path) -> str:
    """A finished study of both models whose winner is a trial, its context keeping every model's
    files as the search of a real group session records them."""
    url = f"sqlite:///{tmp_path / 'g.db'}"
    session = FakeGroupSession(tuple(load_model_source(repository, m) for m in MODELS), cores=4)
    run_workload_search(session, SPACE, TRAFFIC, settings(trials=6, rounds=1, storage=url))
    # The fake serves no real group: record what a real session's search records (its context).
    files = _step_model_files(open_group_session(repository, TRAFFIC))
    optuna.load_study(study_name="g", storage=url).set_user_attr(ContextKey.STEP_MODEL_FILES, files)
    return url


def winner_of(storage: str) -> dict:
    return optuna.load_study(study_name="g", storage=storage).user_attrs["workload_final"]["winner"]


def test_the_context_keeps_every_models_files(repository: Path):
    files = _step_model_files(open_group_session(repository, TRAFFIC))
    assert files == {m: load_model_source(repository, m).file_digests() for m in MODELS}


def test_each_model_is_exported_with_its_files_its_config_and_a_record_naming_the_group(
    storage: str, tmp_path: Path, repository: Path
):
    winner = winner_of(storage)
    assert winner["trial"] is not None and set(winner["models"]) == set(MODELS)
    out = tmp_path / "out"
    result = export_studies([Endpoint("g")], storage, out)
    assert [m.name for m in result.models] == list(MODELS) and result.warnings == []
    assert sorted(p.name for p in out.iterdir()) == list(MODELS)  # nothing staged is left
    for model in MODELS:
        directory = out / model
        config = read_config(directory / "config.pbtxt")
        assert config == parse_config_text(winner["models"][model], source="winner")
        assert config.name == model
        copied = directory / "1" / "model.onnx"
        assert copied.is_file() and not copied.is_symlink()  # a copy, not a link to the user's
        record = read_record(directory / RECORD_FILE)
        assert isinstance(record, WorkloadRecord)
        assert record.model == model and record.layout == Layout.SHARED
        assert record.routes == ROUTES and record.models == MODELS
        assert record.knobs == describe_config(config)  # its own knobs, not the group's
        assert record.model_files == load_model_source(repository, model).file_digests()
        assert record.tuned_from == {
            "model": model, "study": "g", "storage": storage, "trial": winner["trial"],
        }  # fmt: skip
        assert WorkloadRecord.from_dict(record.to_dict()) == record
        # the workload file beside it keeps each class's model
        traffic = read_traffic(directory / WORKLOAD_FILE)
        assert traffic.routed and traffic.routes("") == ROUTES
        assert traffic.to_dict() == TRAFFIC.to_dict()
    # check reads them as one workload of two models (no model of it checked alone)
    models = find_models(out)
    assert [m.name for m in models] == list(MODELS)
    assert all(m.workload is not None and m.record is None for m in models)
    assert models[0].workload is not None
    check = WorkloadCheck(MODELS, models[0].workload)
    assert check.serving == "several models on one server"


def test_a_model_whose_files_changed_since_the_search_is_refused(
    storage: str, tmp_path: Path, repository: Path
):
    changed = repository / "mlp_b" / "1" / "model.onnx"
    changed.unlink()
    changed.write_bytes(b"not the measured model")
    with pytest.raises(InputError) as err:
        export_studies([Endpoint("g")], storage, tmp_path / "out")
    assert str(err.value).startswith(f"{repository / 'mlp_b'}: 1/model.onnx changed since study 'g'")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def test_a_study_that_did_not_record_each_models_files_is_exported_with_a_warning(
    storage: str, tmp_path: Path
):
    optuna.load_study(study_name="g", storage=storage).set_user_attr(ContextKey.STEP_MODEL_FILES, None)
    result = export_studies([Endpoint("g")], storage, tmp_path / "out")
    assert [m.name for m in result.models] == list(MODELS)
    assert any("did not record its models' files" in w for w in result.warnings)


def test_a_non_empty_out_is_replaced_only_with_force(storage: str, tmp_path: Path):
    out = tmp_path / "out"
    (out / "other").mkdir(parents=True)
    with pytest.raises(InputError, match=r"not empty; pass --force to replace mlp_a, mlp_b"):
        export_studies([Endpoint("g")], storage, out)
    export_studies([Endpoint("g")], storage, out, force=True)
    assert sorted(p.name for p in out.iterdir()) == ["mlp_a", "mlp_b", "other"]


def test_a_missing_model_of_the_group_is_one_line_naming_the_record_and_route(
    storage: str, tmp_path: Path
):
    out = tmp_path / "out"
    export_studies([Endpoint("g")], storage, out)
    shutil.rmtree(out / "mlp_b")
    with pytest.raises(InputError) as err:
        find_models(out)
    assert str(err.value) == (
        f"{out / 'mlp_a' / RECORD_FILE}: workload.routes.embed: model 'mlp_b' is not in the repository"
    )


def test_a_model_two_groups_route_to_is_one_line_naming_the_record_and_route(
    storage: str, tmp_path: Path
):
    """A second group (``mlp_c`` and ``mlp_b``) exported into the same repository: ``mlp_b``'s
    directory holds one config, the first group's."""
    out = tmp_path / "out"
    export_studies([Endpoint("g")], storage, out)
    shutil.copytree(out / "mlp_a", out / "mlp_c")
    other = {"chat": "mlp_c", "embed": "mlp_b"}
    data = yaml.safe_load((out / "mlp_c" / RECORD_FILE).read_text())
    data["model"], data["workload"]["routes"] = "mlp_c", other
    (out / "mlp_c" / RECORD_FILE).write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        find_models(out)
    message = str(err.value)
    assert message.startswith(
        f"{out / 'mlp_c' / RECORD_FILE}: workload.routes.embed: model 'mlp_b' is exported with "
        "another workload (its record routes chat -> mlp_a, embed -> mlp_b)"
    )
    assert "\n" not in message


def test_routes_that_are_not_the_classes_models_are_refused(storage: str, tmp_path: Path):
    out = tmp_path / "out"
    export_studies([Endpoint("g")], storage, out)
    swapped = {"chat": "mlp_b", "embed": "mlp_a"}
    for model in MODELS:
        path = out / model / RECORD_FILE
        data = yaml.safe_load(path.read_text())
        data["workload"]["routes"] = swapped
        path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        find_models(out)
    assert str(err.value) == (
        f"{out / 'mlp_a' / RECORD_FILE}: workload.routes: chat -> mlp_b, embed -> mlp_a is not what "
        f"the classes of {WORKLOAD_FILE} call (chat -> mlp_a, embed -> mlp_b)"
    )
