"""Every example's README runs as written, with a tiny budget.

Each ``examples/*/README.md`` (the index, ``examples/README.md``, aside) has a ``Run it`` heading
(``## Run it``, or ``### Run it`` inside a section) over one fenced ``bash`` block: commands that
run from the repository root after ``make setup``. This test runs each block for real, in
``bash -euo pipefail``, one test per example, changed only so:

- **Where it runs.** In a temporary directory holding two links, ``examples`` (to the repository's)
  and ``.venv/bin`` (to the directory of the Python running the tests, where ``tritontune`` is), so
  the block's relative paths resolve as they do in the repository root, while everything its
  commands write (studies, results, reports, exported repositories, logs) lands in the temporary
  directory. ``examples/`` must be unchanged afterwards (asserted). ``TRITONTUNE_STORAGE`` is a
  fresh SQLite file there (a block that sets its own wins), and ``TMPDIR`` is ``own_servers``.
- **``make`` lines are not run.** They build the example models, which the fixtures provide
  (``MAKE_TARGETS``: ``real_model`` builds MiniLM, or skips the test without its package, and
  ``real_pipeline`` the pipeline around it); make would also check ``make setup`` again, and
  reinstall when pyproject.toml is newer.
- **A tiny budget.** Each ``tritontune`` command gets the options of ``SMALL`` (any of the same
  options the README gives are removed): one trial (two for a worker started in the background with
  ``&``: one each for two workers); one load level a ramp (concurrency 1, the cap); 0.1 s windows (a
  window also waits for enough replies, up to 4 windows' time), 3 at most per level; no playoff (its
  rounds have fixed, longer windows: 8 to 17 s a search here; tests/search runs it); no precision
  variants (built and gated on accuracy before the first trial: ~10 s for the MLP, minutes for
  MiniLM; a pipeline's ONNX models each get ``precision: [fp32]`` in its space file, keyed by model;
  tests/examples checks the MiniLM pipeline's capture and INT8 gate); and a p99 SLO of 1 s, met at
  the lowest load however busy the machine (a study the README does not name keeps the name its SLO
  gives it). ``check`` gets a 50 % tolerance over 3 rounds of 0.1 s windows (the search's; its
  windows wait for 200 replies, up to 4 windows' time). A workload search keeps its classes'
  objectives (it refuses ``--slo-p99``), and its capacity ramps stop at 80 req/s in all (from the
  default start, 20). What is under test is that the commands run and hand their results on, not the
  figures.

Then each step must have exited 0, and said or written one thing that shows it did its job
(``expect_step``), and no server may be left running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import tritonserver_processes
from tritontune.config.model_config import read_config
from tritontune.config.pipeline import is_pipeline, load_pipeline
from tritontune.config.repository import ONNX_BACKEND
from tritontune.search.optimize import default_study_name
from tritontune.units import parse_duration

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
INDEX = EXAMPLES / "README.md"
READMES = sorted(p for p in EXAMPLES.glob("**/README.md") if p != INDEX)

#: ``make TARGET`` lines of a block: the fixture that provides what they build, and its marks.
MAKE_TARGETS = {
    "examples/model_repository/mlp/1/model.onnx": ("example_repository", ()),
    "minilm": ("real_model", (pytest.mark.real_model,)),
    "minilm-pipeline": ("real_pipeline", (pytest.mark.real_model,)),
}

#: The options each command is given, replacing the README's own.
SMALL = {
    "search": {
        "--trials": "1",
        "--slo-p99": "1s",
        "--max-load": "1",
        "--warmup": "0.2s",
        "--window": "0.1s",
        "--max-windows": "3",
        "--playoff-top": "0",
    },
    "profile": {"--warmup": "0.2s", "--window": "0.1s", "--max-windows": "3"},
    "check": {"--tolerance": "90%", "--rounds": "3", "--window": "0.1s"},
}
#: Options ``search --workload`` refuses: each class of the workload file says its own.
NOT_WITH_WORKLOAD = ("--slo-p99",)
#: A workload search's capacity ramps: 20, 40 and 80 req/s in all at most.
WORKLOAD_MAX_LOAD = "80"
#: A block's whole run may not take longer than this (it should take well under a minute).
TIMEOUT_S = 240

#: A ``tritontune`` command in a block: its subcommand, and its arguments up to the first shell
#: operator or redirection (``rest`` is what follows on the line).
COMMAND = re.compile(
    r"(?P<exe>\.venv/bin/tritontune)[ \t]+(?P<sub>[a-z-]+)(?P<args>[^;&|<>\n]*)(?P<rest>[^\n]*)"
)


def run_it_block(readme: Path) -> str:
    """The fenced bash block under the README's ``Run it`` heading: the section's only one."""
    section = re.search(
        r"^#{2,3} Run it[ \t]*\n(?:(?!#|```)[^\n]*\n)*"  # the heading, then prose
        r"```bash\n(?P<block>(?:(?!```)[^\n]*\n)*)```[^\n]*\n?"  # the block
        r"(?:(?!#|```)[^\n]*(?:\n|\Z))*",  # prose up to the next heading or block
        readme.read_text(),
        re.M,
    )
    name = readme.relative_to(ROOT)
    if section is None:
        pytest.fail(f"{name}: no 'Run it' section with a bash block: every example must run")
    following = readme.read_text()[section.end() :]
    assert not following.startswith("```"), f"{name}: 'Run it' has more than one block"
    return section["block"]


def steps_of(block: str) -> list[str]:
    """The block's commands, one step each: continued lines joined, a ``for``/``while``/``if``
    kept whole with its body, comments and blank lines left out."""
    steps: list[str] = []
    current: list[str] = []
    depth = 0
    for line in re.sub(r"\\\n\s*", " ", block).splitlines():
        words = line.split()
        if not words or words[0].startswith("#"):
            continue
        current.append(line)
        depth += words[0] in ("for", "while", "until", "if")
        depth -= words[-1] in ("done", "fi")
        if depth == 0:
            steps.append("\n".join(current))
            current = []
    assert depth == 0 and not current, f"unbalanced compound command in:\n{block}"
    return steps


def flag(args: str, *names: str) -> str | None:
    """The value of the last of ``names`` in ``args`` (``--name value`` or ``--name=value``)."""
    found = re.findall(rf"(?<!\S)(?:{'|'.join(map(re.escape, names))})(?:=|\s+)(\S+)", args)
    return found[-1] if found else None


def config_file(args: str, cwd: Path, command: str) -> dict:
    """The ``-f`` file's options for ``command``: its top level, under its section."""
    path = flag(args, "-f", "--config")
    if path is None:
        return {}
    data = yaml.safe_load((cwd / path).read_text()) or {}
    return {**data, **(data.get(command) or {})}


