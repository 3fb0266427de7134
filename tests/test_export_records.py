"""Export from in-memory studies (the typed study record), without a server."""

from pathlib import Path

import pytest

from tests.studies import make_study, point
from tritontune.errors import InputError
from tritontune.export import Endpoint, export_records
from tritontune.record import RECORD_FILE, read_record
from tritontune.search.study import read_study


def test_export_writes_the_confirmed_point_and_the_context(example_repository, tmp_path: Path):
    held = point(5200, 0.04, load=64)
    studies = {"s": read_study(make_study(example_repository, [3000, 6000], confirmed=held))}
    result = export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory", top_k=2)
    assert [m.name for m in result.models] == ["mlp", "mlp_rank2"]
    record = read_record(tmp_path / "out" / "mlp" / RECORD_FILE)
    assert record.operating_point.confirmed and record.operating_point.throughput == 5200
    assert record.load.value == 64 and record.load.batch_size == 1
    assert record.knobs["max_batch_size"] == 8 and record.triton_version == "2.51.0"
    assert record.baseline["throughput"] == 1000
    rank2 = read_record(tmp_path / "out" / "mlp_rank2" / RECORD_FILE)
    assert not rank2.operating_point.confirmed and rank2.operating_point.throughput == 3000


def test_export_warns_when_the_best_was_not_confirmed(example_repository, tmp_path: Path):
    missed = point(5000, 0.07, load=64, feasible=False)
    studies = {"s": read_study(make_study(example_repository, [6000], confirmed=missed))}
    result = export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory")
    assert any("was not confirmed" in w for w in result.warnings)
    record = read_record(tmp_path / "out" / "mlp" / RECORD_FILE)
    assert not record.operating_point.confirmed and record.operating_point.throughput == 6000


def test_export_refuses_changed_model_files(repo_copy: Path, tmp_path: Path):
    studies = {"s": read_study(make_study(repo_copy, [6000]))}
    (repo_copy / "mlp" / "1" / "model.onnx").write_bytes(b"changed")
    with pytest.raises(InputError, match="model.onnx changed since study 's' measured it"):
        export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory")
