"""Mixed traffic: work served within every class's objective, single-class winner vs workload search.

Prints numbers; not a timed test. For a model and a workload file (default: the example MLP and
``examples/workloads/interactive-batch.yaml``; for the real MiniLM model:
``--model-repository examples/minilm/model_repository --model minilm --workload
examples/workloads/minilm-interactive-batch.yaml --start 2``):

1. today's single-class search (``run_search``: the interactive class's requests and SLO,
   closed loop; the default space without precision variants) picks its winner; its playoff
   figure is the *single-class capacity* (inferences/s under the SLO, interactive traffic only);
2. the workload search (``run_workload_search``: shared and endpoint layouts, priorities,
   admission control, each endpoint's own batch size and instances) picks its winner;
3. then, in ``--rounds`` interleaved rounds (1, 2, 3, 1, 2, 3, ...), each config's capacity for
   the workload (:func:`find_traffic_capacity`: the level that served the most inferences with
   every class meeting its objective) is measured for:
   *single-class* (its winner as picked: one FIFO queue, no bounds), *workload search* (its
   winner, as the final rounds loaded it) and *two endpoints* (by hand: ``NAME_<interactive>``
   with the single-class winner's knobs, ``NAME_<batch>`` a throughput config of
   ``max_batch_size`` 64, a 5 ms window and the batch class's queue timeout and admission bound;
   one instance and one onnxruntime thread each).

The table gives, per config, median [min-max] over the rounds at capacity: inferences served
per class within the objectives (goodput), the total, and the interactive class's p99 there.
The targets (issue 24): the workload winner's total goodput >= 60 % of the single-class capacity
and its batch goodput >= 1.3x the single-class winner's, both with the interactive p99 within its
SLO (it is, at every capacity: that is what a capacity is). ``--bursty-cv 2`` then measures the
same three configs again with every class's arrivals gamma-distributed (CV 2: bursts and lulls)
for ``--bursty-rounds`` rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.arrivals import Arrival
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import Traffic, read_traffic
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.setup import space_for
from tritontune.search.traffic_capacity import TrafficCapacity, find_traffic_capacity
from tritontune.search.traffic_finals import finalist_load
from tritontune.search.workload_search import (
    WorkloadSearchSettings,
    run_workload_search,
    workload_space,
)
from tritontune.serving.session import TuningSession
from tritontune.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "examples" / "workloads" / "interactive-batch.yaml"
Load = Variant | dict[str, Variant]


def capacity(
    session: TuningSession, load: Load, traffic: Traffic, start: float, settings: MeasureSettings
) -> TrafficCapacity:
    if isinstance(load, dict):
        session.load_endpoints(load)
    else:
        session.load(load)
    return find_traffic_capacity(
        lambda rate: session.measure_traffic(traffic, rate, settings), traffic, start=start
    )


def summary(values: list[float], digits: int = 0) -> str:
    if not values:
        return "-"
    return (
        f"{statistics.median(values):,.{digits}f} [{min(values):,.{digits}f}-{max(values):,.{digits}f}]"
    )


def table(
    found: dict[str, list[TrafficCapacity]], traffic: Traffic, interactive: str, batch: str
) -> dict[str, Any]:
    """Print the per-class goodput at capacity; return the rows."""
    rows: dict[str, Any] = {}
    print(f"| config | {interactive} infer/s | {batch} infer/s | total infer/s | "
          f"{interactive} p99 ms | {batch} served share | capacity req/s |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, capacities in found.items():
        by_class = [c.served_by_class() for c in capacities]
        at = [c.best for c in capacities if c.best is not None]
        p99 = [m.figures(interactive).latency.p99 * 1e3 for m in at]
        share = [m.figures(batch).served_share for m in at if m.figures(batch).offered_rate]
        rows[name] = {
            "interactive_served": [b[interactive] for b in by_class],
            "batch_served": [b[batch] for b in by_class],
            "total_served": [c.served for c in capacities],
            "interactive_p99_ms": p99,
            "batch_served_share": share,
            "capacity_req_per_s": [c.total_rate for c in capacities],
            "levels": [c.to_dict() for c in capacities],
        }
        row = rows[name]
        print(
            f"| {name} | {summary(row['interactive_served'], 1)} | {summary(row['batch_served'], 1)} "
            f"| {summary(row['total_served'], 1)} | {summary(p99, 1)} | {summary(share, 2)} "
            f"| {summary(row['capacity_req_per_s'], 2)} |"
        )
    return rows


def ratios(rows: dict[str, Any], key: str, over: str, name: str) -> list[float]:
    """Per-round ratios of ``name``'s ``key`` to ``over``'s (the rounds are interleaved)."""
    return [a / b for a, b in zip(rows[name][key], rows[over][key], strict=False) if b]


def measure_rounds(
    session: TuningSession,
    configs: dict[str, Load],
    traffic: Traffic,
    rounds: int,
    start: float,
    settings: MeasureSettings,
) -> dict[str, list[TrafficCapacity]]:
    found: dict[str, list[TrafficCapacity]] = {name: [] for name in configs}
    for r in range(rounds):
        for name, load in configs.items():
            began = time.monotonic()
            got = capacity(session, load, traffic, start, settings)
            found[name].append(got)
            disturbed = sum(1 for m in got.levels if m.interference and m.interference.result_disturbed)
            print(
                f"round {r + 1} {name}: {got.served:,.1f} infer/s served at {got.total_rate:,.2f} req/s "
                f"({len(got.levels)} levels, {time.monotonic() - began:.0f} s"
                + (f", {disturbed} disturbed" if disturbed else "")
                + ")",
                flush=True,
            )
    return found


def bursty(traffic: Traffic, cv: float) -> Traffic:
    classes = tuple(
        dataclasses.replace(c, arrival=Arrival.GAMMA, arrival_cv=cv) for c in traffic.classes
    )
    return dataclasses.replace(traffic, classes=classes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-repository", type=Path, default=ROOT / "examples" / "model_repository")
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--workload", type=Path, default=WORKLOAD)
    parser.add_argument("--trials", type=int, default=6, help="the single-class search's budget")
    parser.add_argument("--workload-trials", type=int, default=6, help="the workload search's budget")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--admission", type=int, default=16, help="the hand-made batch endpoint's bound")
    parser.add_argument("--start", type=float, default=100.0, help="capacity ramp start (req/s)")
    parser.add_argument("--window", default="1s", help="each level's window (3 or more per level)")
    parser.add_argument("--bursty-cv", type=float, default=2.0, help="0: no bursty repeat")
    parser.add_argument("--bursty-rounds", type=int, default=1)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    traffic = read_traffic(args.workload)
    interactive = next(c for c in traffic.classes if c.slo_p99_s is not None)
    batch = next(c for c in traffic.classes if c.slo_p99_s is None)
    assert interactive.slo_p99_s is not None
    slo = interactive.slo_p99_s
    window = parse_duration(args.window)
    single_settings = MeasureSettings(warmup_s=window, window_s=window, stable_windows=3, max_windows=6)
    mixed_settings = MeasureSettings(
        warmup_s=window / 2, window_s=window, min_window_requests=50, max_windows=6, extra_windows=2
    )
    source = load_model_source(args.model_repository, args.model)
    began = time.monotonic()
    with (
        tempfile.TemporaryDirectory() as tmp,
        TuningSession(source, request_shape=interactive.request, settings=single_settings) as session,
    ):
        print(f"workload: {traffic.describe()}", flush=True)
        space = space_for(session, slo).replace("precision", None)
        searched = run_search(
            session,
            space,
            SearchSettings(
                slo_p99_s=slo,
                trials=args.trials,
                seed=0,
                measure=single_settings,
                storage=f"sqlite:///{tmp}/bench.db",
                study_name="single-class",
                playoff=PlayoffSettings(top=2, rounds=3, measure=single_settings),
            ),
        )
        winner = searched.winner
        assert winner is not None, "the single-class search found no config under its SLO"
        single = space.to_variant(winner.result.params)
        single_capacity = winner.point.throughput
        print(
            f"single-class search ({args.trials} configs, p99 <= {slo * 1e3:g} ms, "
            f"{interactive.name} requests only): {winner.result.knobs} at "
            f"{single_capacity:,.1f} infer/s ({winner.figures}) [{time.monotonic() - began:.0f} s]",
            flush=True,
        )
        narrowed = workload_space(space, traffic)
        workload = run_workload_search(
            session,
            space,
            traffic,
            WorkloadSearchSettings(
                trials=args.workload_trials,
                seed=0,
                storage=f"sqlite:///{tmp}/bench.db",
                study_name="workload",
                start_rate=args.start,
                top=1,
                rounds=1,
                measure=mixed_settings,
            ),
        )
        best = workload.winner
        assert best is not None, "the workload search found nothing"
        print(
            f"workload search ({args.workload_trials} configs): {best.label}, {best.layout}, "
            f"{best.knobs} [{time.monotonic() - began:.0f} s]",
            flush=True,
        )
        one_thread = {"intra_op_thread_count": "1", "inter_op_thread_count": "1"}
        configs: dict[str, Load] = {
            "single-class": single,  # as the search picked it: one queue, no bounds
            "workload search": finalist_load(session, narrowed, traffic, best, workload.trials),
            "two endpoints": {
                interactive.name: dataclasses.replace(
                    single, instance_count=1, backend_parameters=one_thread
                ),
                batch.name: Variant(
                    max_batch_size=64,
                    max_queue_delay_us=5000,
                    instance_count=1,
                    backend_parameters=one_thread,
                    max_queue_size=args.admission,
                    queue_timeout_us=batch.request.timeout_us or None,
                    timeout_action="reject" if batch.request.timeout_us else None,
                ),
            },
        }
        found = measure_rounds(session, configs, traffic, args.rounds, args.start, mixed_settings)
        shaped = None
        if args.bursty_cv > 0:
            shaped = measure_rounds(
                session, configs, bursty(traffic, args.bursty_cv), args.bursty_rounds,
                args.start, mixed_settings,
            )  # fmt: skip
    print(f"\nPoisson arrivals, {args.rounds} interleaved rounds, at each config's capacity:")
    rows = table(found, traffic, interactive.name, batch.name)
    total = rows["workload search"]["total_served"]
    print(
        f"single-class capacity ({interactive.name} only, p99 <= {slo * 1e3:g} ms): "
        f"{single_capacity:,.1f} infer/s; workload winner's total goodput / it: "
        f"{', '.join(f'{t / single_capacity:.2f}' for t in total)} (target >= 0.60)"
    )
    batch_ratio = ratios(rows, "batch_served", "single-class", "workload search")
    print(
        f"workload winner / single-class winner, {batch.name} goodput per round: "
        f"{', '.join(f'{r:.2f}' for r in batch_ratio) or 'single-class served none'} (target >= 1.3)"
    )
    bursty_rows = None
    if shaped is not None:
        print(f"\nGamma arrivals (CV {args.bursty_cv:g}), {args.bursty_rounds} round(s):")
        bursty_rows = table(shaped, bursty(traffic, args.bursty_cv), interactive.name, batch.name)
    print(f"\nwall time {time.monotonic() - began:.0f} s")
    if args.json:
        out = {"single_class_capacity": single_capacity, "poisson": rows, "bursty": bursty_rows}
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
