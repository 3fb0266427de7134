"""tritontune/cli/_common.py: what every command prints the same way."""

from pathlib import Path

from tritontune.cli import _common


def test_a_kept_logs_reason_is_printed_as_written(capsys, tmp_path: Path):
    """A reason is an error's text: brackets in it (an install hint's extras) are not markup."""
    log = tmp_path / "run[1].tritonserver.log"
    _common.print_kept_log(log, "needs onnxruntime: pip install 'tritontune[cpu]'")
    printed = " ".join(capsys.readouterr().err.split())
    assert printed == f"tritonserver log: {log} (needs onnxruntime: pip install 'tritontune[cpu]')"
