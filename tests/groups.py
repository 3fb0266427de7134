"""Several models on one server, for the tests: two copies of the example MLP under their own
names (``mlp_a``, ``mlp_b``), and a workload whose classes call one each (``chat``: single
requests to ``mlp_a``; ``embed``: batches of 4 to ``mlp_b``), with the small budgets of
test_workload_search_integration.py (the MLP serves thousands of requests a second)."""

from __future__ import annotations

from pathlib import Path

from tritontune.measure.measurement import MeasureSettings
from tritontune.search.space import Choice, SearchSpace

MODELS = ("mlp_a", "mlp_b")
#: 5 replies of each class, not more: the baseline misses at every rate (SLOW_OWN_CONFIG), so its
#: final ramp walks down to 1/64 of the start rate, each level measured twice, and at a few req/s a
#: level waits for those replies (30 made group_study take 60 s, not 33; with 10 its 6 levels
#: under 30 req/s took 29 s, with 5 they take 10 s). Each of those replies waits out the 200 ms
#: batching window, so the baseline's miss does not depend on how many are counted; the trials'
#: levels (hundreds of req/s) fill their 0.3 s windows with far more.
FAST = MeasureSettings(warmup_s=0.2, window_s=0.3, min_window_requests=5, max_windows=3)
MODEL_SPACE = SearchSpace(
    {
        "max_batch_size": Choice((8, 16)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((1000,)),
        "instance_count": Choice((1, 2)),
        "intra_op_thread_count": Choice((1,)),
    }
)
WORKLOAD = """
classes:
  - name: chat
    model: mlp_a
    share: 0.5
    batch_size: 1
    slo_p99: 100ms
  - name: embed
    model: mlp_b
    share: 0.5
    batch_size: 4
    may_shed: true
"""


#: The models' own configs batch with a 200 ms window: every chat request waits for it, so the
#: baseline misses chat's 100 ms p99 at any rate and a tuned config (a 1 ms window) wins the final
#: rounds. On the tiny MLP the example's own config is otherwise as good as any, and which one wins
#: would be the machine's noise, which export (which refuses a baseline win) cannot be tested on.
SLOW_OWN_CONFIG = "dynamic_batching { max_queue_delay_microseconds: 200000 }\n"


def two_model_repository(root: Path, example_repository: Path, *, slow_own_config: bool = True) -> Path:
    """``root/repository`` holding ``mlp_a`` and ``mlp_b``: the example MLP's file (linked) and
    config (renamed, with :data:`SLOW_OWN_CONFIG` unless ``slow_own_config`` is False) under
    each name."""
    repository = root / "repository"
    model_file = (example_repository / "mlp" / "1" / "model.onnx").resolve()
    config = (example_repository / "mlp" / "config.pbtxt").read_text()
    config += SLOW_OWN_CONFIG if slow_own_config else ""
    for name in MODELS:
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "1" / "model.onnx").symlink_to(model_file)
        (repository / name / "config.pbtxt").write_text(config.replace('name: "mlp"', f'name: "{name}"'))
    return repository
