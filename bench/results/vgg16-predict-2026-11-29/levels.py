"""Each calibration level of one VGG16 execution setting, timed (the figures of this folder's
README): FP32, batches up to 128, no delay, a 1 s SLO, 1 intra-op thread.

    python bench/results/vgg16-predict-2026-11-29/levels.py INSTANCES     # after `make vgg16`
"""

import sys
import time
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.measure.request_shape import RequestShape
from tritontune.search.calibrate import calibrate_setting
from tritontune.search.space import Choice, SearchSpace
from tritontune.serving.session import TuningSession

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "vgg16"
SPACE = SearchSpace(
    {
        "max_batch_size": Choice((128,)),
        "dynamic_batching": Choice((True,)),
        "max_queue_delay": Choice((0,)),
        "preferred_batch_size": Choice(("none",)),
        "instance_count": Choice((1, 2)),
        "intra_op_thread_count": Choice((1,)),
    }
)


def main(instances: int) -> None:
    source = load_model_source(EXAMPLE / "model_repository", "vgg16")
    shape = RequestShape(input_data=EXAMPLE / "inputs.json")
    with TuningSession(source, request_shape=shape) as session:
        started = last = time.monotonic()

        def on_level(load, measured):
            nonlocal last
            now = time.monotonic()
            server = measured.server
            batches = [
                (b.batch_size, b.executions, round(b.compute_ns / 1e9 / max(b.executions, 1), 3))
                for b in (server.batches if server else ())
            ]
            print(
                f"{now - started:6.1f} s  concurrency {load}: {now - last:5.1f} s, "
                f"{measured.latency.count} replies, p50 {measured.latency.p50:.2f} s, "
                f"{measured.request_rate:.2f} req/s, batches (size, runs, s) {batches}",
                flush=True,
            )
            last = now

        setting = {"instance_count": instances, "intra_op_thread_count": 1}
        done = calibrate_setting(
            session, SPACE, setting, max_batch_size=128, slo_p99_s=1.0, on_level=on_level
        )
        print(f"{done.seconds:.0f} s, {done.levels} levels, points {done.points}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1)
