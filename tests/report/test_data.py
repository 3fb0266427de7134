"""The report's figures, collected from an in-memory study (no server)."""

from pathlib import Path

import pytest

from tests.studies import make_study, point, read_study
from tritontune.report.data import collect
from tritontune.study.figures import OperatingPoint


def test_report_states_the_confirmed_point_and_its_gain(example_repository: Path):
    held = point(5200, 0.04, load=64)
    data = collect(read_study(make_study(example_repository, [3000, 6000], confirmed=held)))
    assert data.best is not None and data.best.throughput == 6000
    assert data.best_point == OperatingPoint.from_dict(held.to_dict())  # as stored
    assert data.gain is not None and data.gain.median == pytest.approx(4.2)
    assert data.capacity is not None and data.capacity.max_throughput == pytest.approx(5200)
    assert [r.throughput for r in data.top] == [6000, 3000]
    assert data.points and data.to_dict()["load_mode"] == "concurrency"


def test_report_falls_back_to_the_screening_point_when_confirmation_missed(example_repository):
    missed = point(5000, 0.07, load=64, feasible=False)
    data = collect(read_study(make_study(example_repository, [3000, 6000], confirmed=missed)))
    assert data.best_point is not None and data.best_point.throughput == 6000


def test_report_states_the_playoff_winner_with_its_interval(example_repository: Path):
    from tests.test_export_records import playoff_of

    playoff = playoff_of({0: ([3000, 2800, 3300], 0.03, True), 1: ([5000, 4500, 5600], 0.04, True)}, 0)
    study = read_study(make_study(example_repository, [3000, 6000], playoff=playoff))
    data = collect(study)
    assert data.figures == "playoff" and data.best is not None and data.best.number == 0
    assert data.best_point is not None and data.best_point.throughput == 3000  # the playoff median
    assert data.gain is not None and data.gain.median == pytest.approx(2.0)
    figures = data.to_dict()
    assert figures["playoff"]["winner"] == 0 and figures["figures"] == "playoff"


def test_gpu_figures_are_shown_per_gpu_or_their_absence_said(example_repository: Path):
    from dataclasses import replace

    import optuna

    from tritontune.measure.gpu_metrics import NO_GPUS, GpuFigures
    from tritontune.report.html import gpu_figures, render_report

    cpu_only = collect(read_study(make_study(example_repository, [3000, 6000])))
    assert cpu_only.gpu_points == [] and cpu_only.gpu_note == NO_GPUS
    assert cpu_only.to_dict()["gpu"] == NO_GPUS and gpu_figures(cpu_only) is None

    def gpus(used_gib: float, util: float) -> tuple[GpuFigures, ...]:
        return tuple(
            GpuFigures(uuid, 4, util, used_gib * 2**30, 80 * 2**30, 250.0)
            for uuid in ("GPU-aaa", "GPU-bbb")
        )

    data = collect(read_study(make_study(example_repository, [3000, 6000])))
    data.points = [replace(p, gpu=gpus(2.0 + i, 0.5)) for i, p in enumerate(data.points)]
    memory, utilization = gpu_figures(data)
    assert len(memory.data) == len(utilization.data) == 2  # one trace per GPU
    assert list(memory.data[0].y) == [2.0 + i for i in range(len(data.points))]
    assert set(utilization.data[1].y) == {50.0}
    assert data.to_dict()["gpu"][0]["gpus"][0]["gpu_uuid"] == "GPU-aaa"
    for shown in (data, cpu_only):  # the made-up trials' knobs lack what a table row shows
        for r in shown.top:
            r.knobs.setdefault("instance_group", [{"count": 1, "kind": "KIND_CPU"}])
    page = render_report(data, optuna.create_study())
    assert "GPU memory used (max over the level) against p99" in page and NO_GPUS not in page
    assert NO_GPUS in render_report(cpu_only, optuna.create_study())


def test_the_playoff_table_shows_each_contenders_duet_with_the_winner(example_repository: Path):
    import optuna

    from tests.search.test_playoff import SIMPLE, contender, play, scripted
    from tritontune.report.html import render_report

    data = collect(read_study(make_study(example_repository, [3000, 6000])))
    for r in data.top:
        r.knobs.setdefault("instance_group", [{"count": 1, "kind": "KIND_CPU"}])
    figures = {1: [93, 95, 97], 2: [97, 104, 112], None: [50, 50, 50]}
    data.playoff = play(
        scripted(figures), [contender(1, simplicity=SIMPLE), contender(2), contender(None)]
    )
    page = render_report(data, optuna.create_study())
    assert "vs winner, paired" in page and "x0.91 [0.87-0.96] over 3 rounds: behind" in page
    assert "within ±3 %" in page
