"""The perf_analyzer engine without a server: input data, command lines, its export, windows."""

import base64
import json
import random
from pathlib import Path

import numpy as np
import pytest
from tritonclient.utils import deserialize_bytes_tensor

from tritontune.errors import InputError
from tritontune.measure import perf_analyzer as pa
from tritontune.measure.arrivals import Arrival
from tritontune.measure.inputs import TensorSpec, build_requests
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.stats import is_stable
from tritontune.server.endpoint import ClientProtocol, Endpoint, TlsSettings

EXPORT = Path(__file__).parent / "data" / "perf_analyzer_export.json"
SETTINGS = MeasureSettings(warmup_s=0.5, window_s=0.5, max_windows=6)
FILES = pa.RunFiles(Path("in.json"), Path("out.json"))


def _requests(batch: int, batching: bool = True) -> tuple[list, list[dict[str, np.ndarray]]]:
    specs = [TensorSpec("INPUT", "FP32", (3,)), TensorSpec("IDS", "INT64", (2,))]
    rng = np.random.default_rng(1)
    lead = (batch,) if batching else ()
    payloads = [
        {
            "INPUT": rng.standard_normal((*lead, 3)).astype(np.float32),
            "IDS": rng.integers(0, 100, (*lead, 2)).astype(np.int64),
        }
        for _ in range(3)
    ]
    return build_requests("m", payloads, specs), payloads


def _decode(value: dict, dtype: type) -> np.ndarray:
    return np.frombuffer(base64.b64decode(value["b64"]), dtype=dtype).reshape(value["shape"])


