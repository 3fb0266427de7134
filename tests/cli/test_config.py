"""``-f/--config``: one YAML file for every command's options; flags > file > environment >
defaults; bad keys and values are one line naming the file and the key."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritontune.cli import app

runner = CliRunner()
COMMANDS = ("search", "profile", "check", "export", "report", "status")


def run_cli(*args: str, env: dict[str, str] | None = None):
    return runner.invoke(app, list(args), env=env, catch_exceptions=False)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "tritontune.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_takes_a_config_file(command: str):
    result = run_cli(command, "--help")
    assert result.exit_code == 0 and "--config" in result.output


def test_storage_precedence_is_flag_then_file_then_environment_then_default(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    env = {"TRITONTUNE_STORAGE": f"sqlite:///{tmp_path}/env.db"}
    config = write(tmp_path, f"storage: sqlite:///{tmp_path}/file.db\n")
    flag = f"sqlite:///{tmp_path}/flag.db"

    def tried(*args: str, env: dict[str, str] | None = None) -> str:
        result = run_cli("status", "--study", "s", *args, env=env or {"TRITONTUNE_STORAGE": ""})
        assert result.exit_code == 2, result.output
        return result.output

    assert "--storage sqlite:///tritontune.db: no such file" in tried()  # the default
    assert "env.db: no such file" in tried(env=env)
    assert "file.db: no such file" in tried("-f", str(config), env=env)
    assert "flag.db: no such file" in tried("-f", str(config), "--storage", flag, env=env)


def test_a_command_section_wins_over_the_top_level(tmp_path: Path):
    config = write(
        tmp_path,
        f"storage: sqlite:///{tmp_path}/top.db\nstudy: s\n"
        f"status:\n  storage: sqlite:///{tmp_path}/status.db\n"
        "report:\n  out: r.html\n",  # another command's section is checked, not used
    )
    result = run_cli("status", "--config", str(config))
    assert result.exit_code == 2 and "status.db: no such file" in result.output


def test_values_from_the_file_are_parsed_like_the_flags(tmp_path: Path, example_repository: Path):
    config = write(
        tmp_path,
        f"model_repository: {example_repository}\nmodel: mlp\n"
        "search:\n  slo_p99: 50\n",  # a duration without its unit, as on the command line
    )
    result = run_cli("search", "-f", str(config))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {config}: search.slo_p99: --slo-p99: '50' has no unit; expected one of us, ms, "
        "s, min, h, e.g. 50ms or 50s"
    )
    # the same value given as a flag is the flag's error, not the file's
    result = run_cli("search", "-f", str(config), "--slo-p99", "40")
    assert result.output.startswith("error: --slo-p99: '40' has no unit")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("modle: mlp\n", "modle: unknown option for the top level (options shared by commands); "
         "did you mean model?"),
        ("serch:\n  trials: 3\n", "serch: unknown option for the top level (options shared by "
         "commands); did you mean search?"),
        ("search:\n  slo-p99: 50ms\n", "search.slo-p99: unknown option for search section; write "
         "slo_p99 (keys are flag names with _ for -)"),
        ("report:\n  trials: 3\n", "report.trials: unknown option for report section"),
        ("status: 3\n", "status: expected a mapping of status's options to values"),
        ("storage: {a: 1}\n", "storage: expected a single value, not a mapping"),
        ("- a\n- list\n", "expected a mapping of option names"),
        ("storage: [a\n", "not valid YAML"),
    ],
)  # fmt: skip
def test_bad_config_files_are_one_line_naming_the_file_and_key(tmp_path: Path, text: str, message: str):
    config = write(tmp_path, text)
    result = run_cli("status", "-f", str(config), "--study", "s")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {config}"), result.output
    assert message in lines[0]


def test_the_workload_is_a_file_path(tmp_path: Path, example_repository: Path):
    config = write(tmp_path, "profile:\n  workload:\n    classes: []\n")
    args = ["--model-repository", str(example_repository), "--model", "mlp"]
    result = run_cli("profile", "-f", str(config), *args)
    assert result.exit_code == 2
    assert f"{config}: profile.workload: expected the path of a workload file" in result.output
    config = write(tmp_path, f"profile:\n  workload: {tmp_path / 'absent.yaml'}\n")
    result = run_cli("profile", "-f", str(config), *args)
    assert result.exit_code == 2 and "cannot read the workload file" in result.output


def test_a_missing_config_file(tmp_path: Path):
    result = run_cli("status", "-f", str(tmp_path / "absent.yaml"), "--study", "s")
    assert result.exit_code == 2 and "cannot read the config file" in result.output


def test_values_are_checked_by_their_options_type(tmp_path: Path):
    config = write(tmp_path, "check:\n  rounds: 0\n")
    result = run_cli("check", "-f", str(config), str(tmp_path))
    assert result.exit_code == 2
    assert result.output.startswith(f"error: {config}: check.rounds: Invalid value for '--rounds'")


def test_an_inline_space_and_yaml_lists(tmp_path: Path, example_repository: Path, monkeypatch):
    """``space:`` reaches search as a space source naming the file and key; a YAML list is the
    flag's comma list; ``check``'s argument may come from the file too."""
    import tritontune.cli._search as search_cli
    from tritontune.search.space import SpaceSource

    received = {}

    def open_session(*args, **kwargs):  # stop before a server is started
        raise search_cli.InputError("stopped here")

    def kinds(source: SpaceSource) -> dict:
        received["space"] = source
        return {}

    monkeypatch.setattr(search_cli, "open_session", open_session)
    monkeypatch.setattr(search_cli, "space_file_output_kinds", kinds)
    config = write(
        tmp_path,
        f"model_repository: {example_repository}\nmodel: mlp\n"
        "search:\n  slo_p99: 50ms\n  space:\n    max_batch_size: [8, 16]\n",
    )
    result = run_cli("search", "-f", str(config))
    assert "stopped here" in result.output
    assert received["space"] == SpaceSource(
        f"{config}: search.space", inline={"max_batch_size": [8, 16]}
    )
    space_file = tmp_path / "space.yaml"
    space_file.write_text("max_batch_size: [4]\n")
    run_cli("search", "-f", str(config), "--space", str(space_file))  # the flag replaces it
    assert received["space"] == SpaceSource.file(space_file)

    config = write(
        tmp_path,
        f"model_repository: {example_repository}\nmodel: mlp\nprofile:\n  concurrency: [1, x]\n",
    )
    result = run_cli("profile", "-f", str(config))
    assert result.exit_code == 2
    assert f"{config}: profile.concurrency: --concurrency: 'x' is not a whole number" in result.output
    config = write(tmp_path, f"check:\n  repository: {tmp_path / 'none'}\n")
    result = run_cli("check", "-f", str(config))
    assert result.exit_code == 2 and "none: model repository not found" in result.output


def test_the_example_config_file_is_valid(tmp_path: Path):
    example = Path(__file__).parents[2] / "examples" / "tritontune.yaml"
    for command in ("status", "report"):  # every section's keys are checked by any command
        result = run_cli(command, "-f", str(example), "--storage", f"sqlite:///{tmp_path}/none.db")
        assert result.output.startswith("error: --storage"), result.output


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("launch: bogus\n", "launch: --launch: 'bogus' is not one of local, docker, remote"),
        ("calibration: kl\n", "calibration: --calibration: 'kl' is not one of"),
        ("load_engine: locust\n", "load_engine: --load-engine: 'locust' is not one of"),
        ("load_processes: 0\n", "load_processes: --load-processes: expected a count of 1"),
    ],
)
def test_a_bad_value_of_a_shared_option_group_names_the_file_and_key(
    tmp_path: Path, example_repository: Path, text: str, message: str
):
    config = tmp_path / "tritontune.yaml"
    config.write_text(text)
    result = runner.invoke(
        app, ["profile", "-f", str(config), "-r", str(example_repository), "-m", "mlp"]
    )
    assert result.exit_code == 2, result.output
    assert f"{config}: {message}" in result.output
