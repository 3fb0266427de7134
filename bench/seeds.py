"""Benchmark: does the default search's answer depend on its seed? (issue 39)

Runs the default ``tritontune search`` (the default space, TPE, the playoff) of one model for
several seeds, each in a study of its own, through the real CLI and a real tritonserver. With
``--compare-with DIR`` (a checkout of another version, e.g. ``git worktree add /tmp/old REF``),
that version's search runs too, interleaved seed by seed (old seed 1, new seed 1, old seed 2, ...)
so that both meet the machine's same moods.

Printed per run: the winner's playoff figure with its interval, its config and precision, the
precisions the search measured, and the wall time; then, per version, the lowest and the highest
winner over the seeds and their ratio. Every run's results JSON is kept in ``--out``.

    python bench/seeds.py --model-repository examples/minilm/model_repository --model minilm \\
        --input-data examples/minilm/inputs.json --slo 100ms --trials 12 --seeds 1,2,3 \\
        [--compare-with /tmp/old] [--variant 'predict=--strategy predict --trials 6'] \\
        [--out bench-seeds]

Then ``bench/best_known.py --studies bench-seeds`` re-measures every winner against the best
known config in interleaved rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def search(
    source: Path, args: argparse.Namespace, seed: int, out: Path, label: str, extra: list[str]
) -> dict:
    """One search from the code in ``source`` (the default one, plus ``extra`` options); its
    summary (the results JSON kept)."""
    results = out / f"{label}-seed{seed}.results.json"
    storage = f"sqlite:///{out / f'{label}-seed{seed}.db'}"
    command = [
        sys.executable, "-m", "tritontune", "search",
        "-r", str(args.model_repository), "-m", args.model, "--slo-p99", args.slo,
        "--trials", str(args.trials), "--seed", str(seed), "--storage", storage,
        "--study", f"{label}-seed{seed}", "--results", str(results), *extra,
    ]  # fmt: skip
    if args.input_data:
        command += ["--input-data", str(args.input_data)]
    env = {**os.environ, "PYTHONPATH": str(source)}
    started = time.monotonic()
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True)
    wall = time.monotonic() - started
    (out / f"{label}-seed{seed}.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        return {
            "label": label,
            "seed": seed,
            "error": (done.stderr or done.stdout)[-400:],
            "wall_s": wall,
        }
    data = json.loads(results.read_text())
    best = data.get("best") or {}
    point = best.get("operating_point") or {}
    playoff = data.get("playoff") or {}
    winner = next((e for e in playoff.get("entries", []) if e.get("trial") == best.get("trial")), {})
    measured = sorted({precision_of(t.get("config")) for t in data.get("screening_top", [])})
    baseline = next((e for e in playoff.get("entries", []) if e.get("trial") is None), {})
    return {
        "label": label,
        "seed": seed,
        "wall_s": round(wall, 1),
        "throughput": point.get("throughput"),
        "interval": winner.get("throughput"),
        "p99_ms": point.get("p99_ms"),
        "figures": best.get("figures"),
        "config": best.get("config"),
        "precision": precision_of(best.get("config")),
        "measured_precisions": measured,
        "baseline": (baseline.get("throughput") or {}).get("median"),
        "results": str(results),
    }


def precision_of(config: dict | None) -> str:
    """A config's precision; a pipeline's, each composing model's that has one (``model=...``)."""
    steps = (config or {}).get("pipeline")
    if steps:
        named = [f"{m}={c['precision']}" for m, c in sorted(steps.items()) if "precision" in c]
        return ", ".join(named) or "fp32"
    return str((config or {}).get("precision") or "fp32")


def knobs(config: dict | None) -> str:
    if not config:
        return "?"
    if "pipeline" in config:
        return "; ".join(f"{m}: {knobs(c)}" for m, c in sorted(config["pipeline"].items()))
    group = (config.get("instance_group") or [{}])[0]
    params = config.get("parameters") or {}
    threads = params.get("intra_op_thread_count", "?")
    batching = (
        f"batch<={config.get('max_batch_size')}, {config.get('max_queue_delay_us')} us"
        if config.get("dynamic_batching")
        else "no batching"
    )
    return f"{group.get('count', '?')} inst x {threads} thr, {batching}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input-data", type=Path)
    parser.add_argument("--slo", default="100ms")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--compare-with", type=Path, help="another checkout, run interleaved")
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME=OPTIONS",
        help="a search of this checkout with more options (e.g. 'predict=--strategy predict "
        "--trials 6': a later --trials wins), run interleaved with the others; repeatable",
    )
    parser.add_argument("--out", type=Path, default=ROOT / "bench-seeds")
    args = parser.parse_args()
    args.model_repository = args.model_repository.resolve()
    args.input_data = args.input_data.resolve() if args.input_data else None
    args.out = args.out.resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    versions: list[tuple[str, Path, list[str]]] = [("new", ROOT, [])]
    if args.variant:
        versions = []
        for text in args.variant:
            name, _, options = text.partition("=")
            versions.append((name, ROOT, shlex.split(options)))
    if args.compare_with:
        versions.insert(0, ("old", args.compare_with.resolve(), []))
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for label, source, extra in versions:
            print(f"== {label}, seed {seed}", flush=True)
            run = search(source, args, seed, args.out, label, extra)
            runs.append(run)
            if "error" in run:
                print(f"   failed: {run['error']}", flush=True)
                continue
            interval = run["interval"] or {}
            print(
                f"   {run['throughput']:.1f} infer/s [{interval.get('low', 0):.1f}-"
                f"{interval.get('high', 0):.1f}] ({run['figures']}), p99 {run['p99_ms']:.1f} ms, "
                f"{run['precision']}, {knobs(run['config'])}; baseline {run['baseline']}; "
                f"precisions measured {run['measured_precisions']}; {run['wall_s']:.0f} s",
                flush=True,
            )
    (args.out / "seeds.json").write_text(json.dumps(runs, indent=2) + "\n")
    print("\nversion  seeds  lowest winner  highest winner  lowest/highest  wall (mean)")
    for label, _, _ in versions:
        mine = [r for r in runs if r["label"] == label and r.get("throughput")]
        if not mine:
            continue
        low = min(r["throughput"] for r in mine)
        high = max(r["throughput"] for r in mine)
        wall = sum(r["wall_s"] for r in mine) / len(mine)
        print(f"{label:7}  {len(mine):5}  {low:13.1f}  {high:14.1f}  {low / high:14.2f}  {wall:8.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