def test_input_data_holds_our_payloads_one_entry_per_sample_in_order():
    requests, payloads = _requests(batch=2)
    data = pa.input_data_document(requests, batching=True)["data"]
    assert len(data) == 3 * 2  # perf_analyzer's -b 2 takes two entries in a row per request
    for index, entry in enumerate(data):
        payload, sample = payloads[index // 2], index % 2
        assert entry["INPUT"]["shape"] == [3]
        np.testing.assert_array_equal(_decode(entry["INPUT"], np.float32), payload["INPUT"][sample])
        np.testing.assert_array_equal(_decode(entry["IDS"], np.int64), payload["IDS"][sample])
    json.dumps(data)  # it is JSON


def test_input_data_without_batching_keeps_the_whole_shape():
    requests, payloads = _requests(batch=1, batching=False)
    data = pa.input_data_document(requests, batching=False)["data"]
    assert len(data) == 3
    assert data[0]["INPUT"]["shape"] == [3]
    np.testing.assert_array_equal(_decode(data[2]["IDS"], np.int64), payloads[2]["IDS"])


def test_bytes_inputs_travel_as_text_content():
    specs = [TensorSpec("TEXT", "BYTES", (2,))]
    payload = {"TEXT": np.array([[b"ab", b"c"], [b"d", b"ef"]], dtype=np.object_)}
    [request] = build_requests("m", [payload], specs)
    data = pa.input_data_document([request], batching=True)["data"]
    assert [entry["TEXT"] for entry in data] == [
        {"content": ["ab", "c"], "shape": [2]},
        {"content": ["d", "ef"], "shape": [2]},
    ]
    assert list(deserialize_bytes_tensor(request.raw_input_contents[0])) == [b"ab", b"c", b"d", b"ef"]


def test_per_request_parameters_are_refused():
    specs = [TensorSpec("INPUT", "FP32", (3,))]
    requests = build_requests("m", [{"INPUT": np.zeros((1, 3), np.float32)}], specs, priority=2)
    with pytest.raises(InputError, match="priority"):
        pa.input_data_document(requests, batching=True)


def _flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_command_for_concurrency():
    command = pa.perf_analyzer_command(
        Path("/bin/perf_analyzer"),
        Endpoint.grpc("127.0.0.1:8001"),
        "mlp",
        LoadSpec.concurrency(4),
        FILES,
        SETTINGS,
        batch_size=8,
        shapes={"INPUT": [256]},
    )
    assert command[0] == "/bin/perf_analyzer"
    assert _flag(command, "-m") == "mlp"
    assert _flag(command, "-i") == "grpc"
    assert _flag(command, "-u") == "127.0.0.1:8001"
    assert _flag(command, "-b") == "8"
    assert _flag(command, "--concurrency-range") == "4:4"
    assert _flag(command, "--measurement-interval") == "500"
    assert _flag(command, "--stability-percentage") == "0"  # we decide stability, not it
    assert int(_flag(command, "--max-trials")) > 1 + SETTINGS.max_windows + SETTINGS.extra_windows
    assert _flag(command, "--input-data") == "in.json"
    assert _flag(command, "--profile-export-file") == "out.json"
    assert _flag(command, "--shape") == "INPUT:256"
    assert "--request-rate-range" not in command


@pytest.mark.parametrize(("arrival", "distribution"), [("poisson", "poisson"), ("constant", "constant")])
def test_command_for_a_rate(arrival: str, distribution: str):
    command = pa.perf_analyzer_command(
        Path("pa"),
        Endpoint.grpc("h:1"),
        "mlp",
        LoadSpec.rate(250.5, Arrival(arrival)),
        FILES,
        SETTINGS,
    )
    assert _flag(command, "--request-rate-range") == "250.5:250.5"
    assert _flag(command, "--request-distribution") == distribution
    assert "--concurrency-range" not in command


def test_gamma_arrivals_become_request_intervals(tmp_path: Path):
    load = LoadSpec.rate(100, Arrival.GAMMA, cv=2.0)
    path = tmp_path / "gaps.txt"
    assert pa.write_request_intervals(load, path, duration_s=50, seed=3)
    gaps = [int(line) for line in path.read_text().split()]
    assert len(gaps) >= 100 * 50
    assert np.mean(gaps) == pytest.approx(10_000, rel=0.1)  # microseconds at 100 req/s
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(2.0, rel=0.25)
    files = pa.RunFiles(Path("in.json"), Path("out.json"), path)
    command = pa.perf_analyzer_command(Path("pa"), Endpoint.grpc("h:1"), "m", load, files, SETTINGS)
    assert _flag(command, "--request-intervals") == str(path)
    assert "--request-rate-range" not in command
    assert not pa.write_request_intervals(LoadSpec.rate(100), path, duration_s=5, seed=None)


def test_missing_binary_is_a_one_line_error(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(pa.shutil, "which", lambda *args, **kwargs: None)
    with pytest.raises(InputError, match=r"perf_analyzer not found \(pip install"):
        pa.find_perf_analyzer()
    with pytest.raises(InputError, match="not found"):
        pa.measure_with_perf_analyzer("h:1", "m", _requests(1)[0], LoadSpec.concurrency(1))


@pytest.mark.parametrize(
    "endpoint",
    [
        Endpoint(ClientProtocol.HTTP, "h:8000"),
        Endpoint(ClientProtocol.GRPC, "h:8001", tls=TlsSettings()),
        Endpoint(ClientProtocol.GRPC, "h:8001", headers=(("a", "b"),)),
    ],
)
def test_only_plain_grpc(endpoint: Endpoint):
    with pytest.raises(InputError, match="plain gRPC only"):
        pa.measure_with_perf_analyzer(endpoint, "m", _requests(1)[0], LoadSpec.concurrency(1))


def test_reads_a_recorded_export():
    export = pa.read_export(EXPORT)
    assert export.version == "2.51.0"
    assert (export.mode, export.value) == ("concurrency", 2.0)
    assert export.windows == len(export.boundaries) - 1 == 4
    assert len(export.requests) == 12
    assert all(r.done_ns is not None and r.done_ns > r.sent_ns for r in export.requests)


def test_windows_from_a_recorded_export():
    export = pa.read_export(EXPORT)
    windows = pa.window_requests(export)
    assert [len(w.latencies) for w in windows] == [3, 3, 3, 3]
    for window in windows:
        # --measurement-interval 200, plus the time perf_analyzer takes between windows
        assert 0.2 <= window.duration < 0.3
        assert all(0 < lat < 0.1 for lat in window.latencies)
    summary = pa.summarize_window(windows[0], batch_size=4)
    assert summary.completed == 3
    assert summary.throughput == pytest.approx(3 * 4 / windows[0].duration)
    assert summary.mean_latency == pytest.approx(np.mean(windows[0].latencies))


def _export(tmp_path: Path, done: list[list[tuple[float, float | None]]]) -> pa.PerfAnalyzerExport:
    """An export of windows of 1 s, each request (sent, done) in seconds from the window's start."""
    requests = []
    for index, window in enumerate(done):
        for sent, end in window:
            base = int(index * 1e9)
            responses = [] if end is None else [base + int(end * 1e9)]
            requests.append({"timestamp": base + int(sent * 1e9), "response_timestamps": responses})
    document = {
        "version": "2.51.0",
        "experiments": [
            {
                "experiment": {"mode": "request_rate", "value": 10},
                "window_boundaries": [int(i * 1e9) for i in range(len(done) + 1)],
                "requests": requests,
            }
        ],
    }
    path = tmp_path / "export.json"
    path.write_text(json.dumps(document))
    return pa.read_export(path)


def test_stability_and_failures_from_timestamps(tmp_path: Path):
    rng = random.Random(0)

    def steady(latency: float) -> list[tuple[float, float | None]]:
        return [(t, t + latency * rng.uniform(0.98, 1.02)) for t in np.arange(0.0, 0.9, 0.01)]

    export = _export(tmp_path, [steady(0.05), steady(0.01), steady(0.01), steady(0.01)])
    windows = [pa.summarize_window(w, 1) for w in pa.window_requests(export)]
    assert not is_stable(windows, count=4, tolerance=0.1)  # the first one is slow
    assert is_stable(windows, count=3, tolerance=0.1)

    # A request without a response is a failure of the window it was sent in; one that ends in
    # the next window counts there (completion time), as the asyncio engine slices its log.
    export = _export(tmp_path, [[(0.1, 0.2), (0.5, None), (0.9, 1.05)], [(0.1, 0.2)]])
    first, second = pa.window_requests(export)
    assert (len(first.latencies), first.failed) == (1, 1)
    assert len(second.latencies) == 2
    assert second.latencies[0] == pytest.approx(0.15)


def test_a_bad_export_is_a_clear_error(tmp_path: Path):
    from tritontune.errors import ServerError

    with pytest.raises(ServerError, match="wrote no export"):
        pa.read_export(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text('{"experiments": []}')
    with pytest.raises(ServerError, match="not as expected"):
        pa.read_export(tmp_path / "bad.json")


def test_the_env_finds_the_cuda_runtime():
    env = pa.perf_analyzer_env()
    assert "nvidia" in env.get("LD_LIBRARY_PATH", "") or "LD_LIBRARY_PATH" not in env
