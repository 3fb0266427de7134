"""Export from in-memory studies (the typed study record), without a server."""

from pathlib import Path

import pytest

from tests.studies import SLO, make_study, point, read_study
from tritontune.errors import InputError
from tritontune.export.single_class import Endpoint, export_records
from tritontune.measure.loadgen import LoadMode
from tritontune.search.playoff import Interval, PlayoffEntry, PlayoffResult, RoundFigure
from tritontune.tuning_record import RECORD_FILE, read_record


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
    assert any("was not re-measured" in w for w in result.warnings)
    record = read_record(tmp_path / "out" / "mlp" / RECORD_FILE)
    assert not record.operating_point.confirmed and record.operating_point.throughput == 6000


def test_export_refuses_changed_model_files(repo_copy: Path, tmp_path: Path):
    studies = {"s": read_study(make_study(repo_copy, [6000]))}
    (repo_copy / "mlp" / "1" / "model.onnx").write_bytes(b"changed")
    with pytest.raises(InputError, match="model.onnx changed since study 's' measured it"):
        export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory")


def playoff_of(trials: dict[int, tuple[list[float], float, bool]], winner: int | None):
    """A playoff result: per trial (throughput per round, p99, held), and a baseline of 1000/s."""

    def entry(trial, throughputs, p99, held, base=None):
        rounds = tuple(
            RoundFigure(t, p99 / 2, p99, p99 / 2, 1000, 0, held, True, 4.0) for t in throughputs
        )
        gain = None
        if base is not None:
            ratios = [t / b - 1 for t, b in zip(throughputs, base, strict=True)]
            gain = Interval.of(ratios)
        return PlayoffEntry(trial, 48, held, rounds, 6000, (64, 48) if trial else (8,), gain)

    base = [1000.0, 900.0, 1100.0]
    entries = [entry(n, t, p99, held, base) for n, (t, p99, held) in trials.items()]
    entries.append(entry(None, base, 0.02, True))
    return PlayoffResult(SLO, LoadMode.CONCURRENCY, 3, tuple(entries), winner)


def test_export_writes_the_playoff_figures_and_only_what_held(example_repository, tmp_path: Path):
    playoff = playoff_of({1: ([5000, 4500, 5600], 0.04, True), 0: ([3000, 2900, 3100], 0.03, False)}, 1)
    studies = {"s": read_study(make_study(example_repository, [3000, 6000], playoff=playoff))}
    result = export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory", top_k=2)
    assert [m.name for m in result.models] == ["mlp"]  # trial 0 never held: not exported
    assert any("only 1 config(s) held its SLO in the playoff" in w for w in result.warnings)
    record = read_record(tmp_path / "out" / "mlp" / RECORD_FILE)
    point_ = record.operating_point
    assert point_.confirmed and point_.throughput == 5000 and record.load.value == 48
    assert record.playoff is not None
    assert record.playoff["throughput"] == {"median": 5000, "low": 4500, "high": 5600}
    assert record.playoff["gain_over_baseline"]["median"] == pytest.approx(4.0)
    assert record.playoff["screening_throughput"] == 6000 and record.playoff["winner"]
    assert record.baseline["throughput"] == 1000  # the baseline's playoff median


def test_export_refuses_when_nothing_held_in_the_playoff(example_repository, tmp_path: Path):
    playoff = playoff_of({1: ([5000, 4500, 5600], 0.07, False)}, None)
    studies = {"s": read_study(make_study(example_repository, [3000, 6000], playoff=playoff))}
    with pytest.raises(InputError, match="no candidate held its SLO in the playoff"):
        export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory")
    assert not (tmp_path / "out").exists()


def test_export_says_so_when_the_models_own_config_beat_the_winner(
    example_repository: Path, tmp_path: Path
):
    """The playoff's winner served less than the baseline in every round: export still writes
    it (the user asked), and warns that the model's own config is the better one."""
    playoff = playoff_of({1: ([900, 800, 1000], 0.04, True)}, 1)
    studies = {"s": read_study(make_study(example_repository, [3000, 6000], playoff=playoff))}
    result = export_records([Endpoint("s")], studies, tmp_path / "out", storage="memory")
    warning = next(w for w in result.warnings if "own config served more" in w)
    assert "trial 1" in warning and "-10% [-11%, -9%]" in warning, warning
    # a winner ahead of the baseline in some round is not warned about
    playoff = playoff_of({1: ([900, 800, 1200], 0.04, True)}, 1)
    studies = {"s": read_study(make_study(example_repository, [3000, 6000], playoff=playoff))}
    result = export_records([Endpoint("s")], studies, tmp_path / "out2", storage="memory")
    assert not any("own config served more" in w for w in result.warnings)
