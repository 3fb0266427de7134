"""Pipelines: the text pipeline tuned end to end vs its models tuned alone and then put together.

Prints numbers; not a timed test. On ``examples/minilm_pipeline`` (raw text -> the tokenizer,
a Python model -> the MiniLM encoder, ONNX, as the ensemble ``text_encoder``; ``make
minilm-pipeline``):

1. **Alone**, what a user does by hand today: ``run_search`` on the tokenizer by itself (the
   real sentences as text) and on the encoder by itself (the same sentences tokenized,
   ``examples/minilm/inputs.json``), ``--trials`` each, under the same p99 SLO, closed loop.
   Each searches the space it has inside the pipeline (its part of the pipeline's default space:
   a ``max_batch_size`` the ensemble accepts, the encoder's precision variants), so the only
   difference from (2) is the objective. Their winners are put together as the pipeline's config.
2. **End to end**: ``run_search`` on the ensemble, twice ``--trials`` (the same budget as both
   searches of (1) together), bottleneck first.
3. Then ``--rounds`` interleaved rounds (own configs, alone-then-together, end to end; again),
   each measuring the pipeline's operating point under the SLO (ramp and bisect, as a search
   trial does), sending text to the ensemble.

The table gives, per config, median [min-max] over the rounds: throughput under the SLO, p99
there, and each model's queue and compute time per request. The ratio is paired by round
(end to end / alone-then-together). Target (issue 27): >= 1.2x, or an explanation of why not.

    python bench/pipeline.py [--slo-p99 100ms] [--trials 6] [--rounds 3] [--db DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from tritontune.config.pipeline import PipelineVariant
from tritontune.config.variant import Variant, knobs_summary
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.request_shape import RequestShape
from tritontune.search.optimize import (
    SEARCH_MEASURE,
    SearchSettings,
    measure_operating_point,
    run_search,
)
from tritontune.search.pipeline_space import PipelineSpace
from tritontune.search.playoff import PlayoffSettings
from tritontune.search.setup import space_for
from tritontune.search.space import SearchSpace
from tritontune.serving.opening import open_session
from tritontune.serving.served import ServedPipeline
from tritontune.study.figures import OperatingPoint
from tritontune.units import parse_duration

ROOT = Path(__file__).resolve().parent.parent
PIPELINE_DIR = ROOT / "examples" / "minilm_pipeline"
TEXT_INPUTS = PIPELINE_DIR / "inputs.json"
TOKEN_INPUTS = ROOT / "examples" / "minilm" / "inputs.json"
ENSEMBLE, TOKENIZER, ENCODER = "text_encoder", "tokenizer", "minilm"
PLAYOFF_MEASURE = MeasureSettings(warmup_s=0.5, window_s=0.5, min_window_requests=100, max_windows=6)
ROUND_MEASURE = PLAYOFF_MEASURE


def search(
    repository: Path,
    model: str,
    space: SearchSpace,
    inputs: Path,
    trials: int,
    slo_s: float,
    storage: str,
    seed: int,
) -> tuple[Variant, dict[str, Any], float]:
    """The winner of a search of ``model`` (its variant, its knobs) and the search's seconds."""
    settings = SearchSettings(
        slo_p99_s=slo_s,
        trials=trials,
        seed=seed,
        storage=storage,
        study_name=f"bench-{model}",
        measure=SEARCH_MEASURE,
        playoff=PlayoffSettings(top=2, rounds=2, measure=PLAYOFF_MEASURE),
    )
    started = time.monotonic()
    shape = RequestShape(input_data=inputs)
    with open_session(repository, model, request_shape=shape, settings=SEARCH_MEASURE) as session:
        result = run_search(session, space, settings)
    winner = result.winner
    if winner is None:
        raise SystemExit(f"the search of {model} found no config that held the SLO")
    took = time.monotonic() - started
    print(
        f"  {model}: winner trial {winner.result.number}, {winner.point.throughput:,.0f} infer/s "
        f"({knobs_summary(winner.result.knobs)}) in {took:.0f} s",
        flush=True,
    )
    return space.to_variant(dict(winner.result.params)), winner.result.knobs, took


