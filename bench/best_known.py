"""Benchmark: a model's best known config, and how close each search's winner comes to it (issue 39).

1. **The grid**: every execution setting of the default CPU space (instances x intra-op threads,
   at most 2 threads per core, x each precision variant that passes its accuracy gate) with
   sensible scheduler knobs (dynamic batching, 1 ms queue delay, batches up to 16, the graph fully
   optimized), each config's operating point under the SLO measured once, as a search's trial is.
2. **The finals**: the grid's best ``--grid-top`` configs, the winner of every study in
   ``--studies`` (the SQLite studies ``bench/seeds.py`` keeps, one per search) and the model's own
   config, re-measured head to head in the playoff's interleaved rounds, each at the load its own
   search (or the grid) found, a step lower where it doesn't hold.

Searches whose winners are one config share one finals entry. The *best known* is the highest
median of the finals. Printed: the grid, then each finalist's median with its min-max interval
and its share of the best known; everything, each finalist's rounds included, is kept in
``--out`` (``best-known.json``).

    python bench/best_known.py --model-repository examples/minilm/model_repository --model minilm \\
        --input-data examples/minilm/inputs.json --slo 100ms --studies bench-seeds --rounds 3

``--results`` adds the winners of searches whose studies were not kept, from their results JSONs;
``--grid-top 0`` leaves the grid out (finals of the searches' winners and the model's own config
only: a best known from an earlier grid is brought in as the search winner it was).

A pipeline (an ensemble, as ``examples/minilm_pipeline``) has no grid: its finals are the
searches' winners and the pipeline's own config (``--grid-top 0``), each winner's point read in
the pipeline's default space, the one its search searched.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tritontune.config.variant import Variant
from tritontune.hostinfo import describe_host
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.request_shape import RequestShape
from tritontune.precision.prepare import AccuracySettings
from tritontune.search.optimize import SearchSettings, measure_operating_point
from tritontune.search.pipeline_space import PipelineSpace, knob_name
from tritontune.search.playoff import Contender, PlayoffSettings, run_playoff
from tritontune.search.setup import space_for
from tritontune.search.space import SearchSpace
from tritontune.serving.opening import open_session
from tritontune.study.handle import TuningStudy
from tritontune.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent
PRECISIONS = ("fp32", "fp16", "int8_dynamic", "int8_static")
SCHEDULER = {
    "max_batch_size": 16,
    "dynamic_batching": True,
    "max_queue_delay": 1000,
    "preferred_batch_size": "none",
    "inter_op_thread_count": 1,
    "graph_optimization": "all",
}
#: Numbers the finals give each kind of contender (a playoff contender is a trial number).
GRID_FIRST, STUDY_FIRST = 1000, 2000


def splits(cores: int) -> list[tuple[int, int]]:
    """Instances x threads of the default CPU space: at most 2 threads per core."""
    most = max(2, cores)
    return [(i, t) for i in range(1, most + 1) for t in range(1, cores + 1) if i * t <= 2 * cores]


#: How a winner's point becomes a variant: in the space its study kept (one model), or in the
#: pipeline's default space (a pipeline study keeps its space as models' parts).
SpaceOf = Callable[[dict[str, Any]], SearchSpace]


def winners(studies: Path, url_of: Any, space_of: SpaceOf) -> list[dict[str, Any]]:
    """Each study's winner in ``studies`` (its playoff's, else its best screening trial)."""
    found = []
    for db in sorted(studies.glob("*.db")):
        study = TuningStudy.open_existing(url_of(db), db.stem)
        record = study.read()
        playoff = record.playoff
        number = playoff.winner if playoff is not None else None
        best = next((t for t in record.results if t.number == number), None) or record.best
        if best is None or best.operating_point is None:
            continue
        entry = next((e for e in playoff.entries if e.trial == best.number), None) if playoff else None
        space = space_of(record.space or {})
        found.append(
            {
                "label": db.stem,
                "trial": best.number,
                "point": best.params,
                "variant": space.to_variant(dict(best.params)),
                "load": entry.load if entry is not None else best.operating_point.load,
                "search_figure": entry.throughput.median if entry else best.throughput,
            }
        )
    return found


def result_winners(paths: list[Path], space_of: SpaceOf) -> list[dict[str, Any]]:
    """Each search's winner, from its results JSON (``search --results``): its point, the load
    its playoff held it at (else its screening load), and its figure there. For searches whose
    studies were not kept."""
    found = []
    for path in paths:
        data = json.loads(path.read_text())
        best = data.get("best")
        if not best:
            continue
        playoff = data.get("playoff") or {}
        entry = next((e for e in playoff.get("entries", []) if e["trial"] == best["trial"]), None)
        screening = best["screening_operating_point"]
        held = [r["throughput"] for r in entry["rounds"]] if entry else []
        found.append(
            {
                "label": path.name.removesuffix(".results.json"),
                "trial": best["trial"],
                "point": best["params"],
                "variant": space_of(data["space"]).to_variant(dict(best["params"])),
                "load": entry["load"] if entry else screening["load"],
                "search_figure": statistics.median(held) if held else screening["throughput"],
            }
        )
    return found


def one_entry_per_config(found: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The winners grouped by the config they serve: searches that found the same config share
    one finals entry (at the highest load any of them held it), rather than each measuring it
    apart. Measured apart, one config's entries drew 94.5-100 % of each other in the same rounds
    (MiniLM, 2026-11-29): the best of those draws is not a config better than the others."""
    groups: list[list[dict[str, Any]]] = []
    for win in found:
        same = next((g for g in groups if g[0]["variant"] == win["variant"]), None)
        if same is None:
            groups.append([win])
        else:
            same.append(win)
    return groups


