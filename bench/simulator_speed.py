"""Benchmark: how fast the dynamic-batcher model ranks configs (tritontune.predict.batcher).

The model is meant to rank thousands of configs x loads before a search measures a few, so its
speed is the point. On a made-up service curve (2 ms at batch 1, 5 ms at 8, 14 ms at 32), a grid
of 75 configs (dynamic batching with max_batch_size 1, 2, 4, 8, 16, 32 x queue delay 0, 0.5, 2,
8 ms x 1, 2, 3 instances, no preferred sizes; and no batching at 1, 2, 3 instances) is ranked by
its operating point under a p99 SLO, closed loop (concurrency) and open loop (rate).

Reported: one 2,000-request simulation (median of repeats, ms); configs ranked per second for
each mode; the top five of each ranking. Targets: a simulation well under 50 ms, an operating
point well under 1 s.

    python bench/simulator_speed.py [--slo 30ms] [--requests 2000] [--json FILE]
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path
from typing import Literal

from tritontune.predict.batcher import BatcherConfig, ClosedLoop, ServiceCurve, operating_point, simulate
from tritontune.units import parse_duration

CURVE = ServiceCurve({1: (2e-3, 0.3e-3), 8: (5e-3, 0.6e-3), 32: (14e-3, 1.5e-3)})
MBS = (1, 2, 4, 8, 16, 32)
DELAYS_MS = (0.0, 0.5, 2.0, 8.0)
INSTANCES = (1, 2, 3)


def grid() -> list[BatcherConfig]:
    configs = [BatcherConfig()]  # no batching at all
    configs += [BatcherConfig(instances=i) for i in INSTANCES[1:]]
    for mbs, delay, inst in itertools.product(MBS, DELAYS_MS, INSTANCES):
        configs.append(
            BatcherConfig(
                max_batch_size=mbs, dynamic_batching=True, max_queue_delay_s=delay * 1e-3, instances=inst
            )
        )
    return configs


def label(c: BatcherConfig) -> str:
    if not c.batching:
        return f"no batching x{c.instances}"
    return f"mbs {c.max_batch_size:2d} delay {c.max_queue_delay_s * 1e3:3.1f} ms x{c.instances}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slo", default="30ms", help="p99 latency SLO (default 30ms)")
    parser.add_argument("--requests", type=int, default=2000, help="requests per simulation")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    slo = parse_duration(args.slo, what="--slo")
    configs = grid()

    one = BatcherConfig(max_batch_size=16, dynamic_batching=True, max_queue_delay_s=2e-3, instances=2)
    times = []
    for _ in range(15):
        start = time.perf_counter()
        simulate(CURVE, one, ClosedLoop(16), n_requests=args.requests)
        times.append(time.perf_counter() - start)
    sim_ms = statistics.median(times) * 1e3
    print(f"one simulation ({args.requests} requests, mbs 16, 2 instances, c=16): {sim_ms:.1f} ms")

    figures: dict = {"simulation_ms": sim_ms, "configs": len(configs), "slo_s": slo}
    modes: tuple[Literal["concurrency", "rate"], ...] = ("concurrency", "rate")
    for mode in modes:
        ranked = []
        start = time.perf_counter()
        for config in configs:
            load, result = operating_point(
                CURVE, config, slo_p99_s=slo, mode=mode, n_requests=args.requests
            )
            ranked.append((result.throughput_rps if load else 0.0, load, label(config)))
        elapsed = time.perf_counter() - start
        ranked.sort(reverse=True)
        per_s = len(configs) / elapsed
        print(
            f"\n{mode}: {len(configs)} configs ranked in {elapsed:.1f} s: {per_s:.1f} configs/s "
            f"({elapsed / len(configs) * 1e3:.0f} ms per operating point)"
        )
        for rps, load, name in ranked[:5]:
            print(f"  {name:32s} {rps:8.0f} req/s at {mode} {load:g}")
        figures[mode] = {
            "seconds": elapsed,
            "configs_per_s": per_s,
            "top": [{"config": n, "rps": r, "load": lo} for r, lo, n in ranked[:5]],
        }
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
