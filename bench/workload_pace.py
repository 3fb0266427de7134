"""A workload search at a user's pace (issue 41): its wall time, and its winner against a reference.

Prints numbers; not a timed test. For a model and a workload file (default: the real MiniLM
encoder and ``examples/workloads/minilm-interactive-batch.yaml``):

1. the search as a user runs it, ``tritontune search -r REPO -m MODEL --workload W --trials N
   --seed S``, in a child process with its output kept (``search.out``) and its wall time taken
   (the search's own ``time:`` line splits it into precision checks, trials and final rounds);
2. its winner, and the reference's, read back: the search's by resuming its study with the
   settings it was searched with (nothing is measured again when they match: the output says
   so); the reference's likewise from ``--reference-db`` (a study a search before it left, e.g.
   the FP32-only workload search of ``bench/workload_precision.py``, the winner a workload search
   found before issue 41; the database is copied, never written), or from ``--reference-results``
   (a search's results JSON: its winner's trial point, built again in this session, e.g. the
   example MLP's search before issue 41, whose study was not kept);
3. both winners measured again in ``--rounds`` interleaved rounds (reference, then the search's,
   then the reference, ...), each a capacity for the mix: the level that served the most
   inferences with every class meeting its objective.

The target (issue 41): the search ends within 600 s, and its winner serves at least 95 % of the
reference's total in the interleaved rounds (median of the per-round ratios), with the interactive
p99 within its SLO. Every output is written under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import Traffic, read_traffic
from tritontune.precision.prepare import AccuracySettings
from tritontune.search.endpoint_layout import EndpointSplit, point_variant, shared_split
from tritontune.search.setup import space_for
from tritontune.search.space import SearchSpace
from tritontune.search.traffic_finals import finalist_load
from tritontune.search.workload_search import (
    WorkloadSearchSettings,
    run_workload_search,
    workload_space,
)
from tritontune.serving.session import TuningSession
from tritontune.units import parse_duration

sys.path.insert(0, str(Path(__file__).resolve().parent))
from workload import Load, measure_rounds, ratios, summary, table  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
#: Issue 41's targets: the search's wall time, and the least share of the reference's work its
#: winner serves (median of the rounds' ratios).
TARGET_S = 600.0
TARGET_RATIO = 0.95


def run_search(args: argparse.Namespace, storage: str, study: str) -> float:
    """The user's command in a child process; its wall time (s)."""
    command = [
        sys.executable, "-m", "tritontune", "search",
        "-r", str(args.model_repository), "-m", args.model, "--workload", str(args.workload),
        "--trials", str(args.trials), "--seed", str(args.seed),
        "--storage", storage, "--study", study, "--results", str(args.out / "search.results.json"),
    ]  # fmt: skip
    print("$ " + " ".join(command[1:]), flush=True)
    began = time.monotonic()
    with open(args.out / "search.out", "w", encoding="utf-8") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    wall = time.monotonic() - began
    if done.returncode != 0:
        raise SystemExit(f"the search failed (exit {done.returncode}): see {args.out / 'search.out'}")
    return wall


def winner_load(
    session: TuningSession,
    space: SearchSpace,
    traffic: Traffic,
    settings: WorkloadSearchSettings,
    name: str,
) -> Load:
    """What a finished study's winner loads, read back by resuming it."""
    result = run_workload_search(session, space, traffic, settings)
    best = result.winner
    assert best is not None, f"{name}: its study has no winner"
    again = (
        "nothing measured again"
        if result.trials_this_run == 0 and result.final_rounds_reused
        else f"measured again: {result.trials_this_run} trials, final rounds "
        f"{'reused' if result.final_rounds_reused else 'run'}"
    )
    print(f"{name}: winner {best.label} ({best.layout}) {best.median:,.1f} infer/s in its final "
          f"rounds, {best.knobs} ({again})", flush=True)  # fmt: skip
    return finalist_load(session, workload_space(space, traffic), traffic, best, result.trials)


