"""perf_analyzer as the load engine against the real server and the example model."""

from pathlib import Path

import pytest

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.loadgen import LoadEngine, LoadSpec
from tritontune.measure.measurement import MeasureSettings, measure_load
from tritontune.measure.perf_analyzer import measure_with_perf_analyzer
from tritontune.serving.session import TuningSession

pytestmark = pytest.mark.integration

FAST = MeasureSettings(warmup_s=0.5, window_s=0.5, max_windows=6)


def test_both_engines_measure_the_same_level_alike(example_repository: Path, tmp_path: Path):
    with TuningSession(load_model_source(example_repository, "mlp"), settings=FAST) as session:
        session.load(Variant(max_queue_delay_us=2000, instance_count=1))
        endpoint, requests = session.server.endpoint(), session._requests
        load = LoadSpec.concurrency(4)
        ours = measure_load(endpoint, session.name, requests, load, settings=FAST)
        theirs = measure_with_perf_analyzer(
            endpoint, session.name, requests, load, settings=FAST, workdir=tmp_path
        )
    print(
        f"asyncio {ours.throughput:.0f}/s p99 {ours.latency.p99 * 1e3:.2f} ms; "
        f"perf_analyzer {theirs.throughput:.0f}/s p99 {theirs.latency.p99 * 1e3:.2f} ms"
    )
    assert ours.engine == LoadEngine.ASYNCIO
    assert theirs.engine == LoadEngine.PERF_ANALYZER
    assert theirs.to_dict()["engine"] == "perf_analyzer"
    assert ours.error_count == theirs.error_count == 0
    assert theirs.latency.count > 0 and theirs.windows
    assert 0.5 * ours.throughput <= theirs.throughput <= 2 * ours.throughput
    assert theirs.latency.p99 >= theirs.latency.p50 > 0
    # Triton's own count for the reported windows agrees with perf_analyzer's (edges are read
    # as each window's line arrives, a little after the window's end).
    assert theirs.server is not None and theirs.server.avg_batch_size > 1.5
    client_requests = theirs.request_rate * sum(w.duration for w in theirs.windows)
    assert theirs.server.requests == pytest.approx(client_requests, rel=0.2)
    assert theirs.interference is not None and theirs.interference.windows >= len(theirs.windows)
    # perf_analyzer sent our payloads: the input data it read is ours, one entry per request.
    assert (tmp_path / "input_data.json").is_file() and (tmp_path / "export.json").is_file()
