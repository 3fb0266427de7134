"""Mixed traffic with and without precision variants: what a workload search gains now that it
searches precision as the single-class search does.

Prints numbers; not a timed test. On one launched server, for a model and a workload file
(default: the real MiniLM encoder and ``examples/workloads/minilm-interactive-batch.yaml``):

1. the workload search as it was (the default space without precision variants: FP32 only);
2. the workload search as it is (the default space: its precision variants built and judged
   on the classes' own request data before the trials; its first trials measure each accepted
   one);
3. both winners (as their final rounds loaded them) measured again in ``--rounds`` interleaved
   rounds (FP32's, then the other's, then FP32's, ...), each a capacity for the mix: the level
   that served the most inferences with every class meeting its objective.

The table gives, per winner, median [min-max] over the rounds: each class's inferences served,
the total, and the interactive class's p99 there; then the per-round ratio of the totals. The
target (issue 40): the precision-searching winner serves >= 1.5x the FP32-only winner's total,
with the interactive p99 within its SLO. Both searches' results JSONs and every round's levels
are written under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import read_traffic
from tritontune.search.setup import space_for
from tritontune.search.traffic_finals import finalist_load
from tritontune.search.workload_search import (
    WorkloadSearchResult,
    WorkloadSearchSettings,
    run_workload_search,
    workload_space,
)
from tritontune.serving.session import TuningSession
from tritontune.units import parse_duration

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import Load, measure_rounds, ratios, summary, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-repository", type=Path, default=ROOT / "examples" / "minilm" / "model_repository"
    )
    parser.add_argument("--model", default="minilm")
    parser.add_argument(
        "--workload",
        type=Path,
        default=ROOT / "examples" / "workloads" / "minilm-interactive-batch.yaml",
    )
    parser.add_argument("--trials", type=int, default=6, help="each workload search's budget")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--start", type=float, default=2.0, help="capacity ramp start (req/s)")
    parser.add_argument("--window", default="1s", help="each level's window in the rounds")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    traffic = read_traffic(args.workload)
    interactive = next(c for c in traffic.classes if c.slo_p99_s is not None)
    batch = next(c for c in traffic.classes if c.slo_p99_s is None)
    assert interactive.slo_p99_s is not None
    window = parse_duration(args.window)
    rounds_settings = MeasureSettings(
        warmup_s=window / 2, window_s=window, min_window_requests=50, max_windows=6, extra_windows=2
    )
    storage = f"sqlite:///{args.out / 'bench.db'}"
    began = time.monotonic()
    source = load_model_source(args.model_repository, args.model)
    with TuningSession(source) as session:
        print(f"workload: {traffic.describe()}", flush=True)
        space = space_for(session, interactive.slo_p99_s)
        winners: dict[str, Load] = {}
        searched: dict[str, WorkloadSearchResult] = {}
        seconds: dict[str, float] = {}
        for name, searched_space in (
            ("fp32 only", space.replace("precision", None)),
            ("with precision", space),
        ):
            started = time.monotonic()
            result = run_workload_search(
                session,
                searched_space,
                traffic,
                WorkloadSearchSettings(
                    trials=args.trials,
                    seed=args.seed,
                    storage=storage,
                    study_name=name.replace(" ", "-"),
                    start_rate=args.start,
                    top=1,  # the comparison is the interleaved rounds below
                    rounds=1,
                ),
            )
            searched[name] = result
            seconds[name] = round(time.monotonic() - started, 1)
            (args.out / f"{name.replace(' ', '-')}.results.json").write_text(
                json.dumps(result.to_dict(), indent=2) + "\n"
            )
            best = result.winner
            assert best is not None, f"{name}: the workload search found nothing"
            narrowed = workload_space(searched_space, traffic)
            winners[name] = finalist_load(session, narrowed, traffic, best, result.trials)
            print(
                f"{name}: {len(result.trials)} trials, winner {best.label} ({best.layout}) "
                f"{best.median:,.1f} infer/s in its final rounds, {best.knobs} "
                f"[{time.monotonic() - started:.0f} s]",
                flush=True,
            )
        found = measure_rounds(session, winners, traffic, args.rounds, args.start, rounds_settings)
    print(f"\n{args.rounds} interleaved rounds, each winner at its capacity for the mix:")
    rows = table(found, traffic, interactive.name, batch.name)
    gain = ratios(rows, "total_served", "fp32 only", "with precision")
    print(
        "with precision / fp32 only, total inferences served per round: "
        f"{', '.join(f'{r:.2f}' for r in gain)} (median {statistics.median(gain):.2f}; target >= 1.5)"
        if gain
        else "no round to compare"
    )
    p99 = rows["with precision"]["interactive_p99_ms"]
    print(
        f"{interactive.name} p99 at the precision winner's capacity: {summary(p99, 1)} ms "
        f"(SLO {interactive.slo_p99_s * 1e3:g} ms)"
    )
    print(f"wall time {time.monotonic() - began:.0f} s")
    out = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "rounds": rows,
        "ratio_total_served": gain,
        "search_seconds": seconds,
        "winners": {n: r.winner.to_dict() if r.winner else None for n, r in searched.items()},
    }
    (args.out / "rounds.json").write_text(json.dumps(out, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