def results_load(session: TuningSession, space: SearchSpace, traffic: Traffic, path: Path) -> Load:
    """What the winner of a results JSON loads, built from its trial's point (the session has the
    precision variants the point names: the search's study was resumed first)."""
    data = json.loads(path.read_text())
    number, layout = data["winner"]["trial"], data["winner"]["layout"]
    point = next(t["point"] for t in data["trials"] if t["trial"] == number)
    narrowed = workload_space(space, traffic)
    variant = point_variant(narrowed, traffic, point)
    print(f"reference: {path.name}'s winner, trial {number} ({layout}): {point}", flush=True)
    if isinstance(variant, EndpointSplit):
        return dict(variant.split)
    if layout == "endpoints":  # the best shared trial, split into endpoints for the rounds
        return shared_split(session, narrowed, traffic, point)
    return variant


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
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--seed", type=int, default=1)
    reference = parser.add_mutually_exclusive_group(required=True)
    reference.add_argument("--reference-db", type=Path, help="a sqlite study database")
    reference.add_argument("--reference-results", type=Path, help="a search's results JSON")
    parser.add_argument("--study", default="pace", help="the search's study name")
    parser.add_argument("--reference-study", default="fp32-only")
    parser.add_argument(
        "--reference-precision",
        action="store_true",
        help="the reference searched precision (default: FP32 only, as workload_precision.py's)",
    )
    parser.add_argument("--reference-trials", type=int, default=6)
    parser.add_argument("--reference-top", type=int, default=1)
    parser.add_argument("--reference-start", type=float, default=2.0)
    parser.add_argument("--rounds", type=int, default=3, help="0: time the search only")
    parser.add_argument("--start", type=float, default=2.0, help="the rounds' ramp start (req/s)")
    parser.add_argument("--window", default="0.3s", help="each level's window in the rounds")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument(
        "--searched",
        action="store_true",
        help="the search ran before into --out (a --rounds 0 run): measure the rounds only",
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    args.model_repository = args.model_repository.resolve()
    args.workload = args.workload.resolve()

    storage = f"sqlite:///{(args.out / 'search.db').resolve()}"
    study = args.study
    if args.searched:  # the search ran before (--rounds 0): its winner measured now
        wall = float(json.loads((args.out / "search.wall.json").read_text())["wall_s"])
    else:
        wall = run_search(args, storage, study)
        (args.out / "search.wall.json").write_text(json.dumps({"wall_s": round(wall, 1)}) + "\n")
    searched = json.loads((args.out / "search.results.json").read_text())
    print(f"search: {wall:.0f} s wall (target <= {TARGET_S:.0f} s); phases {searched['phase_seconds']}")
    if args.rounds == 0:  # the search's pace only
        return

    traffic = read_traffic(args.workload)
    interactive = next(c for c in traffic.classes if c.slo_p99_s is not None)
    batch = next(c for c in traffic.classes if c.slo_p99_s is None)
    assert interactive.slo_p99_s is not None
    window = parse_duration(args.window)
    rounds_settings = MeasureSettings(
        warmup_s=window / 2, window_s=window, min_window_requests=50, max_windows=6, extra_windows=2
    )
    source = load_model_source(args.model_repository, args.model)
    with TuningSession(source) as session:
        space = space_for(session, interactive.slo_p99_s)
        search = winner_load(  # first: it builds the precision variants a point may name
            session,
            space,
            traffic,
            WorkloadSearchSettings(
                accuracy=AccuracySettings(),
                trials=args.trials,
                seed=args.seed,
                storage=storage,
                study_name=study,
            ),
            "search",
        )
        if args.reference_results is not None:
            reference = results_load(session, space, traffic, args.reference_results)
        else:
            reference_db = args.out / "reference.db"
            shutil.copyfile(args.reference_db, reference_db)
            reference = winner_load(
                session,
                space if args.reference_precision else space.replace("precision", None),
                traffic,
                WorkloadSearchSettings(
                    trials=args.reference_trials,
                    seed=args.seed,
                    storage=f"sqlite:///{reference_db.resolve()}",
                    study_name=args.reference_study,
                    start_rate=args.reference_start,
                    top=args.reference_top,
                    rounds=1,
                ),
                "reference",
            )
        winners = {"reference": reference, "search": search}  # measured in this order
        found = measure_rounds(session, winners, traffic, args.rounds, args.start, rounds_settings)
    print(f"\n{args.rounds} interleaved rounds, each winner at its capacity for the mix:")
    rows = table(found, traffic, interactive.name, batch.name)
    gain = ratios(rows, "total_served", "reference", "search")
    median = statistics.median(gain) if gain else None
    print(
        f"search / reference, total inferences served per round: "
        f"{', '.join(f'{r:.2f}' for r in gain)} (median {median:.2f}; target >= {TARGET_RATIO})"
        if median is not None
        else "no round to compare"
    )
    p99 = rows["search"]["interactive_p99_ms"]
    print(
        f"{interactive.name} p99 at the search winner's capacity: {summary(p99, 1)} ms "
        f"(SLO {interactive.slo_p99_s * 1e3:g} ms)"
    )
    out = {
        "command": " ".join(sys.argv),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "search_wall_s": round(wall, 1),
        "search_phase_seconds": searched["phase_seconds"],
        "rounds": rows,
        "ratio_total_served": gain,
    }
    (args.out / "rounds.json").write_text(json.dumps(out, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
