"""Where a search's minutes went (tritontune.search.phases)."""

from __future__ import annotations

import time

import pytest

from tritontune.search.phases import Phases


def test_each_phase_adds_up_its_seconds_in_the_order_they_began():
    phases = Phases()
    with phases.timed("trials"):
        time.sleep(0.02)
    with pytest.raises(RuntimeError), phases.timed("final rounds"):
        raise RuntimeError("interrupted")  # a phase that raised still counts
    with phases.timed("trials"):
        time.sleep(0.02)
    assert list(phases.seconds) == ["trials", "final rounds"]
    assert phases.seconds["trials"] >= 0.0 and phases.seconds["final rounds"] >= 0.0
    assert phases.describe().startswith("trials 0 s, final rounds 0 s (")
    assert Phases().describe() == "nothing measured"
