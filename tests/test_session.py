"""TuningSession against the real server: crashes, bad variants, remote attach."""

import os
import signal
import time
from functools import partial
from pathlib import Path

import pytest

from tests.measuring import FAST
from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import ConfigError, InputError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.request_shape import RequestShape
from tritontune.server.factory import LaunchKind, LaunchSettings
from tritontune.serving.bench import Bench
from tritontune.serving.faults import with_restarts
from tritontune.serving.session import TuningSession

pytestmark = [pytest.mark.integration, pytest.mark.functional]


def test_server_crash_is_survived_with_a_restart(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    kept = tmp_path / "mlp.tritonserver.log"
    with TuningSession(source, settings=FAST, failure_log=kept) as session:
        session.load(Variant(instance_count=1))
        os.kill(session.server.launcher.pid, signal.SIGSEGV)  # what the Python backend was seen to do
        time.sleep(0.5)
        measure = partial(session.measure, LoadSpec.concurrency(2))
        measurement, restarts = with_restarts(session, measure, reload=True)
        assert restarts == 1
        assert measurement.error_count == 0 and measurement.latency.count > 0
        # the restarted server runs the same config
        assert session.server.client.model_config("mlp").instance_group[0].count == 1
    # the dead server's log and the new one's are kept, because the server died
    assert (
        session.server.kept_log == kept
        and session.server.kept_log_reason == "the server was restarted 1x"
    )
    assert kept.read_text().count("Started GRPCInferenceService") == 2


def test_invalid_variants_never_reach_the_server(example_repository: Path):
    source = load_model_source(example_repository, "mlp")
    with TuningSession(source, settings=FAST) as session:
        with pytest.raises(ConfigError, match="KIND_GPU but the server has no GPU"):
            session.load(Variant(instance_kind="gpu"))
        with pytest.raises(ConfigError, match="preferred_batch_size: 128 is above"):
            session.load(Variant(preferred_batch_sizes=(128,)))
        assert not session.server.client.is_model_ready("mlp")


def test_client_batch_above_max_batch_size(example_repository: Path):
    source = load_model_source(example_repository, "mlp")
    with (
        TuningSession(source, request_shape=RequestShape(batch_size=128)) as session,
        pytest.raises(InputError, match="--batch-size 128 exceeds max_batch_size 64"),
    ):
        session.load(Variant())


def test_remote_session_leaves_the_server_as_found(example_repository: Path, tmp_path: Path):
    source = load_model_source(example_repository, "mlp")
    with TuningSession(source, settings=FAST) as owner:  # plays "somebody else's server"
        with TuningSession(
            source,
            launch=LaunchSettings(LaunchKind.REMOTE, url=owner.info.grpc_url),
            settings=FAST,
        ) as remote:
            # the remote server only knows its own repository; its served config is used as is
            remote.served_models = owner.served_models
            remote.load(Variant(instance_count=2))
            m = remote.measure(LoadSpec.concurrency(2))
            assert m.error_count == 0
        # the model was not loaded before tritontune came: it is unloaded again
        assert not owner.server.client.is_model_ready("mlp")
        owner.server.launcher.check_alive()


def test_the_fake_session_of_the_tests_is_a_session(example_repository: Path):
    """The jobs are tested with tests/fakes.py's bench: it must offer what the protocol does."""
    from tests.fakes import FakeSession

    assert isinstance(FakeSession(load_model_source(example_repository, "mlp")), Bench)


def test_perf_analyzer_refuses_a_workload_saying_why(example_repository: Path, tmp_path: Path):
    from tritontune.measure.load_settings import LoadSettings
    from tritontune.measure.loadgen import LoadEngine
    from tritontune.measure.traffic import read_traffic

    traffic = read_traffic(example_repository.parent / "workloads" / "interactive-batch.yaml")
    session = TuningSession(
        load_model_source(example_repository, "mlp"),
        load=LoadSettings(LoadEngine.PERF_ANALYZER),
        work_dir=tmp_path,
    )
    with pytest.raises(InputError, match="perf_analyzer measures one class of traffic"):
        session.measure_traffic(traffic, 50)
