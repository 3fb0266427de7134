"""TuningSession against the real server: crashes, bad variants, remote attach."""

import os
import signal
import time
from pathlib import Path

import pytest

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import ConfigError, InputError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.workload import Workload
from tritontune.server.factory import LaunchKind, LaunchSettings
from tritontune.session import Session, TuningSession

pytestmark = pytest.mark.integration

FAST = MeasureSettings(warmup_s=0.3, window_s=0.3, max_windows=4)


def test_server_crash_is_survived_with_a_restart(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    kept = tmp_path / "mlp.tritonserver.log"
    with TuningSession(source, settings=FAST, failure_log=kept) as session:
        session.load_variant(Variant(instance_count=1))
        os.kill(session.launcher.pid, signal.SIGSEGV)  # what the Python backend was seen to do
        time.sleep(0.5)
        measurement, restarts = session.measure_with_restart(LoadSpec.concurrency(2))
        assert restarts == 1
        assert measurement.error_count == 0 and measurement.latency.count > 0
        # the restarted server runs the same config
        assert session.client.model_config("mlp").instance_group[0].count == 1
    # the dead server's log and the new one's are kept, because the server died
    assert session.kept_log == kept and session.kept_log_reason == "the server was restarted 1x"
    assert kept.read_text().count("Started GRPCInferenceService") == 2


def test_invalid_variants_never_reach_the_server(example_repository: Path):
    source = load_model_source(example_repository, "mlp")
    with TuningSession(source, settings=FAST) as session:
        with pytest.raises(ConfigError, match="KIND_GPU but the server has no GPU"):
            session.load_variant(Variant(instance_kind="gpu"))
        with pytest.raises(ConfigError, match="preferred_batch_size: 128 is above"):
            session.load_variant(Variant(preferred_batch_sizes=(128,)))
        assert not session.client.is_model_ready("mlp")


def test_client_batch_above_max_batch_size(example_repository: Path):
    source = load_model_source(example_repository, "mlp")
    with (
        TuningSession(source, workload=Workload(batch_size=128)) as session,
        pytest.raises(InputError, match="--batch-size 128 exceeds max_batch_size 64"),
    ):
        session.load_variant(Variant())


def test_remote_session_leaves_the_server_as_found(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    with TuningSession(source, settings=FAST) as owner:  # plays "somebody else's server"
        with TuningSession(
            source,
            launch=LaunchSettings(LaunchKind.REMOTE, url=owner.info.grpc_url),
            settings=FAST,
        ) as remote:
            # the remote server only knows its own repository; its served config is used as is
            remote.served = owner.served
            remote.load_variant(Variant(instance_count=2))
            m = remote.measure(LoadSpec.concurrency(2))
            assert m.error_count == 0
        # the model was not loaded before tritontune came: it is unloaded again
        assert not owner.client.is_model_ready("mlp")
        owner.launcher.check_alive()


def test_the_fake_session_of_the_tests_is_a_session(example_repository: Path):
    """The jobs are tested with tests/fakes.py's session: it must offer what a session does."""
    from tests.fakes import FakeSession

    assert isinstance(FakeSession(load_model_source(example_repository, "mlp")), Session)
