"""The verdict's sentences (tritontune.study.verdict)."""

from tritontune.study.figures import Interval
from tritontune.study.verdict import behind_baseline


def test_behind_the_baseline_only_when_it_served_more_in_every_round():
    assert behind_baseline(None) is None  # no playoff gain: nothing to say
    assert behind_baseline(Interval(-0.1, -0.2, 0.0)) is None  # tied in one round
    assert behind_baseline(Interval(0.1, -0.05, 0.2)) is None
    sentence = behind_baseline(Interval(-0.1, -0.2, -0.01))
    assert sentence is not None and "-10% [-20%, -1%]" in sentence and "own config" in sentence
