"""Where a session's server log goes: kept beside the results when something failed, always with
--server-log, otherwise removed with the working files (no server is started here)."""

from pathlib import Path

from tritontune.server.factory import LaunchSettings
from tritontune.serving.opening import open_session
from tritontune.serving.server import failure_log_path


def test_the_log_is_kept_when_something_failed(example_repository: Path, tmp_path: Path):
    kept = failure_log_path(tmp_path / "study.results.json", "study")
    assert kept == tmp_path / "study.tritonserver.log"
    kept.write_text("an earlier run's log\n")
    session = open_session(example_repository, "mlp", failure_log=kept)
    session.server.log_path.write_text("E0101 model failed\n")
    session.server.keep_log_because("2 trial(s) failed")
    session.server.close()
    assert kept.read_text() == "an earlier run's log\nE0101 model failed\n"  # appended, nothing lost
    assert session.server.kept_log == kept and session.server.kept_log_reason == "2 trial(s) failed"
    assert not session.server.work_dir.exists()


def test_a_clean_run_removes_the_log(example_repository: Path, tmp_path: Path):
    kept = tmp_path / "mlp-profile.tritonserver.log"
    session = open_session(example_repository, "mlp", failure_log=kept)
    session.server.log_path.write_text("I0101 all fine\n")
    session.server.close()
    assert not kept.exists() and session.server.kept_log is None


def test_a_restart_counts_as_a_failure(example_repository: Path, tmp_path: Path):
    kept = tmp_path / "kept.log"
    session = open_session(example_repository, "mlp", failure_log=kept)
    session.server.log_path.write_text("E0101 server died\n")
    session.server.restarts = 1
    session.server.close()
    assert kept.is_file() and session.server.kept_log_reason == "the server was restarted 1x"


def test_server_log_is_always_kept(example_repository: Path, tmp_path: Path):
    mine = tmp_path / "logs" / "server.log"
    session = open_session(
        example_repository, "mlp", launch=LaunchSettings(server_log=mine), failure_log=tmp_path / "x"
    )
    assert session.server.log_path == mine and session.server.launcher.log_path == mine
    session.server.close()
    assert session.server.kept_log == mine and session.server.kept_log_reason == "--server-log"
    assert not (tmp_path / "x").exists()  # one copy: the user's file