def small_options(sub: str, args: str, background: bool, cwd: Path, name: str) -> dict[str, str]:
    """The options that give ``tritontune SUB ARGS`` its tiny budget (see the module's doc)."""
    options = dict(SMALL.get(sub, {}))
    if sub != "search":
        return options
    config = config_file(args, cwd, "search")
    if flag(args, "--workload") or config.get("workload"):
        options = {k: v for k, v in options.items() if k not in NOT_WITH_WORKLOAD}
        return {**options, "--max-load": WORKLOAD_MAX_LOAD}
    if background:
        options["--trials"] = "2"
    if not flag(args, "--study") and "study" not in config:
        model = flag(args, "-m", "--model") or config["model"]
        slo = flag(args, "--slo-p99") or config["slo_p99"]
        load = flag(args, "--load") or config.get("load", "concurrency")
        options["--study"] = default_study_name(model, parse_duration(slo), load)
    repository = flag(args, "-r", "--model-repository") or config.get("model_repository")
    model = str(flag(args, "-m", "--model") or config.get("model"))
    space_file = flag(args, "--space")
    space = yaml.safe_load((cwd / space_file).read_text()) if space_file else config.get("space")
    space = dict(space or {})
    if repository and is_pipeline(read_config(cwd / str(repository) / model / "config.pbtxt")):
        # a pipeline's space is keyed by model: no precision variants for its ONNX models
        for source in load_pipeline(cwd / str(repository), model).models:
            if source.backend == ONNX_BACKEND:
                space[source.name] = {**space.get(source.name, {}), "precision": ["fp32"]}
    else:
        space["precision"] = ["fp32"]
    small_space = cwd / f"space-{name}.yaml"
    small_space.write_text(yaml.safe_dump(space))
    options["--space"] = str(small_space)
    return options


def with_small_budget(step: str, cwd: Path, number: int) -> str:
    """``step`` with each ``tritontune`` command given its options from :func:`small_options`,
    right after its subcommand (the same options given later in the command are removed)."""
    count = iter(range(1000))

    def rewrite(match: re.Match) -> str:
        sub, args, rest = match["sub"], match["args"], match["rest"]
        background = re.search(r"(?<![>&])&(?!&)", rest) is not None
        options = small_options(sub, args, background, cwd, f"{number}-{next(count)}")
        for name in options:
            args = re.sub(rf"(?<!\S){re.escape(name)}(?:=|\s+)\S+", "", args)
        given = " ".join(f"{name} {value}" for name, value in options.items())
        return f"{match['exe']} {sub} {given}{args}{rest}"

    return COMMAND.sub(rewrite, step)


def written_by(rest: str, cwd: Path) -> list[Path]:
    """The files a command's stdout went to (``> FILE``, shell variables matched as ``*``)."""
    target = re.search(r"(?<![0-9&])>\s*(\S+)", rest)
    if target is None:
        return []
    pattern = re.sub(r"\$\{?\w+\}?", "*", target.group(1))
    return sorted(cwd.glob(pattern))


