"""``tritontune search``: the best config under a p99 SLO."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.progress import BarColumn, TextColumn
from rich.table import Table
from rich.text import Text

from tritontune.cli._common import (
    BatchSizeOption,
    ComposingOption,
    ConfigOption,
    CsvOption,
    InputDataOption,
    RepositoryOption,
    StorageOption,
    TrialsDisplay,
    accuracy_text,
    app,
    console,
    err_console,
    given,
    interval_text,
    kept_log_said,
    ms,
    print_precisions,
    print_server,
    progress_bar,
    refuse_given,
    resumable,
    user_errors,
    write_results,
)
from tritontune.cli._option_groups import load_options, precision_options, server_options
from tritontune.cli._report import HeadroomOption, PeakOption, parse_plan_options
from tritontune.cli._workload import search_workload
from tritontune.config.variant import knobs_summary
from tritontune.errors import InputError
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.loadgen import LoadMode
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.traffic import Layout, read_traffic
from tritontune.precision.prepare import AccuracySettings
from tritontune.predict.calibration import SettingCalibration
from tritontune.report.capacity import DEFAULT_HEADROOM
from tritontune.report.data import collect
from tritontune.report.html import write_report
from tritontune.report.inference_csv import search_rows, write_inference_csv
from tritontune.search.optimize import (
    PLAYOFF_MEASURE,
    SEARCH_MEASURE,
    SearchProgress,
    SearchResult,
    SearchSettings,
    refuse_before_launch,
    run_search,
)
from tritontune.search.playoff import (
    MAX_EXTRA_ROUNDS,
    PLAYOFF_ROUNDS,
    PLAYOFF_TOP,
    Contender,
    PlayoffSettings,
    RoundFigure,
)
from tritontune.search.predicted import CalibrationProgress, Ranking
from tritontune.search.setup import space_for
from tritontune.search.space import SearchSpace, SpaceSource, space_file_output_kinds
from tritontune.search.strategy import Strategy, StrategyChoice
from tritontune.search.traffic_capacity import DEFAULT_START_RATE
from tritontune.search.workload_search import WorkloadSearchSettings
from tritontune.server.factory import LaunchSettings
from tritontune.serving.opening import open_group_session, open_session
from tritontune.serving.served import GROUP_SEPARATOR
from tritontune.serving.server import failure_log_path
from tritontune.serving.session import TuningSession
from tritontune.study.duet import TIE_MARGIN
from tritontune.study.figures import OperatingPoint, pipeline_bottleneck
from tritontune.study.handle import TuningStudy
from tritontune.study.records import TrialResult
from tritontune.study.storage import DEFAULT_STORAGE
from tritontune.study.verdict import behind_baseline, gain_of
from tritontune.units import (
    format_duration,
    parse_duration,
)

#: ``--load``: the words users type, and the load mode each means.
LOAD_CHOICES = {"concurrency": LoadMode.CONCURRENCY, "poisson": LoadMode.RATE}


def _space_source(value: str | SpaceSource) -> SpaceSource:
    """``--space FILE``; a config file's ``space:`` mapping arrives already a source."""
    return value if isinstance(value, SpaceSource) else SpaceSource.file(Path(value))


