"""The structure docs/architecture.md describes, checked: layers call downward only, no package
has an import cycle, one package owns the study's format, and the launch options are defined
once."""

from __future__ import annotations

import ast
import re
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
    "tuning_record": 4,
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


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _package_of(path: Path) -> str:
    return _module_name(path if path.name == "__init__.py" else path.parent / "__init__.py")


def _is_type_checking(node: ast.stmt) -> bool:
    if not isinstance(node, ast.If):
        return False
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Every import that runs: at module level and inside functions, but not under
    ``if TYPE_CHECKING:`` (those name types only, and never run)."""
    found: list[ast.Import | ast.ImportFrom] = []
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            found.append(node)
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                assert isinstance(child, ast.If)
                pending.extend(child.orelse)
            else:
                pending.append(child)
    return found


def _module_graph() -> dict[str, set[str]]:
    """Each module of tritontune and the modules of its own package it imports at run time."""
    paths = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        for node in _runtime_imports(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level or not (node.module or "").startswith("tritontune"):
                    continue
                base = node.module or ""
                named = (f"{base}.{a.name}" for a in node.names)  # a module, or a name in base
                targets = [module if module in paths else base for module in named]
            else:
                targets = [a.name for a in node.names if a.name.startswith("tritontune")]
            for target in targets:
                while target not in paths:  # ``import tritontune.a.b.c``'s nearest module
                    target = target.rpartition(".")[0]
                if target != name and _package_of(paths[target]) == _package_of(path):
                    graph[name].add(target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's), each as one cycle
    through them: ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_cycle_through(graph, component) for component in components]


def _cycle_through(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle from the component's first module back to it (a breadth-first walk)."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target not in came_from:
                    came_from[target] = node
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {sorted(component)}")


def test_the_cycle_finder_reports_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"d"}}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_package_has_an_import_cycle():
    """No module imports, directly or through others of its package, a module that imports it
    back: a package's modules form layers of their own. Imports inside functions count (they
    run); imports under ``if TYPE_CHECKING:`` do not (they name types for the checker and never
    run), so a module may name a type of a module that imports it that way."""
    assert [" -> ".join(cycle) for cycle in _cycles(_module_graph())] == []


#: Optuna's names for the attributes a study keeps (and its private parts): only
#: :mod:`tritontune.study` reads or writes a study through them.
OPTUNA_ATTRIBUTES = re.compile(
    r"\b(set_)?(system|user)_attrs?\b|\b(get|set)_(study|trial)_(system|user)_attrs?\b"
)
OPTUNA_PRIVATE = re.compile(r"\._(storage|trial_id|cached_frozen_trial)\b")


def test_only_the_study_package_names_study_attributes():
    """The study is the database: one package owns its format (Optuna's ``user_attrs``,
    ``system_attrs`` and their setters are named nowhere else, and Optuna's private parts are
    used nowhere)."""
    readers = [
        f"{module.relative_to(PACKAGE.parent)}: {found.group()}"
        for module in PACKAGE.rglob("*.py")
        if not module.is_relative_to(PACKAGE / "study")
        for found in OPTUNA_ATTRIBUTES.finditer(module.read_text())
    ]
    assert readers == []
    private = [
        f"{module.relative_to(PACKAGE.parent)}: {found.group()}"
        for module in PACKAGE.rglob("*.py")
        for found in OPTUNA_PRIVATE.finditer(module.read_text())
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
