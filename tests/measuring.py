"""The measurement settings tests of the flow share: short windows, at most 3 a load level.

What those tests check is who measures what and what is recorded, exported and checked, not the
figures. A level gets the stable-windows rule's 3 windows and no more: when they did not settle,
the level is kept and reported unstable (which no test of the flow reads). Windows of 0.2 s after
0.1 s of warm-up (the search's defaults are 0.3 and 0.2): a level takes 0.7 s where it took 1.1
to 1.4, and the example model answers a few hundred requests a window even one at a time (a
window also waits for 50 replies, up to 4 windows' time, for a slower model's sake).
"""

from tritontune.measure.measurement import MeasureSettings

FAST = MeasureSettings(warmup_s=0.1, window_s=0.2, min_window_requests=50, max_windows=3)
#: :data:`FAST` as the CLI's options.
FAST_OPTIONS = ["--warmup", "0.1s", "--window", "0.2s", "--max-windows", "3"]
#: A single-class search's playoff rounds as short (its default is 0.5 s of warm-up and 0.5 s
#: windows, up to 6: ~3.5 s a round on the example, twice a trial's level), where what is under
#: test is who runs the playoff, not its verdict.
FAST_PLAYOFF_OPTIONS = ["--playoff-window", "0.2s"]
