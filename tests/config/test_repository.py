import hashlib
from pathlib import Path

import pytest

from tritontune.config.model_config import read_config
from tritontune.config.repository import WorkingRepository, load_model_source
from tritontune.config.variant import Variant, apply_variant
from tritontune.errors import ConfigError, InputError


def tree_digest(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_loads_example_source(example_repository: Path):
    source = load_model_source(example_repository, "mlp")
    assert source.backend == "onnxruntime"
    assert source.version == "1"
    assert source.model_file == example_repository / "mlp" / "1" / "model.onnx"
    assert not source.config_derived


def test_missing_model_lists_what_is_there(example_repository: Path):
    with pytest.raises(InputError, match=r"model 'nope' not found.*models there: mlp"):
        load_model_source(example_repository, "nope")


def test_missing_repository(tmp_path: Path):
    with pytest.raises(InputError, match="model repository not found"):
        load_model_source(tmp_path / "absent", "mlp")


def test_derives_config_when_absent(repo_copy: Path):
    (repo_copy / "mlp" / "config.pbtxt").unlink()
    source = load_model_source(repo_copy, "mlp")
    assert source.config_derived
    assert source.base_config.max_batch_size > 0
    assert source.base_config.input[0].name == "INPUT"


def test_config_without_io_is_completed_from_onnx(repo_copy: Path):
    (repo_copy / "mlp" / "config.pbtxt").write_text('name: "mlp"\nmax_batch_size: 8\n')
    source = load_model_source(repo_copy, "mlp")
    assert source.backend == "onnxruntime"
    assert [t.name for t in source.base_config.output] == ["SCORES"]


def test_name_mismatch_is_refused(repo_copy: Path):
    path = repo_copy / "mlp" / "config.pbtxt"
    path.write_text(path.read_text().replace('name: "mlp"', 'name: "other"'))
    with pytest.raises(ConfigError, match="differs from the directory name"):
        load_model_source(repo_copy, "mlp")


def test_no_version_directory(tmp_path: Path):
    (tmp_path / "m").mkdir()
    with pytest.raises(InputError, match="no version directory"):
        load_model_source(tmp_path, "m")


def test_python_serving_keeps_user_backend_and_user_files(example_repository: Path, tmp_path: Path):
    before = tree_digest(example_repository)
    source = load_model_source(example_repository, "mlp")
    work = WorkingRepository(tmp_path / "work")
    served = work.add(source, frozenset({"python"}))
    assert served.via_python

    tuned = apply_variant(source.base_config, Variant(instance_count=2))
    sent = served.served_config(tuned)
    assert tuned.backend == "onnxruntime"  # what the user sees and exports
    assert sent.backend == "python"
    assert sent.parameters["onnx_model_file"].string_value == "model.onnx"
    assert sent.parameters["intra_op_thread_count"].string_value == "1"
    assert sent.instance_group[0].count == 2

    on_disk = read_config(work.root / "mlp" / "config.pbtxt")
    assert on_disk.backend == "python"
    assert (work.root / "mlp" / "1" / "model.py").is_file()
    assert (work.root / "mlp" / "1" / "model.onnx").resolve() == source.model_file.resolve()
    assert tree_digest(example_repository) == before


def test_native_backend_is_used_when_present(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    served = WorkingRepository(tmp_path).add(source, frozenset({"onnxruntime", "python"}))
    assert not served.via_python
    assert served.served_config(source.base_config).backend == "onnxruntime"


def test_missing_backend_is_a_clear_error(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    with pytest.raises(InputError, match="needs the 'onnxruntime' backend"):
        WorkingRepository(tmp_path).add(source, frozenset({"pytorch"}))
