"""``tritontune import-ma``: a Model Analyzer profile config in, a tritontune config file out that
``search -f`` and ``profile -f`` accept as written; one line per note, errors one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

import tritontune.cli._profile as profile_cli
import tritontune.cli._search as search_cli
from tritontune.cli import app
from tritontune.errors import InputError
from tritontune.search.space import SearchSpace, SpaceSource, apply_space

runner = CliRunner()

#: The kind of file Model Analyzer's docs show (config_search.md's Optuna example), for the
#: bundled example model.
MA_CONFIG = """
model_repository: {repository}

run_config_search_mode: optuna
run_config_search_max_instance_count: 4
run_config_search_min_concurrency: 8
run_config_search_max_concurrency: 256
optuna_max_trials: 30
export_path: ./results
override_output_model_repository: true

profile_models:
  mlp:
    constraints:
      perf_latency_p99:
        max: 50
    objectives:
      perf_throughput: 10
      perf_latency_p99: 5
    model_config_parameters:
      max_batch_size: [8, 16, 32, 64]
      dynamic_batching:
        max_queue_delay_microseconds: [100, 500, 2000]
      instance_group:
        - kind: KIND_CPU
          count: [1, 2]
    parameters:
      batch_sizes: 1
      concurrency: 1,4,16
    perf_analyzer_flags:
      percentile: 95
      input-data: {inputs}

triton_server_flags:
  log_verbose: 1
  strict_model_config: false
"""


def run_cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


@pytest.fixture
def ma_config(tmp_path: Path, example_repository: Path) -> Path:
    inputs = tmp_path / "inputs.json"
    inputs.write_text('{"data": [{"INPUT": [' + ", ".join(["0.5"] * 256) + "]}]}")
    path = tmp_path / "ma.yaml"
    path.write_text(MA_CONFIG.format(repository=example_repository, inputs=inputs))
    return path


@pytest.fixture
def stop_before_the_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """``search`` and ``profile`` stop where they would start a server: every option (the
    config file's included) has been read and checked by then."""

    def open_session(*args, **kwargs):
        raise InputError("stopped before the server")

    monkeypatch.setattr(search_cli, "open_session", open_session)
    monkeypatch.setattr(profile_cli, "open_session", open_session)


def assert_tritontune_reads(written: Path) -> None:
    """``written`` as ``search -f`` and ``profile -f`` read it, and its space as the search does."""
    for command in ("search", "profile"):
        result = run_cli(command, "-f", str(written))
        assert result.output.strip() == "error: stopped before the server", (command, result.output)
    space = yaml.safe_load(written.read_text())["search"].get("space")
    if space:
        apply_space(SpaceSource(f"{written}: search.space", inline=space), SearchSpace())


def test_a_model_analyzer_config_becomes_a_file_search_reads(
    tmp_path: Path, ma_config: Path, example_repository: Path, stop_before_the_server: None
):
    out = tmp_path / "tritontune.yaml"
    result = run_cli("import-ma", str(ma_config), "--out", str(out))
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert lines[0] == f"wrote {out} (model mlp, from {ma_config})"
    assert lines[-1] == f"next: tritontune search -f {out}"
    notes = lines[1:-1]
    assert all(line.startswith("note: ") for line in notes)
    assert [line.split(":")[1].strip() for line in notes] == [
        "triton_server_flags.strict_model_config",
        "profile_models.mlp.objectives",  # perf_throughput's weight
        "profile_models.mlp.objectives",  # perf_latency_p99
        "profile_models.mlp.parameters.concurrency",
        "profile_models.mlp.perf_analyzer_flags.percentile",
        "run_config_search_max_instance_count",
        "run_config_search_min_concurrency",
        "export_path",
        "override_output_model_repository",
    ]
    written = yaml.safe_load(out.read_text())
    assert written == {
        "model_repository": str(example_repository),
        "model": "mlp",
        "server_arg": ["--log-verbose=1"],
        "batch_size": 1,
        "input_data": str(tmp_path / "inputs.json"),
        "search": {
            "slo_p99": "50ms",
            "max_load": 256,
            "trials": 30,
            "space": {
                "max_batch_size": [8, 16, 32, 64],
                "dynamic_batching": True,
                "max_queue_delay": ["100us", "500us", "2000us"],
                "instance_count": [1, 2],
                "instance_kind": "cpu",
            },
        },
        "profile": {"concurrency": [1, 4, 16]},
    }
    assert_tritontune_reads(out)


@pytest.mark.parametrize(
    "extra",
    [
        "triton_launch_mode: docker\ntriton_docker_image: nvcr.io/nvidia/tritonserver:24.10-py3\n"
        "gpus: all\ntriton_docker_shm_size: 2g\n",
        "triton_launch_mode: remote\nclient_protocol: http\ntriton_http_endpoint: 10.0.0.5:8000\n"
        "perf_analyzer_flags:\n  ssl-https-ca-certificates-file: {ca}\n",
        "triton_launch_mode: c_api\nrequest_rate: [100, 200]\nbatch_sizes: 4\n"
        "perf_analyzer_flags:\n  measurement-interval: 500\n",
    ],
    ids=["docker", "remote", "c_api"],
)
def test_each_launch_mode_is_read_by_search(
    tmp_path: Path, example_repository: Path, stop_before_the_server: None, extra: str
):
    ca = tmp_path / "ca.pem"
    ca.write_text("not checked before the server")
    ma = tmp_path / "ma.yaml"
    ma.write_text(
        f"model_repository: {example_repository}\nprofile_models: mlp\nlatency_budget: 20\n"
        + extra.format(ca=ca)
    )
    out = tmp_path / "tritontune.yaml"
    result = run_cli("import-ma", str(ma), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert_tritontune_reads(out)


def test_without_a_latency_constraint_the_next_command_asks_for_the_slo(
    tmp_path: Path, example_repository: Path
):
    ma = tmp_path / "ma.yaml"
    ma.write_text(f"model_repository: {example_repository}\nprofile_models: [mlp]\n")
    result = run_cli("import-ma", str(ma), "--out", str(tmp_path / "t.yaml"))
    assert result.exit_code == 0
    assert result.output.strip().splitlines()[-1] == (
        f"next: tritontune search -f {tmp_path / 't.yaml'} --slo-p99 SLO"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "profile_models:\n  mlp:\n    constraints: {perf_latency_p99: {max: soon}}\n",
            "ma.yaml: profile_models.mlp.constraints.perf_latency_p99.max: 'soon' is not a number "
            "of milliseconds",
        ),
        ("model_repository: repo\n", "ma.yaml: profile_models: missing; expected the model(s)"),
        ("profile_models: [mlp\n", "ma.yaml:2: not valid YAML"),
        ("- a\n- b\n", "ma.yaml: expected a Model Analyzer profile config"),
    ],
)
def test_a_bad_file_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, message: str
):
    monkeypatch.chdir(tmp_path)
    Path("ma.yaml").write_text(text)
    result = run_cli("import-ma", "ma.yaml")
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.output
    assert not Path("tritontune.yaml").exists()


