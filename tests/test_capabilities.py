"""The capability matrix (docs/reference/capabilities.md) stays true to the code and the tests.

Its table has one row per capability and one column per mode. Each cell starts with its state in
bold; a test it names is written `` `tests/PATH.py::test_name` `` (a parametrized case as
``test_name[case]``), a refusal it quotes is in double quotes, and a gap it points to is a link
``[G1](#g1)`` to a heading of the page. Checked here, without a server: every cell holds one of
the states, every named test is defined in its file, every quoted refusal is in a string of
``tritontune/``, and every cell that is not a capability shown or refused points to its gap.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "reference" / "capabilities.md"

MODES = (
    "Single model",
    "Ensemble",
    "BLS",
    "Several models on one server",
    "Workload on one model",
)
CAPABILITIES = (
    "Precision variants, accuracy gate",
    "`--strategy predict`",
    "`--strategy auto`",
    "`--load-engine perf_analyzer`",
    "`--load-processes N` / `auto`",
    "`export`, then `check`",
    "Shared study, several workers",
    "Ctrl-C, then resume",
    "Server SIGKILLed mid-trial",
    "Report: `search --report`",
    "Report: `tritontune report`",
)
WORKS, REFUSED_BEFORE = "works", "refused before launch"
#: The states whose cell must point to a gap: what the team has yet to close.
GAP_STATES = ("refused after launch", "not supported", "untested")
STATES = (WORKS, REFUSED_BEFORE, *GAP_STATES)
#: A quoted refusal shorter than this could match anywhere.
MIN_QUOTE = 25

STATE = re.compile(r"^\*\*([^*]+)\*\*")
TEST_ID = re.compile(r"`(tests/[\w/]+\.py)::(test_\w+)(?:\[[^\]`]+\])?`")
QUOTE = re.compile(r'"([^"]+)"')
GAP_LINK = re.compile(r"\[G(\d+)\]\(#g(\d+)\)")
GAP_HEADING = re.compile(r"^#+ .*\{#g(\d+)\}\s*$", re.M)


def page_text() -> str:
    return PAGE.read_text(encoding="utf-8")


def table_rows(text: str) -> list[list[str]]:
    """The rows of the page's first markdown table, each a list of its cells (the separator
    row left out)."""
    rows: list[list[str]] = []
    for line in text.splitlines():
        if line.startswith("|"):
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if not all(set(cell) <= {"-", ":"} for cell in cells):
                rows.append(cells)
        elif rows:
            break
    return rows


def matrix(text: str) -> dict[tuple[str, str], str]:
    """Each cell of the capability matrix, by (capability, mode)."""
    header, *body = table_rows(text)
    assert header[1:] == list(MODES), f"the matrix's columns are {header[1:]}"
    cells = {}
    for row in body:
        assert len(row) == len(header), f"row {row[0]!r} has {len(row)} cells, not {len(header)}"
        for mode, cell in zip(MODES, row[1:], strict=True):
            cells[row[0], mode] = cell
    return cells


def state_of(cell: str) -> str | None:
    found = STATE.match(cell)
    return found.group(1).strip() if found else None


@cache
def defined_tests(path: Path) -> frozenset[str]:
    """The test functions ``path`` defines: at its top level and in its test classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in tree.body:
        bodies = node.body if isinstance(node, ast.ClassDef) else [node]
        for item in bodies:
            if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                names.add(item.name)
    return frozenset(names)


