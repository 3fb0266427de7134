"""Benchmark: each precision variant of the example model through Triton, with its accuracy.

For fp32, fp16, int8_dynamic and int8_static (each built and checked against FP32 first), on the
real server, one instance, one onnxruntime thread:
  * batch 1: one request of one row at a time (concurrency 1, no dynamic batching);
  * large batch: requests of ``--batch`` rows (the client batches), concurrency 2.
Prints throughput (inferences/s) with the accuracy figures beside it.

    python bench/precision.py [--batch 64] [--window 1s] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.workload import Workload
from tritontune.precision.convert import DEFAULT_PRECISIONS
from tritontune.precision.prepare import prepare_precisions
from tritontune.session import TuningSession
from tritontune.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent


def measure(precision: str, batch: int, concurrency: int, settings: MeasureSettings) -> float:
    source = load_model_source(ROOT / "examples" / "model_repository", "mlp")
    workload = Workload(batch_size=batch)
    with TuningSession(source, workload=workload, settings=settings) as session:
        session.prepare_precisions([precision])
        session.load_variant(
            Variant(
                precision=precision,
                dynamic_batching=False,
                instance_count=1,
                backend_parameters={"intra_op_thread_count": "1"},
            )
        )
        return session.measure(LoadSpec.concurrency(concurrency)).throughput


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--window", default="1s")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    settings = MeasureSettings(warmup_s=1.0, window_s=parse_duration(args.window), max_windows=8)
    source = load_model_source(ROOT / "examples" / "model_repository", "mlp")
    checks = prepare_precisions(source.model_file, source.base_config, DEFAULT_PRECISIONS)
    rows = {}
    batched_title = f"batch {args.batch} infer/s"
    print(f"{'precision':<14} {'batch 1 infer/s':>16} {batched_title:>18}  accuracy vs fp32")
    for precision in DEFAULT_PRECISIONS:
        check = checks[precision]
        if not check.accepted:
            print(f"{precision:<14} {'-':>16} {'-':>18}  rejected: {check.reason}")
            rows[precision] = {"accepted": False, "reason": check.reason}
            continue
        single = measure(precision, 1, 1, settings)
        batched = measure(precision, args.batch, 2, settings)
        print(f"{precision:<14} {single:>16,.0f} {batched:>18,.0f}  {check.summary()}")
        rows[precision] = {
            "accepted": True,
            "batch1_infer_per_s": single,
            f"batch{args.batch}_infer_per_s": batched,
            "accuracy": check.to_dict()["accuracy"],
        }
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")


if __name__ == "__main__":
    main()
