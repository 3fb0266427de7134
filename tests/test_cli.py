"""The CLI: bad input gets one clear line and a non-zero exit; a real profile run end to end."""

import csv
import importlib.metadata
import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.conftest import tritonserver_processes
from tritontune.cli import app

runner = CliRunner()


def run_cli(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_version_comes_from_the_package_metadata():
    result = run_cli("--version")
    assert result.exit_code == 0
    assert result.output == f"tritontune {importlib.metadata.version('tritontune')}\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-queue-delay", "soon"], "--max-queue-delay: 'soon' is not a duration"),
        (["--max-queue-delay", "2"], "--max-queue-delay: '2' has no unit"),
        (["--window", "1m"], "--window: '1m' is ambiguous"),
        (["--concurrency", "1,x"], "--concurrency: 'x' is not a whole number"),
        (["--request-rate", "-5"], "must be a positive"),
        (["--concurrency", "2", "--request-rate", "5"], "not both"),
        (["--param", "novalue"], "expected KEY=VALUE"),
        (["--launch", "moon"], "--launch: 'moon' is not one of"),
        (["--protocol", "ftp"], "--protocol: 'ftp' is not one of grpc, http"),
        (["--header", "novalue"], "--header: 'novalue' is not KEY=VALUE"),
        (["--ssl"], "--ssl/--ssl-ca/--ssl-cert/--ssl-key are for --launch remote"),
        (["--launch", "remote", "--url", "ftp://h"], "--url: the scheme ftp:// is not supported"),
        (
            ["--launch", "remote", "--url", "grpc://h", "--protocol", "http"],
            "--url: grpc:// contradicts --protocol http",
        ),
    ],
)
def test_bad_options(example_repository: Path, args, message):
    result = run_cli("profile", "-r", str(example_repository), "-m", "mlp", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert "Traceback" not in result.output


def test_missing_repository_and_model(example_repository: Path, tmp_path: Path):
    result = run_cli("profile", "-r", str(tmp_path / "none"), "-m", "mlp")
    assert result.exit_code == 2 and "model repository not found" in result.output
    result = run_cli("profile", "-r", str(example_repository), "-m", "resnet")
    assert result.exit_code == 2 and "model 'resnet' not found" in result.output


def test_malformed_config_names_file_and_line(repo_copy: Path):
    (repo_copy / "mlp" / "config.pbtxt").write_text('name: "mlp"\nmax_batch: 4\n')
    result = run_cli("profile", "-r", str(repo_copy), "-m", "mlp")
    assert result.exit_code == 2
    assert f"{repo_copy / 'mlp' / 'config.pbtxt'}:2:" in result.output


def test_remote_without_a_server():
    result = run_cli("profile", "-r", "examples/model_repository", "-m", "mlp", "--launch", "remote")
    assert result.exit_code == 2 and "--url is required" in result.output


def test_server_url_from_the_environment_and_the_flag_over_it():
    args = ["profile", "-r", "examples/model_repository", "-m", "mlp", "--launch", "remote"]
    env = {"TRITONTUNE_URL": "https://127.0.0.1:9"}
    result = runner.invoke(app, args, env=env)
    assert result.exit_code == 2
    assert "no ready Triton server answers at https://127.0.0.1:9" in result.output
    result = runner.invoke(app, [*args, "--url", "grpc://127.0.0.1:9"], env=env)
    assert result.exit_code == 2
    assert "no ready Triton server answers at grpc://127.0.0.1:9" in result.output


@pytest.mark.functional
@pytest.mark.integration
def test_profile_end_to_end(example_repository: Path, tmp_path: Path):
    out, table = tmp_path / "result.json", tmp_path / "levels.csv"
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp",
        "--max-queue-delay", "2ms", "--preferred-batch-size", "4,8", "--instances", "1",
        "--concurrency", "1,8", "--warmup", "0.3s", "--window", "0.4s", "--json", str(out),
        "--csv", str(table), "--load-processes", "2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "concurrency 8" in result.output
    assert "load: asyncio, 2 load processes" in result.output
    assert "through the Python backend" in result.output
    data = json.loads(out.read_text())
    assert data["config"]["max_queue_delay_us"] == 2000
    assert data["config"]["preferred_batch_sizes"] == [4, 8]
    assert 'backend: "onnxruntime"' in data["config_pbtxt"]  # the user's backend is kept
    levels = data["levels"]
    assert [lv["load"]["value"] for lv in levels] == [1, 8]
    for level in levels:
        assert level["errors"] == {}
        assert level["latency_ms"]["p99"] >= level["latency_ms"]["p50"] > 0
        assert level["client"]["processes"] == 2 and level["engine"] == "asyncio"
    assert levels[1]["server"]["avg_batch_size"] > 1
    with open(table, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["Concurrency"] for r in rows] == ["1", "8"]  # one row per level, as measured
    for row, level in zip(rows, levels, strict=True):
        assert row["Model"] == "mlp" and row["Instance Group"] == "1:CPU"
        assert float(row["Throughput (infer/sec)"]) == pytest.approx(level["throughput_infer_per_s"])
        assert float(row["p99 Latency (ms)"]) == pytest.approx(level["latency_ms"]["p99"], abs=1e-3)


@pytest.mark.functional
@pytest.mark.integration
def test_profile_with_perf_analyzer_as_the_load_engine(example_repository: Path, tmp_path: Path):
    out = tmp_path / "result.json"
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--max-queue-delay", "2ms",
        "--concurrency", "2", "--warmup", "0.3s", "--window", "0.4s", "--json", str(out),
        "--load-engine", "perf_analyzer",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "load: perf_analyzer" in result.output
    (level,) = json.loads(out.read_text())["levels"]
    assert level["engine"] == "perf_analyzer" and level["errors"] == {}
    assert level["throughput_infer_per_s"] > 0


@pytest.mark.functional
@pytest.mark.integration
def test_profile_a_workload_measures_each_class(example_repository: Path, tmp_path: Path):
    out = tmp_path / "workload.json"
    example = Path(__file__).parent.parent / "examples" / "workloads" / "interactive-batch.yaml"
    # The example's classes with the interactive p99 at 250 ms instead of 20 ms: what is under
    # test is that each class is measured and judged, and the p99 of ~100 interactive requests is
    # their second slowest: on this 2-core machine one 13-24 ms stall (p50 3 ms) in a run of ~5
    # missed 20 ms, in the old code and the new alike (28 runs each).
    text = example.read_text(encoding="utf-8")
    assert "slo_p99: 20ms" in text
    workload = tmp_path / "interactive-batch.yaml"
    workload.write_text(text.replace("slo_p99: 20ms", "slo_p99: 250ms"), encoding="utf-8")
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--max-queue-delay", "2ms",
        "--workload", str(workload), "--max-queue-size", "64", "--request-rate", "100",
        "--warmup", "0.5s", "--window", "0.5s", "--json", str(out),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "every class met its objective" in result.output
    data = json.loads(out.read_text())
    assert data["config"]["priority_levels"] == 2 and data["config"]["default_priority_level"] == 2
    assert data["config"]["queue_policies"]["2"]["max_queue_size"] == 64
    assert data["config"]["queue_policies"]["2"]["timeout_us"] == 2_000_000
    (level,) = data["levels"]
    classes = {c["name"]: c for c in level["classes"]}
    assert set(classes) == {"interactive", "batch"}
    assert classes["batch"]["batch_size"] == 8
    # 30 % / 70 % of 100 req/s, Poisson over a 1.5 s span: wide bounds
    assert 10 < classes["interactive"]["offered_rate_per_s"] < 60
    assert 40 < classes["batch"]["offered_rate_per_s"] < 110
    assert level["meets_objectives"] is True


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("classes: []\n", "classes: expected a non-empty list"),
        ("classes:\n  - {name: a, share: 1, slo_p99: 50m}\n", "classes[0] (a): slo_p99: '50m'"),
        ("classes:\n  - {name: a, share: 1, priority: -1}\n", "classes[0] (a): priority"),
        ("classes:\n  - {name: a, share: 1, colour: red}\n", "unknown field 'colour'"),
    ],
)
def test_bad_workload_files_are_one_line(example_repository: Path, tmp_path: Path, text, message):
    path = tmp_path / "traffic.yaml"
    path.write_text(text)
    result = run_cli("profile", "-r", str(example_repository), "-m", "mlp", "--workload", str(path))
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: "), result.output
    assert message in lines[0]