def prediction_errors(studies: Path, url_of: Any) -> dict[str, dict[str, float | int]]:
    """The prediction error of every predicted trial in ``studies``, by how the prediction was
    made (``derivation``): |predicted / measured - 1| of throughput (as proposed: corrected; and
    raw) and of p99 at the load measured; median and 90th percentile of each."""
    errors: dict[str, dict[str, list[float]]] = {}
    for db in sorted(studies.glob("*.db")):
        for trial in TuningStudy.open_existing(url_of(db), db.stem).read().results:
            predicted, point = trial.predicted, trial.operating_point
            if not predicted or point is None or point.throughput <= 0:
                continue
            figures = errors.setdefault(
                str(predicted.get("derivation", "measured")),
                {"throughput": [], "raw_throughput": [], "p99": []},
            )
            figures["throughput"].append(abs(predicted["throughput"] / point.throughput - 1))
            figures["raw_throughput"].append(abs(predicted["raw_throughput"] / point.throughput - 1))
            figures["p99"].append(abs(predicted["p99_s"] / point.p99_s - 1))
    summary: dict[str, dict[str, float | int]] = {}
    for kind, by_figure in sorted(errors.items()):
        row: dict[str, float | int] = {"configs": len(by_figure["throughput"])}
        for name, values in by_figure.items():
            ordered = sorted(values)
            row[f"{name}_median"] = statistics.median(ordered)
            row[f"{name}_p90"] = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
        summary[kind] = row
    return summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-repository", type=Path, required=True)
    parser.add_argument("--model", required=True)
    parser.add_argument("--input-data", type=Path)
    parser.add_argument("--slo", default="100ms")
    parser.add_argument("--studies", type=Path, help="a folder of bench/seeds.py studies (*.db)")
    parser.add_argument(
        "--results", type=Path, nargs="*", default=[], help="searches' results JSONs (winners)"
    )
    parser.add_argument(
        "--grid-top",
        type=int,
        default=2,
        help="the grid's best N in the finals (0: no grid measured, only the searches' winners)",
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "bench-best-known")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    slo = parse_duration(args.slo, what="--slo")
    cores = len(os.sched_getaffinity(0))
    settings = SearchSettings(slo_p99_s=slo)
    shape = RequestShape(input_data=args.input_data)
    started = time.monotonic()
    report: dict[str, Any] = {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": describe_host().to_dict(),
        "model": args.model,
        "slo_p99_s": slo,
        "grid": [],
        "finals": [],
    }
    with open_session(args.model_repository, args.model, request_shape=shape) as session:
        default_space = space_for(session, slo)
        pipeline = isinstance(default_space, PipelineSpace)
        if pipeline and args.grid_top > 0:
            parser.error("a pipeline has no grid here: --grid-top 0")
        accepted = []
        for model in default_space.models if pipeline else (None,):
            if pipeline and knob_name(model, "precision") not in default_space.dimensions:
                continue
            checks = session.prepare_precisions(
                list(PRECISIONS), accuracy=AccuracySettings(), model=model
            )
            accepted = [p for p in PRECISIONS if checks[p].accepted]
            print(f"{model or args.model}: precisions the gate accepts: {', '.join(accepted)}")

        def space_of(stored: dict[str, Any]) -> SearchSpace:
            return default_space if pipeline else SearchSpace.from_dict(stored)

        grid: list[dict[str, Any]] = []
        grid_points = itertools.product(splits(cores), accepted) if args.grid_top > 0 else []
        for (instances, threads), precision in grid_points:
            point = {
                **SCHEDULER,
                "instance_count": instances,
                "intra_op_thread_count": threads,
                "precision": precision,
            }
            space = SearchSpace({})
            variant = space.to_variant(point)
            figure, _ = measure_operating_point(session, variant, settings)
            row = {"point": point, "throughput": figure.throughput, "load": figure.load}
            row["p99_ms"] = figure.p99_s * 1e3
            grid.append({**row, "variant": variant})
            report["grid"].append(row)
            print(
                f"grid {instances} x {threads} {precision:13} {figure.throughput:7.1f} infer/s "
                f"at {figure.load:g}, p99 {figure.p99_s * 1e3:.1f} ms",
                flush=True,
            )
        grid.sort(key=lambda r: -r["throughput"])
        contenders = [
            Contender(GRID_FIRST + i, r["variant"], r["load"], r["throughput"])
            for i, r in enumerate(grid[: args.grid_top])
        ]
        labels: dict[int | None, str] = {
            GRID_FIRST + i: f"grid {r['point']['instance_count']} x "
            f"{r['point']['intra_op_thread_count']} {r['point']['precision']}"
            for i, r in enumerate(grid[: args.grid_top])
        }
        url_of = lambda db: f"sqlite:///{db.resolve()}"  # noqa: E731
        found = winners(args.studies, url_of, space_of) if args.studies else []
        found += result_winners(args.results, space_of)
        searches: dict[int | None, list[str]] = {}
        for j, same in enumerate(one_entry_per_config(found)):
            precision = same[0]["point"].get("precision")
            if precision is not None and precision not in accepted:  # another host's variant
                print(
                    f"left out: {', '.join(win['label'] for win in same)}: its precision "
                    f"{precision} is not one the gate accepts on this host",
                    flush=True,
                )
                continue
            load = max(win["load"] for win in same)
            figure = max(win["search_figure"] for win in same)
            contenders.append(Contender(STUDY_FIRST + j, same[0]["variant"], load, figure))
            searches[STUDY_FIRST + j] = [win["label"] for win in same]
            labels[STUDY_FIRST + j] = ", ".join(searches[STUDY_FIRST + j])
        baseline_point, _ = measure_operating_point(session, Variant(), settings)
        contenders.append(Contender(None, Variant(), baseline_point.load, baseline_point.throughput))
        labels[None] = "the model's own config"
        print(f"finals: {len(contenders)} configs, {args.rounds} interleaved rounds", flush=True)
        result = run_playoff(
            session,
            contenders,
            slo,
            LoadMode.CONCURRENCY,
            PlayoffSettings(top=len(contenders), rounds=args.rounds),
        )
    best = max((e.throughput.median for e in result.entries if e.held), default=0.0)
    print(f"\nbest known: {best:.1f} infer/s (median of {args.rounds}+ interleaved rounds)")
    print(f"{'median':>8} {'low':>8} {'high':>8} {'held':>5} {'of best':>8}  config")
    for entry in sorted(result.entries, key=lambda e: -e.throughput.median):
        label = labels[entry.trial]
        share = entry.throughput.median / best if best else 0.0
        interval = entry.throughput
        print(
            f"{interval.median:8.1f} {interval.low:8.1f} {interval.high:8.1f} "
            f"{'yes' if entry.held else 'no':>5} {share:8.1%}  {label}"
        )
        report["finals"].append(
            {
                "label": label,
                "searches": searches.get(entry.trial, []),
                "median": interval.median,
                "low": interval.low,
                "high": interval.high,
                "held": entry.held,
                "load": entry.load,
                "share_of_best": share,
                "disturbed_rounds": sum(1 for r in entry.rounds if r.disturbed),
                "rounds": [r.to_dict() for r in entry.rounds],  # what the figures above come from
            }
        )
    report["best_known"] = best
    if args.studies:
        found_errors = prediction_errors(args.studies, lambda db: f"sqlite:///{db.resolve()}")
        report["prediction_errors"] = found_errors
        print("\nprediction error at the measured configs (|predicted / measured - 1|):")
        for kind, error in found_errors.items():
            print(
                f"  {kind:10} {error['configs']:3} configs: throughput median "
                f"{error['throughput_median']:.0%} p90 {error['throughput_p90']:.0%} (raw "
                f"{error['raw_throughput_median']:.0%} / {error['raw_throughput_p90']:.0%}), p99 "
                f"median {error['p99_median']:.0%} p90 {error['p99_p90']:.0%}"
            )
    report["wall_s"] = round(time.monotonic() - started, 1)
    (args.out / "best-known.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    print(f"\n{report['wall_s']:.0f} s; kept in {args.out / 'best-known.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
