"""The figures a study keeps: a pipeline's per-step figures through the playoff."""

import pytest

from tritontune.measure.loadgen import LoadMode
from tritontune.study.figures import PlayoffEntry, RoundFigure, StepFigure, median_steps


def round_with(queue_ms: float, compute_ms: float, number: int) -> RoundFigure:
    steps = (
        StepFigure("tokenizer", 0.1e-3, 1e-3, 1.0),
        StepFigure("encoder", queue_ms / 1e3, compute_ms / 1e3, 4.0),
    )
    return RoundFigure(100, 0.02, 0.05, 0.03, 1000, 0, True, True, 4.0, round_number=number, steps=steps)


def test_a_playoff_entrys_steps_are_each_figures_median_over_its_rounds():
    rounds = (round_with(10, 30, 1), round_with(50, 20, 2), round_with(20, 40, 3))
    steps = median_steps(r.steps for r in rounds)
    assert [s.model for s in steps] == ["tokenizer", "encoder"]
    assert steps[1].queue_s == pytest.approx(0.020) and steps[1].compute_s == pytest.approx(0.030)
    entry = PlayoffEntry(trial=4, load=3, held=True, rounds=rounds, screening_throughput=90)
    assert entry.operating_point(0.1, LoadMode.CONCURRENCY).steps == steps
    assert median_steps(()) == ()


def test_round_steps_survive_the_study():
    figure = round_with(10, 30, 2)
    again = RoundFigure.from_dict(figure.to_dict())
    assert again.steps == tuple(
        StepFigure(s.model, round(s.queue_s, 7), round(s.compute_s, 7), s.avg_batch_size)
        for s in figure.steps
    )
    plain = RoundFigure(100, 0.02, 0.05, 0.03, 1000, 0, True, True)
    assert "steps" not in plain.to_dict() and RoundFigure.from_dict(plain.to_dict()).steps == ()
