"""The package's import surface: subpackages re-export nothing, so each name has one import path
(``from tritontune.search.study import read_study``), and modules carry no export lists."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "tritontune"


def test_subpackages_re_export_nothing():
    for init in PACKAGE.glob("*/__init__.py"):
        if init.parent.name == "cli":
            continue  # the console entry points (tritontune.cli:app) are its whole surface
        tree = ast.parse(init.read_text())
        imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
        assert not imports, f"{init.relative_to(PACKAGE.parent)} re-exports names"


def test_no_module_keeps_an_export_list():
    for module in PACKAGE.rglob("*.py"):
        tree = ast.parse(module.read_text())
        names = [t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets
                 if isinstance(t, ast.Name)]  # fmt: skip
        assert "__all__" not in names, f"{module.relative_to(PACKAGE.parent)} has __all__"