@app.command()
@server_options
@load_options
@precision_options
def search(
    ctx: typer.Context,
    model_repository: RepositoryOption,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Model name in the repository (required, unless every class of the --workload "
            "file names its model: then all of them are tuned, or only this one of them).",
        ),
    ] = None,
    composing: ComposingOption = None,
    slo_p99: Annotated[
        str | None, typer.Option(help="The latency SLO on p99, e.g. 50ms (required unless --workload).")
    ] = None,
    config: ConfigOption = None,
    workload_file: Annotated[
        Path | None,
        typer.Option(
            "--workload",
            help="Workload file (YAML): search for the config that serves the most inferences/s "
            "with every class meeting its objective (each class's SLO replaces --slo-p99).",
        ),
    ] = None,
    start_rate: Annotated[
        float,
        typer.Option(
            help="With --workload: where each capacity ramp starts (total req/s); best below "
            "what the model can serve (a ramp whose first level misses steps down, halving, to "
            "1/64 of it at most).",
            min=0.001,
        ),
    ] = DEFAULT_START_RATE,
    layout: Annotated[
        str,
        typer.Option(
            help="With --workload: the serving layouts the trials search: shared (one model, "
            "classes told apart by priority), endpoints (one model per class) or both (endpoints "
            "need a server tritontune launched). Whichever it is, when the best trial is a "
            "shared one, the final rounds also measure it split into one endpoint per class, "
            "to compare the layouts.",
        ),
    ] = "both",
    trials: Annotated[
        int | None, typer.Option(help="Trials to finish (resumed ones count). Default 20.", min=1)
    ] = None,
    timeout: Annotated[
        str | None, typer.Option(help="Stop starting trials after, e.g. 20min or 2h.")
    ] = None,
    load: Annotated[
        str, typer.Option(help="concurrency (closed loop) or poisson (open-loop arrivals).")
    ] = "concurrency",
    max_load: Annotated[
        float | None,
        typer.Option(
            help="The highest load a config's ramp tries: concurrency (default 512; e.g. the most "
            "requests your clients ever have in flight), or req/s with --load poisson (default "
            "256x the first rate); with --workload, the total req/s of every class together "
            "(default 100,000).",
            min=1,
        ),
    ] = None,
    space: Annotated[
        SpaceSource | None,
        typer.Option(
            parser=_space_source,
            metavar="FILE",
            help="YAML file that fixes, narrows or widens dimensions; for a pipeline or several "
            "models, keyed by model (replaces a config file's space: mapping).",
        ),
    ] = None,
    storage: StorageOption = DEFAULT_STORAGE,
    study: Annotated[str | None, typer.Option(help="Study name (default: MODEL-p99-SLO-LOAD).")] = None,
    seed: Annotated[int | None, typer.Option(help="Sampler seed, for a repeatable search.")] = None,
    strategy: Annotated[
        Strategy,
        typer.Option(
            help="How configs are proposed: tpe (Optuna's sampler, the server a black box), "
            "predict (calibrate each execution setting's service time per batch size, rank the "
            "whole space with a model of Triton's batcher, measure the best; every figure "
            "reported is still a measurement), or auto (predict when a request of the model's own "
            "config computes at least 4x as long in Triton as it spends outside it, tpe "
            "otherwise).",
            case_sensitive=False,
        ),
    ] = Strategy.TPE,
    host_group: Annotated[
        str | None,
        typer.Option(
            help="Join as a group of other hardware: searched as the study NAME@GROUP, with its "
            "own baseline and winner (figures of different machines never mix)."
        ),
    ] = None,
    results: Annotated[
        Path | None, typer.Option(help="Results JSON (default: STUDY.results.json).")
    ] = None,
    batch_size: BatchSizeOption = 1,
    input_data: InputDataOption = None,
    warmup: Annotated[str, typer.Option(help="Warm-up per load level.")] = "0.2s",
    window: Annotated[str, typer.Option(help="Measurement window length.")] = "0.3s",
    max_windows: Annotated[
        int, typer.Option(help="Windows per load level before giving up on stability.", min=3)
    ] = SEARCH_MEASURE.max_windows,
    playoff_top: Annotated[
        int,
        typer.Option(
            help="Top candidates re-measured against each other and the baseline, interleaved, "
            "after the search; of a model or pipeline, among those within 25% of the best, one per "
            "way of using the compute comes first, and the best config at another graph level "
            "joins on top "
            "(0: none; the screening figures then stand; with --workload, at least 1, default "
            "2: its final rounds pick the winner).",
            min=0,
        ),
    ] = PLAYOFF_TOP,
    playoff_rounds: Annotated[
        int,
        typer.Option(
            help="Interleaved rounds of the playoff (per stage; then up to "
            "--playoff-extra-rounds more of the leader and any contender whose order against it "
            "is uncertain).",
            min=1,
        ),
    ] = PLAYOFF_ROUNDS,
    playoff_extra_rounds: Annotated[
        int,
        typer.Option(
            help="At most this many more interleaved rounds of the leader and the contenders "
            "whose order against it is still uncertain after the playoff's rounds (0: none; the "
            "higher median then wins, and the output says the order was uncertain).",
            min=0,
        ),
    ] = MAX_EXTRA_ROUNDS,
    playoff_window: Annotated[
        str,
        typer.Option(
            help="Warm-up and window length of each playoff round (longer than a trial's: a "
            "round's figure is a verdict, not a screening figure).",
        ),
    ] = f"{PLAYOFF_MEASURE.window_s:g}s",
    report: Annotated[Path | None, typer.Option(help="Also write the HTML report here.")] = None,
    csv_out: CsvOption = None,
    headroom: HeadroomOption = f"{DEFAULT_HEADROOM:.0%}",
    peak_qps: PeakOption = None,
    *,
    server: LaunchSettings,
    load_generator: LoadSettings,
    precision_checks: AccuracySettings,
) -> None:
    """Search for the highest-throughput config whose p99 meets the SLO (with --workload: the
    most inferences served with every class of a mixed workload meeting its objective; each class's
    objective and request shape then come from the workload file, and the options that would set
    them again are refused)."""
    with user_errors(ctx):
        measure = replace(
            SEARCH_MEASURE,
            warmup_s=parse_duration(warmup, what="--warmup"),
            window_s=max(parse_duration(window, what="--window"), 0.05),
            max_windows=max_windows,
        )
        round_s = max(parse_duration(playoff_window, what="--playoff-window"), 0.05)
        playoff_measure = replace(PLAYOFF_MEASURE, warmup_s=round_s, window_s=round_s)
        timeout_s = parse_duration(timeout, what="--timeout") if timeout else None
        if workload_file is not None:
            refuse_given(ctx, WORKLOAD_REFUSES)
            load_generator.refuse_traffic()
            if playoff_top < 1:
                raise InputError(
                    "--playoff-top: at least 1 with --workload (its final rounds pick the winner; "
                    "a trial's capacity is a screening figure)"
                )
            if max_load is not None and max_load < start_rate:
                raise InputError(
                    f"--max-load: {max_load:g} req/s is below --start-rate {start_rate:g}: a "
                    "capacity ramp goes from the start rate up to the most load it may try"
                )
            traffic = read_traffic(workload_file)
            layouts = {"both": None, **{str(x): (x,) for x in Layout}}
            if layout not in layouts:
                raise InputError(f"--layout: {layout!r} is not one of {', '.join(layouts)}")
            if traffic.routed and layout == str(Layout.ENDPOINTS):
                raise InputError(
                    f"--layout endpoints: the classes of {workload_file} name their models, so "
                    "each class has its own model already; the endpoints layout splits one "
                    "model's classes (leave --layout out)"
                )
            if model is None and not traffic.routed:
                raise InputError(
                    f"--model: required (the model to search), unless every class of "
                    f"{workload_file} names its model (model: NAME)"
                )
            workload_settings = WorkloadSearchSettings(
                accuracy=_accuracy(precision_checks, space),
                trials=trials if trials is not None else (None if timeout else 12),
                timeout_s=timeout_s,
                seed=seed,
                storage=storage,
                study_name=study,
                host_group=host_group,
                start_rate=start_rate,
                max_rate=max_load,
                # the top two by default (plus the baseline and the best split into endpoints):
                # each round of a finalist is a capacity search, dearer than a playoff round
                top=playoff_top if given(ctx, "playoff_top") else WorkloadSearchSettings.top,
                rounds=playoff_rounds,
                measure=measure,
                layouts=layouts[layout],
            )
            target = model or GROUP_SEPARATOR.join(traffic.models)
            name = workload_settings.study_name_for(target, traffic)
            options: dict[str, Any] = dict(
                launch=server,
                load=load_generator,
                settings=measure,
                failure_log=failure_log_path(results or Path(f"{name}.results.json"), name),
            )
            session = (
                open_group_session(model_repository, traffic, model, **options)
                if traffic.routed
                else open_session(model_repository, target, for_traffic=True, **options)
            )
            search_workload(session, space, traffic, workload_settings, results, report)
            return
        refuse_given(
            ctx,
            {
                "start_rate": "only with --workload (where each capacity ramp starts)",
                "layout": "only with --workload (the layouts of a traffic mix)",
            },
        )
        plan_options = parse_plan_options(headroom, peak_qps)
        if model is None:
            raise InputError("--model: required (the model to search in --model-repository)")
        if slo_p99 is None:
            raise InputError("--slo-p99: required (e.g. --slo-p99 50ms), or give --workload FILE")
        slo = parse_duration(slo_p99, what="--slo-p99")
        if slo <= 0:
            raise InputError("--slo-p99: must be above 0, e.g. 50ms")
        if load not in LOAD_CHOICES:
            raise InputError(f"--load: {load!r} is not one of {', '.join(LOAD_CHOICES)}")
        settings = SearchSettings(
            slo_p99_s=slo,
            trials=trials if trials is not None else (None if timeout else 20),
            timeout_s=timeout_s,
            load_mode=LOAD_CHOICES[load],
            max_load=max_load,
            seed=seed,
            storage=storage,
            study_name=study,
            host_group=host_group,
            accuracy=_accuracy(precision_checks, space),
            measure=measure,
            playoff=PlayoffSettings(
                playoff_top, playoff_rounds, playoff_measure, extra_rounds=playoff_extra_rounds
            ),
            strategy=strategy,
        )
        study_name = settings.study_name_for(model)
        out = results or Path(f"{study_name}.results.json")
        session = open_session(
            model_repository,
            model,
            composing=tuple(composing or ()),
            launch=server,
            load=load_generator,
            request_shape=RequestShape(batch_size=batch_size, input_data=input_data),
            settings=settings.measure,
            failure_log=failure_log_path(out, study_name),
        )
        refuse_before_launch(session, settings)
        with kept_log_said(session):
            print_server(session)
            tuning_space = space_for(session, slo, space)
            err_console.print(
                "space: " + ", ".join(f"{k}={v}" for k, v in tuning_space.describe().items())
            )
            with resumable(study_name, settings.storage_name):
                outcome = _search_with_progress(session, tuning_space, settings)
            for reason in outcome.troubles():
                session.server.keep_log_because(reason)
        _print_search_result(outcome)
        write_results(out, outcome.to_dict())
        if csv_out:
            write_inference_csv(search_rows(outcome.study), csv_out)
            console.print(f"csv: {csv_out}")
        if report:
            finished = TuningStudy.open_existing(storage, outcome.study_name)
            data = write_report(finished, report, **plan_options)
            console.print(f"report: {report}")
        else:
            data = collect(outcome.study, **plan_options)
        if data.capacity:
            console.print("capacity plan:")
            for line in data.capacity.lines():
                console.print(f"  {line}")
        if outcome.best is None:
            err_console.print(
                Text("no config met the SLO", style="bold red"),
                Text(f"(p99 <= {format_duration(slo)}); see the results file for each trial"),
            )
            raise typer.Exit(1)


