"""The structure docs/architecture.md describes, checked: layers call downward only, one package
owns the study's format, and the launch options are defined once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tritontune.cli import app

PACKAGE = Path(__file__).resolve().parent.parent / "tritontune"

#: Each top-level module or package of tritontune and its layer: a unit imports only units of
#: lower layers (siblings of one layer never import each other).
LAYERS = {
    "cli": 9,
    "__main__": 10,
    "report": 8,
    "profile": 7,
    "migrate": 7,
    "search": 6,
    "check": 6,
    "export": 6,
    "study": 5,
    "serving": 5,
    "precision": 4,
    "predict": 4,
    "record": 4,
    "measure": 3,
    "server": 2,
    "config": 1,
    "enums": 0,
    "errors": -1,
    "units": 0,
    "yamlfile": 0,
    "hostinfo": 0,
    "redaction": 0,
    "__init__": 0,
}


def _imports() -> list[tuple[str, str, Path]]:
    found = []
    for module in PACKAGE.rglob("*.py"):
        unit = module.relative_to(PACKAGE).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(module.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tritontune."):
                target = (node.module or "").split(".")[1]
                if target != unit:
                    found.append((unit, target, module))
    return found


def test_every_unit_has_a_layer():
    units = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in PACKAGE.rglob("*.py")}
    assert units - set(LAYERS) == set(), "give the new module a layer (and a line in the docs)"


def test_layers_call_downward_only():
    upward = [
        f"{module.relative_to(PACKAGE.parent)} imports tritontune.{target}"
        for unit, target, module in _imports()
        if LAYERS[target] >= LAYERS[unit]
    ]
    assert upward == []


def test_only_the_study_package_names_study_attributes():
    """The study is the database: one package owns its format (and Optuna's private parts are
    used nowhere)."""
    readers = [
        str(module.relative_to(PACKAGE.parent))
        for module in PACKAGE.rglob("*.py")
        if not module.is_relative_to(PACKAGE / "study")
        and any(word in module.read_text() for word in ("user_attrs", "set_user_attr"))
    ]
    assert readers == []
    private = [
        str(module.relative_to(PACKAGE.parent))
        for module in PACKAGE.rglob("*.py")
        if any(word in module.read_text() for word in ("._storage", "._trial_id"))
    ]
    assert private == []


SERVER_FLAGS = (
    "--launch", "--image", "--gpus", "--shm-size", "--url", "--tritonserver", "--server-arg",
    "--server-log", "--protocol", "--ssl", "--ssl-ca", "--ssl-cert", "--ssl-key", "--header",
)  # fmt: skip


def test_the_shared_options_are_defined_once():
    sources = [p.read_text() for p in (PACKAGE / "cli").glob("*.py")]
    for flag in ('"--server-arg"', '"Real inputs to calibrate', 'envvar="TRITONTUNE_URL"'):
        assert sum(text.count(flag) for text in sources) == 1, flag
    assert sum(text.count("def launch_settings(") for text in sources) == 1


PRECISION_FLAGS = ("--accuracy", "--accuracy-kind", "--calibration", "--calibration-data")


@pytest.mark.parametrize(
    ("command", "flags"),
    [
        ("search", SERVER_FLAGS + PRECISION_FLAGS),
        ("profile", SERVER_FLAGS + PRECISION_FLAGS),
        ("check", SERVER_FLAGS),
    ],
)
def test_every_command_takes_its_groups_options(command: str, flags: tuple[str, ...]):
    params = typer.main.get_command(app).commands[command].params  # type: ignore[attr-defined]
    taken = {opt for param in params for opt in param.opts}
    assert [flag for flag in flags if flag not in taken] == []
    shown = CliRunner().invoke(app, [command, "--help"]).output
    assert "--server-log" in shown  # and --help lists them