@pytest.mark.functional
@pytest.mark.integration
def test_impossible_variant_is_refused_before_loading(example_repository: Path):
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--kind", "gpu",
        "--concurrency", "1",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "instance_group[0].kind: KIND_GPU but the server has no GPU" in result.output


@pytest.mark.functional
@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_stops_the_server(example_repository: Path, signum: int, own_servers: Path):
    before = set(tritonserver_processes(own_servers))
    proc = subprocess.Popen(
        [sys.executable, "-m", "tritontune", "profile", "-r", str(example_repository),
         "-m", "mlp", "--concurrency", "1", "--warmup", "30s"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (set(tritonserver_processes(own_servers)) - before):
        time.sleep(0.2)
    assert set(tritonserver_processes(own_servers)) - before, "tritonserver never started"
    time.sleep(2.0)  # model loaded, load running
    proc.send_signal(signum)
    output, _ = proc.communicate(timeout=60)
    assert proc.returncode == 130, output
    assert "interrupted" in output and "Traceback" not in output
    assert set(tritonserver_processes(own_servers)) - before == set()


@pytest.mark.functional
@pytest.mark.integration
def test_variant_that_breaks_the_onnx_io_is_refused(example_repository: Path):
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--max-batch-size", "0",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "but model.onnx has [-1, 256]" in result.output


@pytest.mark.functional
@pytest.mark.integration
def test_load_failure_shows_tritons_error_line(example_repository: Path):
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp",
        "--param", "intra_op_thread_count=many", "--concurrency", "1",
    )  # fmt: skip
    assert result.exit_code == 2
    error = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(error) == 1
    assert "model 'mlp' failed to load" in error[0]
    assert "invalid literal for int()" in error[0]
    assert "At:" not in result.output


def test_server_args_tritontune_owns_are_one_line_errors(example_repository: Path):
    for command in (["profile"], ["search", "--slo-p99", "50ms"]):
        result = run_cli(
            *command, "-r", str(example_repository), "-m", "mlp", "--server-arg", "--grpc-port=1"
        )
        assert result.exit_code == 2, result.output
        assert "--server-arg --grpc-port=1: --grpc-port is set by tritontune" in result.output
        assert "Traceback" not in result.output
    result = run_cli("check", str(example_repository), "--server-arg=--metrics-port=1")
    assert result.exit_code == 2 and "--metrics-port is set by tritontune" in result.output
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--launch", "remote",
        "--url", "127.0.0.1:1", "--server-arg=--log-verbose=1",
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--server-arg: the server at --url is not tritontune's to start" in result.output


@pytest.mark.functional
@pytest.mark.integration
def test_server_args_reach_the_server_and_server_log_keeps_its_log(
    example_repository: Path, tmp_path: Path
):
    log = tmp_path / "server.log"
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--concurrency", "1",
        "--warmup", "0.2s", "--window", "0.2s", "--max-windows", "3",
        "--server-arg=--log-verbose=1", "--server-arg", "--pinned-memory-pool-byte-size=0",
        "--server-log", str(log),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"tritonserver log: {log} (--server-log)" in result.output
    text = log.read_text()
    assert "infer_handler.cc" in text  # per-request lines: only logged at --log-verbose=1
    assert re.search(r"pinned_memory_pool_byte_size\s+\| 0\s", text)  # the server's own settings


@pytest.mark.functional
@pytest.mark.integration
def test_a_failed_run_keeps_the_server_log_beside_its_results(example_repository: Path, tmp_path: Path):
    result = run_cli(
        "profile", "-r", str(example_repository), "-m", "mlp", "--concurrency", "1",
        "--param", "intra_op_thread_count=many", "--json", str(tmp_path / "result.json"),
    )  # fmt: skip
    assert result.exit_code == 2
    kept = tmp_path / "mlp-profile.tritonserver.log"
    assert f"tritonserver log: {kept} (model 'mlp' failed to load" in " ".join(result.output.split())
    assert "invalid literal for int()" in kept.read_text()
