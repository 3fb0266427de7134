"""``tritontune import-ma``: a Model Analyzer profile config as a tritontune config file."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tritontune.cli._common import app, console, user_errors
from tritontune.errors import InputError
from tritontune.migrate import migrate
from tritontune.yamlfile import read_yaml


@app.command("import-ma")
def import_ma(
    ctx: typer.Context,
    ma_config: Annotated[
        Path,
        typer.Argument(
            metavar="MA_CONFIG", help="Model Analyzer's profile config (YAML).", dir_okay=False
        ),
    ],
    out: Annotated[Path, typer.Option(help="The tritontune config file to write.")] = Path(
        "tritontune.yaml"
    ),
    force: Annotated[bool, typer.Option("--force", help="Overwrite --out if it exists.")] = False,
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Which of several profile_models to write the file for (default: the first).",
        ),
    ] = None,
) -> None:
    """Write a tritontune config file from a Model Analyzer profile config; one line per key
    not mapped."""
    with user_errors(ctx):
        migration = migrate(read_yaml(ma_config, "Model Analyzer config"), ma_config, model=model)
        if out.resolve() == ma_config.resolve():
            raise InputError(f"--out {out}: is the Model Analyzer config itself; choose another file")
        if out.exists() and not force:
            raise InputError(f"--out {out}: exists; pass --force to overwrite it")
        try:
            out.write_text(migration.yaml_text(str(out)), encoding="utf-8")
        except OSError as err:
            raise InputError(f"--out {out}: cannot write it ({err.strerror})") from None
    say(f"wrote {out} (model {migration.model}, from {ma_config})")
    for note in migration.notes:
        say(f"note: {note}")
    command = f"tritontune search -f {out}"
    if "slo_p99" not in migration.config.get("search", {}):
        command += " --slo-p99 SLO"  # the MA config had no latency constraint: the user's to give
    say(f"next: {command}")


def say(line: str) -> None:
    """One line as it is: paths and notes hold brackets rich would read as markup, and a note is
    one line however long."""
    console.print(line, markup=False, soft_wrap=True)