def expect_step(step: str, output: str, cwd: Path) -> Iterator[str]:
    """What each ``tritontune`` command of a step failed to show (nothing when all went well)."""
    for match in COMMAND.finditer(step):
        sub, rest = match["sub"], match["rest"]
        logs = written_by(rest, cwd)
        texts = [p.read_text() for p in logs] if logs else [output]
        if re.search(r"(?<![0-9&])>", rest) and not logs:
            yield f"{sub}: wrote no {rest!r}"
        for text in texts:
            if sub == "search" and "winner:" not in text:
                yield f"search named no winner:\n{text[-3000:]}"
            elif sub == "status" and not re.search(r"\d+/\d+ trials done", text):
                yield f"status gave no trial count:\n{text[-3000:]}"
            elif sub == "export":
                out = re.search(r"exported to (\S+)", text)
                records = list((cwd / out.group(1)).glob("*/tritontune.lock.yaml")) if out else []
                if not records:
                    yield f"export wrote no model with its tuning record:\n{text[-3000:]}"
            elif sub == "check" and "check passed" not in text:
                yield f"check did not pass:\n{text[-3000:]}"
            elif sub == "report":
                out = re.search(r"report: (\S+)", text)
                if not (out and "<html" in (cwd / out.group(1)).read_text().lower()):
                    yield f"report wrote no HTML page:\n{text[-3000:]}"
            elif sub == "profile" and "infer/s" not in text:
                yield f"profile measured nothing:\n{text[-3000:]}"


def files_under(directory: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in directory.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }


def run_block(script: str, cwd: Path, env: dict[str, str]) -> tuple[int, str]:
    """Run ``script`` in its own process group; on a timeout, interrupt it (tritontune stops its
    servers on SIGINT), then kill what is left."""
    proc = subprocess.Popen(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            output, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            output, _ = proc.communicate()
        pytest.fail(f"the block ran over {TIMEOUT_S} s:\n{output[-5000:]}")
    return proc.returncode, output


def example_param(readme: Path):
    text = readme.read_text()
    marks = [mark for target, (_, m) in MAKE_TARGETS.items() if f"make {target}" in text for mark in m]
    return pytest.param(
        readme, id=str(readme.parent.relative_to(EXAMPLES)), marks=[pytest.mark.slow, *marks]
    )


@pytest.mark.functional
@pytest.mark.parametrize("readme", [example_param(p) for p in READMES])
def test_example_runs_as_written(
    readme: Path, tmp_path: Path, own_servers: Path, request: pytest.FixtureRequest
):
    steps = steps_of(run_it_block(readme))
    work = tmp_path / "work"
    (work / ".venv").mkdir(parents=True)
    (work / "examples").symlink_to(EXAMPLES)
    (work / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    assert (work / ".venv" / "bin" / "tritontune").exists()

    run: list[tuple[int, str]] = []
    for number, step in enumerate(steps):
        words = step.split()
        if words[0] == "make":
            assert words[1:] and all(t in MAKE_TARGETS for t in words[1:]), f"unknown make: {step}"
            for target in words[1:]:
                request.getfixturevalue(MAKE_TARGETS[target][0])
            continue
        run.append((number, with_small_budget(step, work, number)))
    assert any("tritontune" in step for _, step in run), f"{readme}: its block runs no tritontune"

    before = files_under(EXAMPLES)
    script = "".join(f"echo '@@step {number}'\n{step}\n" for number, step in run)
    env = {**os.environ, "TRITONTUNE_STORAGE": f"sqlite:///{work / 'examples.db'}", "COLUMNS": "200"}
    code, output = run_block(script, work, env)

    parts = re.split(r"^@@step (\d+)\n", output, flags=re.M)
    outputs = {int(number): text for number, text in zip(parts[1::2], parts[2::2], strict=True)}
    if code != 0:
        failed = max(outputs, default=run[0][0])
        command, said = dict(run).get(failed, "?"), outputs.get(failed, output)
        pytest.fail(f"step {failed} exited {code}:\n{command}\n--- its output ---\n{said[-5000:]}")
    assert set(outputs) == {number for number, _ in run}, output[-3000:]
    problems = [f"step {n}: {p}" for n, step in run for p in expect_step(step, outputs[n], work)]
    assert not problems, "\n\n".join(problems)
    assert files_under(EXAMPLES) == before, "the block wrote into examples/"
    assert tritonserver_processes(own_servers) == [], "a server was left running"


def test_the_index_links_every_example():
    """``examples/README.md`` links each example's README, and nothing that is not there."""
    links = set(re.findall(r"\]\(([^)#]+)\)", INDEX.read_text()))
    assert {str(p.relative_to(EXAMPLES)) for p in READMES} <= links
    assert all((EXAMPLES / link).exists() for link in links), links
