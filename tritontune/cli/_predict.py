"""``tritontune predict``: what-if answers from a calibrated study, without a server."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from tritontune.cli._common import ConfigOption, StorageOption, app, console, user_errors
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadMode
from tritontune.predict.calibration import Derivation
from tritontune.search.whatif import (
    Answer,
    at_slo,
    best_for,
    parse_assignments,
    study_model,
    what_if,
)
from tritontune.study.handle import TuningStudy
from tritontune.study.storage import DEFAULT_STORAGE
from tritontune.units import format_duration, parse_duration


@app.command()
def predict(
    ctx: typer.Context,
    study: Annotated[str, typer.Option(help="A study searched with --strategy predict.")],
    config: ConfigOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="A knob of the config to predict, KNOB=VALUE (e.g. max_batch_size=32, "
            "max_queue_delay=2ms, instance_count=2); repeat for several. Knobs not set are the "
            "study's winner's.",
        ),
    ] = None,
    load: Annotated[
        str | None,
        typer.Option(
            help="Loads to predict the config at, comma-separated: concurrency, or req/s for a "
            "study searched with --load poisson (e.g. 100,200,400). Default: its operating "
            "point under the study's SLO."
        ),
    ] = None,
    slo_p99: Annotated[
        str | None,
        typer.Option(help="Rank the study's space for another p99 SLO (e.g. 20ms) instead."),
    ] = None,
    top: Annotated[int, typer.Option(help="Configs shown with --slo-p99.", min=1)] = 5,
) -> None:
    """Predict without a server, from a study's calibration: a config at some loads (--set,
    --load), or the best configs for another SLO (--slo-p99). Each answer comes with its band and
    the calibration it used; it is a prediction, to be measured before anyone relies on it."""
    with user_errors(ctx):
        model = study_model(TuningStudy.open_existing(storage, study))
        unit = "concurrency" if model.load_mode == LoadMode.CONCURRENCY else "req/s"
        if slo_p99 is not None:
            if set_ or load:
                raise InputError("--slo-p99 ranks the whole space: give it without --set and --load")
            slo = parse_duration(slo_p99, what="--slo-p99")
            answers = best_for(model, slo, top)
            title = f"best predicted configs for p99 <= {format_duration(slo)} ({model.name})"
        else:
            changes = parse_assignments(model.space, set_ or [])
            answers = what_if(model, changes, _loads(load)) if load else [at_slo(model, changes)]
            title = f"predicted ({model.name}, SLO p99 <= {format_duration(model.slo_p99_s)})"
    table = Table(title=title, title_justify="left")
    for column in ("config", unit, "infer/s", "band", "p50 ms", "p99 ms", "batch", "from"):
        table.add_column(column, justify="left" if column in ("config", "from") else "right")
    for answer in answers:
        table.add_row(*_row(answer))
    console.print(table)
    console.print(
        "Predictions from the study's calibration, corrected by its measured trials; measure "
        "a config (tritontune profile) before relying on its figure."
    )


def _loads(text: str) -> list[float]:
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--load {text!r}: expected numbers separated by commas") from None


def _row(answer: Answer) -> list[str]:
    shown = " ".join(
        f"{k}={format_duration(v / 1e6) if k == 'max_queue_delay' else v}"
        for k, v in answer.point.items()
        if k not in ("instance_kind",)
    )
    source = {
        Derivation.MEASURED: "calibrated",
        Derivation.COMPOSED: f"composed of {len(answer.sources)}",
        Derivation.CONTENTION: f"{len(answer.sources)} settings + shared cores",
    }[answer.derivation]
    return [
        shown,
        f"{answer.load:g}",
        f"{answer.throughput:,.0f}",
        f"±{answer.band:.0%}",
        f"{answer.p50_s * 1e3:.2f}",
        f"{answer.p99_s * 1e3:.2f}",
        f"{answer.mean_batch:.1f}",
        f"{source} (x{answer.correction:.2f})",
    ]
