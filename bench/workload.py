"""Mixed traffic: the best single-class config vs the same config set up for the workload.

Prints numbers; not a timed test. On the example model, with the workload of
``examples/workloads/interactive-batch.yaml`` (interactive: batch 1, p99 <= 20 ms, 30 % of the
requests; batch: batch 8, best effort, may be shed, 70 %):

1. today's search (``run_search``, SLO 20 ms, interactive requests, closed loop; the default space
   without precision variants) picks the best single-class config;
2. *single-class*: that config as the search picked it (one FIFO queue, no bounds), under the
   mixed workload;
3. *workload*: the same config with the workload's scheduler: priority levels (interactive
   first), the batch class's queue timeout, and admission control on the batch level
   (``max_queue_size``, ``--admission``);
4. *workload search*: the winner of ``run_workload_search`` (``search --workload``: the default
   space plus priorities and admission control, ``--workload-trials`` configs);
5. *two endpoints*: ``mlp_interactive`` (the single-class winner) and ``mlp_batch`` (a
   throughput config: ``max_batch_size`` 64, a 5 ms batching window, the batch class's queue
   timeout and the same admission bound), one instance and one onnxruntime thread each (their
   share of the two cores), in the same server, each class sent to its own endpoint by the
   client (a router).

Each config's capacity for the workload (:func:`find_traffic_capacity`) is measured in
``--rounds`` interleaved rounds (1, 2, 1, 2, ...); the table gives the median and range of each
figure: the highest total rate *sustained* with every class meeting its objective (with a shed
class this includes overload absorbed by rejecting it), and at the *capacity* (the level of
highest goodput) the requests and inferences served; then the ratios to the single-class
config, per round.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import tempfile
from pathlib import Path

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import read_traffic
from tritontune.search.optimize import SearchSettings, run_search
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.setup import space_for
from tritontune.search.traffic_capacity import TrafficCapacity, find_traffic_capacity
from tritontune.search.workload_search import (
    WorkloadSearchSettings,
    point_variant,
    run_workload_search,
    workload_space,
)
from tritontune.serving.session import TuningSession
from tritontune.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent
WORKLOAD = ROOT / "examples" / "workloads" / "interactive-batch.yaml"


def capacity(
    session: TuningSession, config: Variant | dict[str, Variant], traffic, start: float
) -> TrafficCapacity:
    if isinstance(config, dict):
        session.load_endpoints(config)
    else:
        session.load(config)
    return find_traffic_capacity(
        lambda rate: session.measure_traffic(traffic, rate), traffic, start=start
    )


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f} [{min(values):,.0f}-{max(values):,.0f}]"


def print_table(rounds: dict[str, list[TrafficCapacity]], traffic, interactive: str) -> dict:
    """The comparison table and the ratios to the single-class config; returns the rows."""
    rows = {}
    print()
    print("| config | sustained total req/s | interactive p99 ms there | batch rejected/s there | "
          "capacity req/s | served req/s there | infer/s there |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for name, found in rounds.items():
        at_highest = [max((m for m in f.levels if m.meets(traffic)), key=lambda m: m.total_rate)
                      for f in found if f.feasible]  # fmt: skip
        at_capacity = [f.best for f in found if f.best is not None]
        inter = [m.figures(interactive).latency.p99 * 1e3 for m in at_highest]
        rejected = [sum(c.rejected for c in m.classes) / m.span_s for m in at_highest]
        rows[name] = {
            "sustained": [f.highest_rate for f in found],
            "interactive_p99_ms": inter,
            "rejected_per_s": rejected,
            "capacity": [f.total_rate for f in found],
            "served_at_capacity": [m.goodput for m in at_capacity],
            "infer_at_capacity": [m.throughput for m in at_capacity],
            "levels": [f.to_dict() for f in found],
        }
        print(
            f"| {name} | {summary(rows[name]['sustained'])} | "
            f"{statistics.median(inter):.1f} [{min(inter):.1f}-{max(inter):.1f}] | "
            f"{summary(rejected)} | {summary(rows[name]['capacity'])} | "
            f"{summary(rows[name]['served_at_capacity'])} | {summary(rows[name]['infer_at_capacity'])} |"
        )
    base = rows["single-class"]
    for name, row in rows.items():
        if name == "single-class":
            continue
        for key, what in (
            ("sustained", "sustained total rate"),
            ("served_at_capacity", "served at capacity"),
        ):
            ratios = [w / s for s, w in zip(base[key], row[key], strict=False) if s]
            if ratios:
                print(
                    f"{name} / single-class, {what}, per round: "
                    f"{', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})"
                )
    print("target: the workload config at >= 1.3x the single-class config's sustained total rate")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", type=Path, default=WORKLOAD)
    parser.add_argument("--slo", default="20ms", help="the single-class search's p99 SLO")
    parser.add_argument("--trials", type=int, default=8, help="the single-class search's budget")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--admission", type=int, default=64, help="the batch level's queue bound")
    parser.add_argument("--workload-trials", type=int, default=10, help="the workload search's budget")
    parser.add_argument("--start", type=float, default=500.0, help="capacity ramp start (req/s)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    traffic = read_traffic(args.workload)
    interactive = next(c for c in traffic.classes if c.slo_p99_s is not None)
    settings = MeasureSettings(warmup_s=1.0, window_s=1.0, stable_windows=3, max_windows=6)
    source = load_model_source(ROOT / "examples" / "model_repository", "mlp")
    slo = parse_duration(args.slo)
    with (
        tempfile.TemporaryDirectory() as tmp,
        TuningSession(source, workload=interactive.request, settings=settings) as session,
    ):
        print(f"workload: {traffic.describe()}")
        # Every class's requests must fit the config: batch sizes below 8 are left out.
        space = workload_space(space_for(session, slo).replace("precision", None), traffic)
        searched = run_search(
            session,
            space,
            SearchSettings(
                slo_p99_s=slo,
                trials=args.trials,
                seed=0,
                measure=settings,
                storage=f"sqlite:///{tmp}/bench.db",
                study_name="single-class",
                playoff=PlayoffSettings(top=3, rounds=3, measure=settings),
            ),
        )
        winner = searched.winner
        assert winner is not None, "the single-class search found no config under its SLO"
        single = space.to_variant(winner.result.params)
        print(
            f"single-class search ({args.trials} configs, SLO {args.slo}): {winner.result.knobs} "
            f"at {winner.point.throughput:,.0f} infer/s ({winner.figures})"
        )
        searched_workload = run_workload_search(
            session,
            space,
            traffic,
            WorkloadSearchSettings(
                trials=args.workload_trials,
                seed=0,
                storage=f"sqlite:///{tmp}/bench.db",
                study_name="workload",
                start_rate=args.start,
                top=2,
                rounds=1,
            ),
        )
        best = searched_workload.winner
        assert best is not None and best.trial is not None, "the workload search found nothing"
        best_trial = next(t for t in searched_workload.trials if t.number == best.trial)
        print(f"workload search ({args.workload_trials} configs): {best_trial.params}")
        batch_class = next(c for c in traffic.classes if c.slo_p99_s is None)
        one_thread = {"intra_op_thread_count": "1", "inter_op_thread_count": "1"}
        throughput = Variant(
            max_batch_size=64,
            max_queue_delay_us=5000,
            instance_count=1,
            backend_parameters=one_thread,
            max_queue_size=args.admission,
            queue_timeout_us=batch_class.request.timeout_us or None,
            timeout_action="reject" if batch_class.request.timeout_us else None,
        )
        configs: dict[str, Variant | dict[str, Variant]] = {
            "single-class": single,  # as the search picked it: one queue, no bounds
            "single + scheduler": traffic.scheduled(single, priorities=True, admission=args.admission),
            "workload search": point_variant(space, traffic, best_trial.params),
            "two endpoints": {
                interactive.name: dataclasses.replace(
                    single, instance_count=1, backend_parameters=one_thread
                ),
                batch_class.name: throughput,
            },
        }
        rounds: dict[str, list[TrafficCapacity]] = {name: [] for name in configs}
        for r in range(args.rounds):
            for name, variant in configs.items():
                found = capacity(session, variant, traffic, args.start)
                rounds[name].append(found)
                disturbed = sum(
                    1 for m in found.levels if m.interference and m.interference.result_disturbed
                )
                print(
                    f"round {r + 1} {name}: sustained {found.highest_rate:,.0f} req/s, "
                    f"best goodput {found.best.goodput if found.best else 0:,.0f} req/s"
                    + (f" ({disturbed} levels disturbed)" if disturbed else "")
                )
    rows = print_table(rounds, traffic, interactive.name)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