def interval(values: list[float], fmt: str = "{:,.0f}") -> str:
    return (
        f"{fmt.format(statistics.median(values))} [{fmt.format(min(values))}-{fmt.format(max(values))}]"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slo-p99", default="100ms")
    parser.add_argument("--trials", type=int, default=6, help="per model alone (end to end: twice)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--db", type=Path, help="keep the studies here (default: a temp dir)")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    slo_s = parse_duration(args.slo_p99, what="--slo-p99")
    repository = PIPELINE_DIR / "model_repository"
    if not (repository / ENSEMBLE / "config.pbtxt").is_file() or not TEXT_INPUTS.is_file():
        raise SystemExit("build the pipeline first: make minilm-pipeline")
    db_dir = args.db or Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    db_dir.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{db_dir / 'studies.db'}"

    shape = RequestShape(input_data=TEXT_INPUTS)
    with open_session(repository, ENSEMBLE, request_shape=shape, settings=ROUND_MEASURE) as session:
        assert isinstance(session.serves, ServedPipeline)
        joint = space_for(session, slo_s)
    assert isinstance(joint, PipelineSpace)

    print(f"1. each model alone, {args.trials} trials, p99 <= {args.slo_p99}", flush=True)
    tokenizer, tokenizer_knobs, t1 = search(
        repository, TOKENIZER, joint.part(TOKENIZER), TEXT_INPUTS, args.trials, slo_s, storage, args.seed
    )
    encoder, encoder_knobs, t2 = search(
        repository, ENCODER, joint.part(ENCODER), TOKEN_INPUTS, args.trials, slo_s, storage, args.seed
    )
    print(f"2. the pipeline end to end, {2 * args.trials} trials", flush=True)
    end_to_end, end_to_end_knobs, t3 = search(
        repository, ENSEMBLE, joint, TEXT_INPUTS, 2 * args.trials, slo_s, storage, args.seed
    )
    contenders: dict[str, Variant] = {
        "own configs": PipelineVariant(),
        "alone, then together": PipelineVariant(models=((TOKENIZER, tokenizer), (ENCODER, encoder))),
        "end to end": end_to_end,
    }

    print(f"3. {args.rounds} interleaved rounds of the pipeline's operating point", flush=True)
    points: dict[str, list[OperatingPoint]] = {name: [] for name in contenders}
    settings = SearchSettings(slo_p99_s=slo_s, measure=ROUND_MEASURE)
    with open_session(repository, ENSEMBLE, request_shape=shape, settings=ROUND_MEASURE) as session:
        for model in (TOKENIZER, ENCODER):  # the precision variants the winners serve
            used = {
                str(v.of(model).precision) for v in contenders.values() if isinstance(v, PipelineVariant)
            }
            used -= {"None", "fp32"}
            if used:
                session.prepare_precisions(sorted(used), model=model)
        for r in range(args.rounds):
            for name, variant in contenders.items():
                point, _ = measure_operating_point(session, variant, settings)
                points[name].append(point)
                print(
                    f"  round {r + 1} {name}: {point.throughput:,.0f} infer/s, p99 "
                    f"{point.p99_s * 1e3:.1f} ms at concurrency {point.load:g}",
                    flush=True,
                )

    print(f"\ntext pipeline (tokenizer -> MiniLM), p99 <= {args.slo_p99}, {args.rounds} rounds:")
    header = f"{'config':<22} {'infer/s':>18} {'p99 ms':>18}  per-step queue/compute ms (median)"
    print(header)
    figures: dict[str, Any] = {}
    for name, rounds in points.items():
        throughput = [p.throughput for p in rounds]
        p99 = [p.p99_s * 1e3 for p in rounds]
        steps = {}
        for model in (TOKENIZER, ENCODER):
            per_round = [s for p in rounds for s in p.steps if s.model == model]
            if per_round:
                steps[model] = {
                    "queue_ms": statistics.median(s.queue_s * 1e3 for s in per_round),
                    "compute_ms": statistics.median(s.compute_s * 1e3 for s in per_round),
                    "avg_batch_size": statistics.median(s.avg_batch_size for s in per_round),
                }
        shown = ", ".join(
            f"{m} {v['queue_ms']:.1f}/{v['compute_ms']:.1f} (batch {v['avg_batch_size']:.1f})"
            for m, v in steps.items()
        )
        print(f"{name:<22} {interval(throughput):>18} {interval(p99, '{:.1f}'):>18}  {shown}")
        figures[name] = {"throughput": throughput, "p99_ms": p99, "steps": steps}
    paired = [
        e.throughput / a.throughput
        for e, a in zip(points["end to end"], points["alone, then together"], strict=True)
        if a.throughput > 0
    ]
    if paired:
        print(f"\nend to end / alone-then-together, paired by round: {interval(paired, '{:.2f}')}x")
    print(f"searches: tokenizer {t1:.0f} s, encoder {t2:.0f} s, end to end {t3:.0f} s")
    print(f"alone-then-together: tokenizer {knobs_summary(tokenizer_knobs)}")
    print(f"                     encoder {knobs_summary(encoder_knobs)}")
    print(f"end to end: {knobs_summary(end_to_end_knobs)}")
    if args.out:
        figures["paired_ratio"] = paired
        args.out.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