def _accuracy(checks: AccuracySettings, space: SpaceSource | None) -> AccuracySettings:
    """The accuracy gate's settings: the space file may declare the outputs' kinds; the flag
    rules."""
    if space is None:
        return checks
    return replace(checks, output_kinds=checks.output_kinds or space_file_output_kinds(space))


_PER_CLASS = "not with --workload: each class of the workload file says its own"
#: What ``search --workload`` refuses when it is given (on the command line, in a config file or
#: the environment), and why.
WORKLOAD_REFUSES = {
    "slo_p99": f"{_PER_CLASS} (slo_p99)",
    "load": f"{_PER_CLASS} arrivals (each class is an open-loop stream)",
    "batch_size": f"{_PER_CLASS} (batch_size)",
    "input_data": f"{_PER_CLASS} (input_data)",
    "csv_out": "not with --workload: the per-level CSV is written for single-class searches",
    "headroom": "not with --workload: the report of a workload search plans per class (--report)",
    "peak_qps": "not with --workload: the report of a workload search plans per class (--report)",
    "strategy": "not with --workload yet: a workload search uses TPE (predict, which auto may "
    "choose, ranks single-class operating points)",
    "composing": "not with --workload yet: a pipeline is searched with one class of load",
    "playoff_extra_rounds": "not with --workload: its final rounds are --playoff-rounds, each a "
    "capacity search",
    "playoff_window": "not with --workload: its final rounds are capacity searches, measured with "
    "--warmup and --window",
}


