"""Benchmark: do tritontune's verdicts reproduce, and does a disturbed run say so? (issue 13)

Three back-to-back searches of the bundled example with different seeds, each followed by
``export`` and ``check`` of the fresh export, then one more search during which the benchmark
starts a CPU-burning process (one core, not tritontune's) at the start of the playoff. For each
run it prints the winner, its playoff figure with the interval over rounds, its screening
figure and the ratio between them, the gain over the baseline within the same rounds, and
``check``'s verdict; then how far apart the winners' playoff figures are, and whether the
disturbed run was flagged. Everything goes through the real CLI and a real tritonserver.

    python bench/reproducibility.py [--trials 12] [--runs 3] [--no-disturbed]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = ROOT / "examples" / "model_repository"
BURN = "import time\nend = time.time() + 600\nwhile time.time() < end: pass\n"


def tritontune(*args: str, **popen) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tritontune", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,
    )


def start_burner() -> int:
    """A CPU-burning process that is not tritontune's child (re-parented to init)."""
    shell = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c '{BURN}' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(shell.stdout.strip())


def search(work: Path, seed: int, trials: int, disturb: bool) -> tuple[dict, str, float]:
    results = work / f"results-{seed}.json"
    proc = tritontune(
        "search", "-r", str(REPOSITORY), "-m", "mlp", "--slo-p99", "50ms",
        "--trials", str(trials), "--seed", str(seed),
        "--storage", f"sqlite:///{work / 'studies.db'}", "--study", f"run-{seed}",
        "--results", str(results),
    )  # fmt: skip
    assert proc.stdout is not None
    burner = None
    lines = []
    started = time.perf_counter()
    for line in proc.stdout:
        lines.append(line)
        if disturb and burner is None and line.startswith("playoff:"):
            burner = start_burner()
            print(f"    (started a CPU burner, pid {burner}, at the start of the playoff)")
    code = proc.wait()
    took = time.perf_counter() - started
    if burner is not None:
        os.kill(burner, signal.SIGKILL)
    output = "".join(lines)
    if code != 0:
        raise SystemExit(f"search (seed {seed}) failed ({code}):\n{output[-3000:]}")
    return json.loads(results.read_text()), output, took


def export_and_check(work: Path, seed: int) -> tuple[str, str]:
    out = work / f"tuned-{seed}"
    export = tritontune(
        "export", "--study", f"run-{seed}", "--storage", f"sqlite:///{work / 'studies.db'}",
        "--out", str(out),
    )  # fmt: skip
    text = export.communicate()[0]
    if export.returncode != 0:
        return "export refused", text.strip().splitlines()[-1]
    check = tritontune("check", str(out), "--summary", str(work / f"check-{seed}.md"))
    text = check.communicate()[0]
    verdict = "pass" if check.returncode == 0 else f"FAIL (exit {check.returncode})"
    rows = [ln for ln in text.splitlines() if ln.lstrip("│┃ ").startswith("mlp")]
    return verdict, " ".join(rows[0].replace("│", " ").split()) if rows else text[-300:]


def interval(figure: dict | None, percent: bool = False) -> str:
    if not figure:
        return "-"
    if percent:
        return f"{figure['median']:+.0%} [{figure['low']:+.0%}, {figure['high']:+.0%}]"
    return f"{figure['median']:,.0f} [{figure['low']:,.0f}-{figure['high']:,.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--no-disturbed", action="store_true")
    args = parser.parse_args()
    seeds = list(range(1, args.runs + 1))
    plan = [(seed, False) for seed in seeds] + ([] if args.no_disturbed else [(99, True)])
    winners = []
    with tempfile.TemporaryDirectory(prefix="tritontune-repro-") as tmp:
        work = Path(tmp)
        for seed, disturb in plan:
            label = "DISTURBED on purpose" if disturb else "quiet"
            print(f"run seed {seed} ({label}), {args.trials} trials:", flush=True)
            results, output, took = search(work, seed, args.trials, disturb)
            best = results.get("best")
            playoff = results.get("playoff") or {}
            if best is None:
                print(f"  no winner ({took:.0f} s); playoff notes: {playoff.get('notes')}")
                continue
            entry = next(e for e in playoff.get("entries", []) if e["trial"] == best["trial"])
            screening = best["screening_operating_point"]["throughput"]
            ratio = entry["throughput"]["median"] / screening
            knobs = best["config"]
            instances = sum(g.get("count", 1) for g in knobs.get("instance_group", [])) or 1
            region = (knobs.get("max_batch_size"), instances, knobs.get("precision", "fp32"))
            print(f"  search + playoff: {took:.0f} s; winner trial {best['trial']}: {knobs}")
            print(
                f"  playoff {interval(entry['throughput'])} infer/s at load {entry['load']:g}, "
                f"p99 {interval(entry['p99_ms'])} ms; screening {screening:,.0f} infer/s "
                f"(playoff/screening {ratio:.2f}); vs baseline "
                f"{interval(best['improvement_over_baseline'], percent=True)}"
            )
            disturbed = sum(
                1 for e in playoff.get("entries", []) for r in e["rounds"] if r.get("disturbed")
            )
            noted = [n for n in playoff.get("notes", []) if "disturbed" in n]
            flagged = bool(disturbed or noted or "machine disturbed" in output)
            print(
                f"  flagged as disturbed: {'YES' if flagged else 'no'} "
                f"({disturbed} playoff measurement(s) not clean, {len(noted)} note(s))"
            )
            for note in noted[:3]:
                print(f"    note: {note}")
            verdict, line = export_and_check(work, seed)
            print(f"  check of the fresh export: {verdict}: {line.strip()}", flush=True)
            if not disturb:
                winners.append((seed, region, entry["throughput"]["median"], verdict))
    print("\nsummary:")
    for seed, region, figure, verdict in winners:
        print(
            f"  seed {seed}: region (batch, instances, precision) {region}: "
            f"{figure:,.0f} infer/s, check {verdict}"
        )
    by_region: dict[tuple, list[float]] = {}
    for _, region, figure, _ in winners:
        by_region.setdefault(region, []).append(figure)
    for region, figures in by_region.items():
        if len(figures) > 1:
            mid = statistics.median(figures)
            worst = max(abs(f / mid - 1) for f in figures)
            print(
                f"  region {region}: {len(figures)} winners within ±{worst:.0%} of their median "
                "(target ±15 %)"
            )
    passed = sum(1 for *_, verdict in winners if verdict == "pass")
    print(f"  check passed on {passed}/{len(winners)} fresh exports (target all)")


if __name__ == "__main__":
    main()
