"""Where a search's minutes went: the seconds of each phase of one run (the precision checks,
the baseline, a calibration, the trials, the final rounds), printed at the end and kept in the
results, so a user who waited sees what for, and a slow phase is found without a profiler."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Phases:
    """Seconds per phase of this run, in the order the phases began."""

    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def timed(self, name: str) -> Iterator[None]:
        """Add the seconds of the ``with`` block to phase ``name`` (also when it raises)."""
        began = time.perf_counter()
        try:
            yield
        finally:
            spent = time.perf_counter() - began
            self.seconds[name] = round(self.seconds.get(name, 0.0) + spent, 1)

    def describe(self) -> str:
        """``precision checks 12 s, trials 340 s, final rounds 96 s (448 s in all)``."""
        if not self.seconds:
            return "nothing measured"
        parts = [f"{name} {seconds:,.0f} s" for name, seconds in self.seconds.items()]
        return ", ".join(parts) + f" ({sum(self.seconds.values()):,.0f} s in all)"