def _load_unit(mode: LoadMode) -> str:
    return "concurrency" if mode == LoadMode.CONCURRENCY else "req/s"


def _point_text(point: dict) -> str:
    return " ".join(
        f"{k}={format_duration(v / 1e6) if k == 'max_queue_delay' else v}" for k, v in point.items()
    )


def _search_with_progress(
    session: TuningSession, tuning_space: SearchSpace, settings: SearchSettings
) -> SearchResult:
    unit = _load_unit(settings.load_mode)
    with progress_bar(BarColumn(), TextColumn("{task.fields[status]}")) as bar:
        task = bar.add_task("baseline", total=settings.trials, status="")
        measured = []

        def baseline_start() -> None:
            measured.append(True)
            bar.update(task, description="measuring the base config (baseline)")

        def baseline(op: OperatingPoint) -> None:
            source = "measured now" if measured else "from the study"
            err_console.print(f"baseline ({source}): {_op_text(op, unit)}")

        trials = TrialsDisplay(bar, task, "infer/s")

        def trial_done(result: TrialResult, best: TrialResult | None, eta: float | None) -> None:
            shown = _op_text(result.operating_point, unit)
            trials.done(result, best, eta, _point_text(result.params), shown)
            levels = result.operating_point.levels if result.operating_point else []
            for note in sorted({lv.disturbance for lv in levels if lv.disturbance}):
                err_console.print(f"  [yellow]caveat[/]: {escape(note)}")

        def playoff_start(contenders: list[Contender], rounds: int) -> None:
            names = ", ".join(c.label for c in contenders)
            bar.update(task, description="playoff", status="")
            err_console.print(
                f"playoff: {names}, {rounds} interleaved rounds at their operating loads "
                f"(up to {settings.playoff.extra_rounds} more where an order is uncertain)"
            )

        def playoff_round(stage: int, n: int, contender: Contender, figure: RoundFigure | None) -> None:
            bar.update(task, description=f"playoff stage {stage}, round {n}: {contender.label}")
            if figure is None:
                err_console.print(f"  {contender.label}: [red]failed[/]")
            elif figure.disturbed:
                err_console.print(
                    f"  {contender.label}, round {n}: [yellow]disturbed[/]: "
                    f"{escape(figure.disturbance or '')}"
                )

        def calibrating(index: int, total: int, setting: dict[str, Any]) -> None:
            shown = " ".join(f"{k}={v}" for k, v in setting.items()) or "the model's own"
            bar.update(task, description=f"calibrating {index}/{total}: {shown}")

        def calibrated(done: SettingCalibration | None, why: str | None) -> None:
            if done is None:
                err_console.print(f"  calibration [red]failed[/]: {escape(why or '')}")
                return
            sizes = ", ".join(f"{p.batch_size}: {p.mean_s * 1e3:.2f}" for p in done.points)
            err_console.print(
                f"calibrated {escape(' '.join(f'{k}={v}' for k, v in done.setting.items()))} in "
                f"{done.seconds:.0f} s: ms per batch {{{sizes}}}, outside the server "
                f"{done.overhead_s * 1e3:.2f} ms"
            )

        def ranked(ranking: Ranking) -> None:
            best = ranking.predicted[0] if ranking.predicted else None
            text = f", best predicted {best.throughput:,.0f} infer/s" if best else ""
            err_console.print(
                f"ranked {ranking.configs:,} configs by prediction in {ranking.seconds:.1f} s "
                f"({ranking.simulated:,} simulated, the rest below the best by capacity){text}; "
                "measuring the best"
            )

        bar.update(task, description="building precision variants")
        return run_search(
            session,
            tuning_space,
            settings,
            SearchProgress(
                baseline_start,
                baseline,
                trials.start,
                trial_done,
                print_precisions,
                playoff_start,
                playoff_round,
                CalibrationProgress(calibrating, calibrated, ranked),
                lambda first: err_console.print(first.describe()),
                _say_strategy if settings.strategy == Strategy.AUTO else None,
            ),
        )


