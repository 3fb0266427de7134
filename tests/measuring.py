"""The measurement settings tests of the flow share: short windows, at most 3 a load level.

What those tests check is who measures what and what is recorded, exported and checked, not the
figures. A level gets the stable-windows rule's 3 windows and no more: when they did not settle,
the level is kept and reported unstable (which no test of the flow reads), where up to 4 took a
4th window at about 6 levels of 10 on a 2-core machine, 0.3 s each.
"""

from tritontune.measure.measurement import MeasureSettings

FAST = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=50, max_windows=3)
#: :data:`FAST` as the CLI's options.
FAST_OPTIONS = ["--warmup", "0.2s", "--window", "0.3s", "--max-windows", "3"]