@cache
def integration_tests(path: Path) -> frozenset[str]:
    """The tests of ``path`` marked ``integration`` (a real tritonserver): all of them where the
    module's ``pytestmark`` says so."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        marked = any(isinstance(t, ast.Name) and t.id == "pytestmark" for t in targets)
        if marked and "mark.integration" in ast.unparse(node):
            return defined_tests(path)
    return frozenset(
        node.name
        for node in tree.body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and any("mark.integration" in ast.unparse(d) for d in node.decorator_list)
    )


def normalized(text: str) -> str:
    return " ".join(text.split())


@cache
def source_strings() -> tuple[str, ...]:
    """Every string literal of ``tritontune/``, whitespace normalized. Adjacent literals are one
    (the parser joins them); an f-string gives each of its literal parts, the parts between its
    ``{...}`` fields, whose neighbours the parser has joined too."""
    found: list[str] = []
    for path in sorted((ROOT / "tritontune").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append(normalized(node.value))
    return tuple(found)


def in_source(quote: str) -> bool:
    wanted = normalized(quote)
    return any(wanted in literal for literal in source_strings())


def test_the_matrix_has_every_capability_and_every_mode():
    cells = matrix(page_text())
    rows = list(dict.fromkeys(capability for capability, _ in cells))
    assert rows == list(CAPABILITIES)
    assert len(cells) == len(CAPABILITIES) * len(MODES)


def test_every_cell_holds_one_state_and_what_that_state_needs():
    problems = []
    for (capability, mode), cell in matrix(page_text()).items():
        where = f"{capability} / {mode}"
        state = state_of(cell)
        tests, quotes = TEST_ID.findall(cell), QUOTE.findall(cell)
        if state not in STATES:
            problems.append(f"{where}: starts with {state!r}, not one of {STATES} in bold")
        elif state == WORKS and not tests:
            problems.append(f"{where}: works, but names no test")
        elif state == REFUSED_BEFORE and not (tests and quotes):
            problems.append(f"{where}: refused before launch needs the refusal quoted and its test")
        elif state in GAP_STATES and not GAP_LINK.search(cell):
            problems.append(f"{where}: {state}, with no link to its gap")
    assert problems == []


def test_every_named_test_is_defined_in_its_file():
    """A test renamed or moved without this page following fails here, naming it."""
    missing = []
    for file, name in TEST_ID.findall(page_text()):
        path = ROOT / file
        if not path.is_file():
            missing.append(f"{file}: no such file")
        elif name not in defined_tests(path):
            missing.append(f"{file}::{name}: not defined there")
    assert missing == []


def test_a_cell_shown_only_on_the_fake_server_says_so():
    unsaid = []
    for (capability, mode), cell in matrix(page_text()).items():
        if state_of(cell) != WORKS:
            continue
        named = TEST_ID.findall(cell)
        real = [n for f, n in named if (ROOT / f).is_file() and n in integration_tests(ROOT / f)]
        if not real and "(fake server)" not in cell:
            unsaid.append(f"{capability} / {mode}: no test of it runs a real server")
    assert unsaid == []


def test_every_quoted_refusal_is_in_the_code():
    quoted = [q for cell in matrix(page_text()).values() for q in QUOTE.findall(cell)]
    assert quoted, "the matrix quotes no refusal"
    assert [q for q in quoted if len(normalized(q)) < MIN_QUOTE] == []
    assert [q for q in quoted if not in_source(q)] == []


def test_every_gap_linked_to_is_a_heading_and_every_other_gap_is_closed():
    text = page_text()
    headings = set(GAP_HEADING.findall(text))
    links = GAP_LINK.findall(text)
    assert headings
    assert all(shown == anchor for shown, anchor in links)
    assert sorted({anchor for _, anchor in links} - headings) == []
    # a gap no cell links to any more says so first: it was closed, and by what
    for gap in sorted(headings - {anchor for _, anchor in links}):
        section = text.split(f"{{#g{gap}}}", 1)[1].split("\n#", 1)[0]
        assert section.strip().startswith("Closed"), f"G{gap}: no cell links to it, yet it is open"


def test_the_checks_see_a_renamed_test_a_reworded_refusal_and_an_unknown_state():
    cell = (
        "**works**: `tests/test_capabilities.py::test_since_renamed[case]`; "
        '"a pipeline\'s configs are never predicted at all"'
    )
    ((file, name),) = TEST_ID.findall(cell)
    assert name == "test_since_renamed" and name not in defined_tests(ROOT / file)
    assert "test_every_named_test_is_defined_in_its_file" in defined_tests(ROOT / file)
    (quote,) = QUOTE.findall(cell)
    assert not in_source(quote)
    assert in_source("a pipeline's configs are not predicted   yet")  # wrapped as in the docs
    assert state_of("**works, mostly**: ...") not in STATES