def _say_strategy(choice: StrategyChoice) -> None:
    err_console.print(f"strategy auto: {choice.strategy.value} ({choice.why})")


def _config_text(result: TrialResult) -> str:
    """The knobs, and for a precision variant its accuracy beside them."""
    text = knobs_summary(result.knobs) if result.knobs else _point_text(result.params)
    accuracy = accuracy_text(result.accuracy)
    return f"{text} ({accuracy})" if accuracy else text


def _op_text(op: OperatingPoint | None, unit: str) -> str:
    if op is None:
        return "no result"
    if not op.feasible:
        return f"[yellow]misses the SLO[/] even at the lowest load (p99 {ms(op.p99_s)} ms)"
    load = f"{unit} {op.load:g}" if unit == "concurrency" else f"{op.load:,.0f} {unit}"
    text = f"{op.throughput:,.0f} infer/s at {load} (p50 {ms(op.p50_s)}, p99 {ms(op.p99_s)} ms)"
    if op.client_bound:  # the walk stopped where the load generator ran out of CPU
        text += " [yellow]at least: client-bound above[/]"
    return text


def _print_search_result(outcome: SearchResult, top: int = 5) -> None:
    table = Table(
        title=f"study {outcome.study_name}: p99 <= {format_duration(outcome.slo_p99_s)}, "
        f"{outcome.load_mode} load, {len(outcome.results)} completed trials; "
        "SCREENING figures (one short measurement per load level)",
        title_justify="left",
    )
    for column in ("#", "trial", "config", "load", "infer/s", "p50 ms", "p99 ms", "vs baseline"):
        table.add_column(column, justify="left" if column == "config" else "right")
    base = outcome.baseline
    if base is not None:
        table.add_row(
            "-", "base", "the model's own config.pbtxt", f"{base.load:g}", f"{base.throughput:,.0f}",
            ms(base.p50_s), ms(base.p99_s), "" if base.feasible else "misses SLO",
        )  # fmt: skip
    for rank, r in enumerate(outcome.results[:top], 1):
        op = r.operating_point
        assert op is not None
        gain = outcome.improvement(r)
        versus = f"{gain:+.0%}" if gain is not None else ""
        table.add_row(
            str(rank), str(r.number), _config_text(r),
            f"{op.load:g}" if op.feasible else "-", f"{op.throughput:,.0f}", ms(op.p50_s),
            ms(op.p99_s), versus if op.feasible else "misses SLO",
        )  # fmt: skip
    console.print(table)
    if outcome.failed:
        console.print(f"{len(outcome.failed)} trial(s) failed (reasons in the results file)")
    if outcome.stop_reason:
        console.print(f"stopped before the trial budget: {outcome.stop_reason}")
    console.print(f"time: {outcome.phases.describe()}")
    if outcome.playoff is not None:
        _print_playoff(outcome)
    winner = outcome.winner
    unit = _load_unit(outcome.load_mode)
    if winner is not None:
        gain_interval = gain_of(outcome.study, winner)
        versus = ""
        if gain_interval is not None:
            versus = f", {interval_text(gain_interval, percent=True)} over the baseline"
        label = {"playoff": "", "confirmed": " (confirmed)", "screening": " (screening figure)"}
        console.print(
            f"[bold]winner[/]: trial {winner.result.number}{label[winner.figures]}, "
            f"{_op_text(winner.point, unit)}{versus}"
        )
        behind = behind_baseline(gain_interval if winner.figures == "playoff" else None)
        if behind is not None:
            console.print(f"[bold yellow]but[/] {behind}")
        baseline, steps_of = outcome.baseline, "search operating point"
        played = outcome.playoff.baseline if outcome.playoff is not None else None
        if winner.point.steps and played is not None and played.rounds:
            baseline = played.operating_point(outcome.slo_p99_s, outcome.load_mode)
            steps_of = "playoff load, median of the rounds"
        winner_point = winner.point if winner.point.steps else winner.result.operating_point
        _print_steps(outcome.study.identity.model, baseline, winner_point, steps_of)
        console.print("its config.pbtxt:")
        console.print(winner.result.config_pbtxt, markup=False)
    elif outcome.playoff is not None and outcome.best is not None:
        console.print(
            "[bold red]no winner[/]: no candidate held its SLO in the playoff, even at lower "
            "loads; nothing is exported (search again with more trials or a looser SLO)"
        )