def test_a_missing_file_is_one_line(tmp_path: Path):
    result = run_cli("import-ma", str(tmp_path / "absent.yaml"))
    assert result.exit_code == 2
    assert result.output.strip() == (
        f"error: {tmp_path / 'absent.yaml'}: cannot read the Model Analyzer config (No such file or "
        "directory)"
    )


def test_an_existing_file_is_overwritten_only_with_force(tmp_path: Path, ma_config: Path):
    out = tmp_path / "tritontune.yaml"
    out.write_text("model: mine\n")
    result = run_cli("import-ma", str(ma_config), "--out", str(out))
    assert result.exit_code == 2
    assert result.output.strip() == f"error: --out {out}: exists; pass --force to overwrite it"
    assert out.read_text() == "model: mine\n"
    result = run_cli("import-ma", str(ma_config), "--out", str(out), "--force")
    assert result.exit_code == 0
    assert yaml.safe_load(out.read_text())["model"] == "mlp"
    result = run_cli("import-ma", str(ma_config), "--out", str(ma_config), "--force")
    assert result.exit_code == 2 and "is the Model Analyzer config itself" in result.output


def test_one_of_several_models(tmp_path: Path):
    ma = tmp_path / "ma.yaml"
    ma.write_text("model_repository: repo\nprofile_models: a, b\n")
    result = run_cli("import-ma", str(ma), "--out", str(tmp_path / "t.yaml"), "--model", "b")
    assert result.exit_code == 0
    assert yaml.safe_load((tmp_path / "t.yaml").read_text())["model"] == "b"
    assert "note: profile_models: 2 models (a, b)" in result.output