def _print_steps(
    entry: str, baseline: OperatingPoint | None, winner: OperatingPoint | None, steps_of: str
) -> None:
    """A pipeline's steps at each operating point: where an end-to-end request's time went."""
    points = [(name, op) for name, op in (("baseline", baseline), ("winner", winner)) if op and op.steps]
    if not points:
        return
    table = Table(
        title=f"where a request's time went, per step (Triton's statistics at each config's {steps_of})",
        title_justify="left",
    )
    for column in ("config", "step", "queue ms", "compute ms", "avg batch", ""):
        table.add_column(column, justify="left" if column in ("config", "step", "") else "right")
    for name, op in points:
        slowest = pipeline_bottleneck(op.steps, entry)
        for step in op.steps:
            table.add_row(
                name, step.model, ms(step.queue_s), ms(step.compute_s),
                f"{step.avg_batch_size:.1f}", "bottleneck" if step is slowest else "",
            )  # fmt: skip
    console.print(table)


def _print_playoff(outcome: SearchResult) -> None:
    playoff = outcome.playoff
    assert playoff is not None
    by_number = {t.number: t for t in outcome.study.trials}
    table = Table(
        title=f"playoff: {playoff.rounds} interleaved rounds per stage, median [min-max]",
        title_justify="left",
    )
    for column in (
        "trial",
        "config",
        "load",
        "infer/s",
        "p99 ms",
        "vs baseline",
        "held",
        "vs winner, paired",
        "vs screening",
    ):
        table.add_column(column, justify="left" if column == "config" else "right")
    for entry in playoff.entries:
        trial = by_number.get(entry.trial) if entry.trial is not None else None
        config = _config_text(trial) if trial else "the model's own config.pbtxt"
        mark = " (winner)" if entry.trial == playoff.winner and entry.trial is not None else ""
        mark += " (tied)" if entry.trial in playoff.tied and entry.trial != playoff.winner else ""
        versus = entry.versus_winner
        ratio = entry.screening_ratio
        p99 = entry.p99_s
        table.add_row(
            ("base" if entry.trial is None else str(entry.trial)) + mark,
            config,
            f"{entry.load:g}",
            interval_text(entry.throughput),
            f"{ms(p99.median)} [{ms(p99.low)}-{ms(p99.high)}]",
            interval_text(entry.gain, percent=True) if entry.gain else "",
            "yes" if entry.held else "[red]no[/]",
            versus.text() if versus is not None else "",
            f"{ratio:.2f}x" if ratio is not None else "",
        )
    console.print(table)
    if playoff.tied:
        console.print(
            f"tied (the interval of their per-round ratios to the highest median is within "
            f"±{TIE_MARGIN:.0%}): trials "
            + ", ".join(map(str, playoff.tied))
            + "; the tie goes to the simplest config (fewer instances, smaller batches, "
            "shorter queue delay)"
        )
    if playoff.uncertain:
        console.print(
            "[yellow]order uncertain[/]: trials "
            + ", ".join(map(str, playoff.uncertain))
            + f" against the highest median after {playoff.extra_rounds} extra round(s); "
            "the higher median won"
        )
    for note in playoff.notes:
        console.print(f"note: {note}")
    if playoff.disturbed_rounds:
        console.print(
            f"[yellow]the machine was disturbed[/] in {playoff.disturbed_rounds} playoff "
            "measurement(s) that could not be re-measured clean: read these figures with care"
        )
