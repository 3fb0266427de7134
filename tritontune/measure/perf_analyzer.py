"""perf_analyzer as a load engine: one load level measured by NVIDIA's C++ load generator.

A user who trusts perf_analyzer can have it generate the load and still get a tritontune figure:
the same payloads (written as its ``--input-data``, a batched request as that many consecutive
entries), the same windows, the same stability and interference rules. It runs with
``--stability-percentage 0`` and tritontune decides when to stop: each ``Pass [N]`` line ends a
window, our rule is checked live, and SIGINT makes it write ``--profile-export-file``, from which
the windows are rebuilt by completion time as :mod:`measurement` slices them. Server statistics
and interference are read at the same window edges. What remains different, and why each part is
done so: ``docs/concepts/measurement.md`` ("Load engines").
"""

from __future__ import annotations

import base64
import collections
import dataclasses
import json
import math
import os
import queue
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import grpc
import numpy as np
import psutil
from tritonclient.grpc import service_pb2, service_pb2_grpc
from tritonclient.utils import deserialize_bytes_tensor

from tritontune.errors import InputError, ServerError
from tritontune.measure.arrivals import Arrival, arrival_gaps
from tritontune.measure.client_cost import LoadThread
from tritontune.measure.interference import Interference, InterferenceProbe, WindowLoad
from tritontune.measure.loadgen import LoadEngine, LoadMode, LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings, ServerSplit
from tritontune.measure.stats import (
    LatencyStats,
    WindowSummary,
    is_stable,
    relative_deviation,
    spread,
)
from tritontune.server.client import GRPC_OPTIONS, ModelStatsSnapshot, snapshot_from_statistics
from tritontune.server.endpoint import ClientProtocol, Endpoint

BINARY = "perf_analyzer"
INSTALL_HINT = (
    "pip install 'tritonclient[all]==2.51.0' nvidia-cuda-runtime-cu12 and apt-get install libb64-0d"
)
#: Error kind of a request the export shows without a response.
NO_RESPONSE_ERROR = "NO_RESPONSE"
#: Most gaps written to a ``--request-intervals`` file (perf_analyzer loops over the file).
MAX_INTERVALS = 1_000_000
#: Lines of perf_analyzer's output kept for an error message.
TAIL_LINES = 6

_PASS = re.compile(
    r"Pass \[(?P<n>\d+)\] throughput: (?P<tput>[0-9.eE+-]+) infer/sec\."
    r"(?: p99 latency: (?P<p99>\d+) usec)?"
)


# -- finding and starting the binary -----------------------------------------------------------


def find_perf_analyzer() -> Path:
    """perf_analyzer next to this Python (a venv's ``bin``, where tritonclient installs it), else on
    PATH; a one-line error naming what to install when there is none."""
    found = shutil.which(BINARY, path=str(Path(sys.executable).parent)) or shutil.which(BINARY)
    if found is None:
        raise InputError(f"--load-engine perf_analyzer: {BINARY} not found ({INSTALL_HINT})")
    return Path(found)


def perf_analyzer_env() -> dict[str, str]:
    """The environment perf_analyzer starts in: the pip-installed binary links libcudart.so.12,
    which the ``nvidia-cuda-runtime-cu12`` wheel ships outside the loader's search path."""
    env = dict(os.environ)
    try:
        import nvidia.cuda_runtime  # type: ignore[import-untyped]
    except ImportError:
        return env
    for folder in nvidia.cuda_runtime.__path__:
        lib = Path(folder) / "lib"
        if lib.is_dir():
            env["LD_LIBRARY_PATH"] = os.pathsep.join(
                part for part in (str(lib), env.get("LD_LIBRARY_PATH", "")) if part
            )
            break
    return env


# -- our payloads as its input data ------------------------------------------------------------


def input_data_document(requests: Sequence[Any], *, batching: bool) -> dict[str, Any]:
    """perf_analyzer's ``--input-data`` JSON for prepared gRPC ``ModelInferRequest`` messages.

    With ``batching``, a request's first dimension is its batch and each of its samples becomes
    an entry of its own (shape without the batch dimension), in order, so that ``-b B`` sends our
    requests whole; without, one entry per request with its full shape."""
    entries: list[dict[str, Any]] = []
    for index, request in enumerate(requests):
        if request.parameters:
            names = ", ".join(sorted(request.parameters))
            raise InputError(
                f"the perf_analyzer engine cannot send per-request parameters ({names}); "
                "use the asyncio engine"
            )
        samples: list[dict[str, Any]] | None = None
        for tensor, raw in zip(request.inputs, request.raw_input_contents, strict=True):
            shape = [int(d) for d in tensor.shape]
            count = shape[0] if batching and shape else 1
            if batching and not shape:
                raise InputError(f"request {index}: input {tensor.name!r} has no batch dimension")
            if samples is None:
                samples = [{} for _ in range(count)]
            elif len(samples) != count:
                raise InputError(f"request {index}: its inputs disagree on the batch size")
            sample_shape = shape[1:] if batching else shape
            for sample, part in zip(samples, _split(raw, tensor.datatype, count), strict=True):
                sample[tensor.name] = {**part, "shape": sample_shape}
        entries += samples or []
    return {"data": entries}


def _split(raw: bytes, datatype: str, count: int) -> list[dict[str, Any]]:
    """One tensor's raw contents cut into ``count`` equal samples, as input-data values."""
    if datatype == "BYTES":
        values = deserialize_bytes_tensor(raw) if raw else np.array([], dtype=np.object_)
        try:
            texts = [bytes(v).decode("utf-8") for v in values]
        except UnicodeDecodeError:
            raise InputError("the perf_analyzer engine sends BYTES inputs as text only") from None
        per = len(texts) // count
        return [{"content": texts[i * per : (i + 1) * per]} for i in range(count)]
    per = len(raw) // count
    return [
        {"b64": base64.b64encode(raw[i * per : (i + 1) * per]).decode("ascii")} for i in range(count)
    ]


def _fixed_shapes(requests: Sequence[Any], *, batching: bool) -> dict[str, list[int]]:
    """Each input's shape (without the batch dimension) where every request agrees on it: the
    ``--shape`` perf_analyzer needs for an input with dynamic dimensions."""
    shapes: dict[str, list[int] | None] = {}
    for request in requests:
        for tensor in request.inputs:
            shape = [int(d) for d in tensor.shape][1 if batching else 0 :]
            if shapes.setdefault(tensor.name, shape) != shape:
                shapes[tensor.name] = None
    return {name: shape for name, shape in shapes.items() if shape}


def write_request_intervals(load: LoadSpec, path: Path, *, duration_s: float, seed: int | None) -> bool:
    """For a gamma or trace arrival: its gaps, in microseconds, one a line, for
    ``--request-intervals`` (perf_analyzer loops over the file). A trace is written once round
    (its replay loops the same way); a gamma process long enough for ``duration_s``. False when
    perf_analyzer's own distributions do (Poisson, constant)."""
    if load.mode != LoadMode.RATE or load.arrival in (Arrival.POISSON, Arrival.CONSTANT):
        return False
    if load.arrival == Arrival.TRACE:
        if load.trace is None:
            raise InputError("trace arrivals need their trace")
        count = len(load.trace.unit_gaps)
    else:
        count = math.ceil(load.value * duration_s) + 1
    gaps = arrival_gaps(load.arrival, load.value, random.Random(seed), load.cv, load.trace)
    lines = (f"{max(1, round(next(gaps) * 1e6))}\n" for _ in range(min(count, MAX_INTERVALS)))
    path.write_text("".join(lines), encoding="ascii")
    return True


# -- the command line --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFiles:
    """The files one perf_analyzer run reads and writes."""

    input_data: Path
    export: Path
    intervals: Path | None = None


def perf_analyzer_command(
    binary: Path,
    endpoint: Endpoint,
    model: str,
    load: LoadSpec,
    files: RunFiles,
    settings: MeasureSettings,
    *,
    batch_size: int = 1,
    shapes: dict[str, list[int]] | None = None,
) -> list[str]:
    """The command for one level. perf_analyzer never declares stability (``-s 0``) and gets more
    trials than tritontune will use: it is told when to stop (SIGINT), so its ``Pass`` lines
    (``-v``, with their p99 from ``--percentile 99``) are our window edges."""
    trials = _warmup_windows(settings) + settings.max_windows + settings.extra_windows + 2
    command = [
        str(binary),
        "-m", model,
        "-i", "grpc",
        "-u", endpoint.address,
        "-b", str(batch_size),
        "--input-data", str(files.input_data),
        "--measurement-mode", "time_windows",
        "--measurement-interval", str(max(1, round(settings.window_s * 1000))),
        "--stability-percentage", "0",
        "--max-trials", str(trials),
        "--percentile", "99",
        "--profile-export-file", str(files.export),
        "-v",
    ]  # fmt: skip
    for name, shape in sorted((shapes or {}).items()):
        command += ["--shape", f"{name}:{','.join(str(d) for d in shape)}"]
    if load.mode == LoadMode.CONCURRENCY:
        level = max(1, int(load.value))
        command += ["--concurrency-range", f"{level}:{level}"]
    elif files.intervals is not None:
        command += ["--request-intervals", str(files.intervals)]
    else:
        distribution = "constant" if load.arrival == Arrival.CONSTANT else "poisson"
        command += [
            "--request-rate-range", f"{load.value:g}:{load.value:g}",
            "--request-distribution", distribution,
        ]  # fmt: skip
    return command


def _warmup_windows(settings: MeasureSettings) -> int:
    """Whole windows that cover the warm-up (perf_analyzer 2.51 has no warm-up of its own)."""
    return math.ceil(settings.warmup_s / settings.window_s - 1e-9) if settings.warmup_s > 0 else 0


# -- its export --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ExportedRequest:
    """One request of the export: when it was sent and when its last response came (ns, the
    system clock); ``done_ns`` None: no response."""

    sent_ns: int
    done_ns: int | None


@dataclass(frozen=True)
class PerfAnalyzerExport:
    """What tritontune uses of a ``--profile-export-file``: the level, the window boundaries (the
    start of each window, then the end of the last) and every request."""

    version: str
    mode: str
    value: float
    boundaries: tuple[int, ...]
    requests: tuple[ExportedRequest, ...]

    @property
    def windows(self) -> int:
        return max(0, len(self.boundaries) - 1)


def read_export(path: Path) -> PerfAnalyzerExport:
    """Parse perf_analyzer's profile export (``{"version", "experiments": [{"experiment": {"mode",
    "value"}, "window_boundaries": [...], "requests": [{"timestamp", "response_timestamps", ...}]}]}``)
    for its one experiment; tensors in it are skipped."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        experiment = document["experiments"][0]
        requests = tuple(
            ExportedRequest(
                int(r["timestamp"]),
                int(r["response_timestamps"][-1]) if r.get("response_timestamps") else None,
            )
            for r in experiment["requests"]
        )
        return PerfAnalyzerExport(
            version=str(document.get("version", "")),
            mode=str(experiment["experiment"]["mode"]),
            value=float(experiment["experiment"]["value"]),
            boundaries=tuple(int(b) for b in experiment["window_boundaries"]),
            requests=requests,
        )
    except OSError as err:
        raise ServerError(f"perf_analyzer wrote no export at {path} ({err.strerror})") from None
    except (ValueError, KeyError, IndexError, TypeError) as err:
        raise ServerError(f"perf_analyzer's export {path} is not as expected ({err!r})") from None


@dataclass(frozen=True)
class WindowRequests:
    """The requests that completed in one window (failed ones by their send time), in seconds."""

    start_ns: int
    end_ns: int
    latencies: tuple[float, ...]
    failed: int

    @property
    def duration(self) -> float:
        return max((self.end_ns - self.start_ns) / 1e9, 1e-9)


def window_requests(export: PerfAnalyzerExport) -> list[WindowRequests]:
    """The export's requests sliced into its windows by completion time (as the asyncio engine
    slices its log), so no request is lost or counted twice at an edge."""
    bounds = np.asarray(export.boundaries, dtype=np.int64)
    latencies: list[list[float]] = [[] for _ in range(export.windows)]
    failed = [0] * export.windows
    for request in export.requests:
        at = request.done_ns if request.done_ns is not None else request.sent_ns
        index = int(np.searchsorted(bounds, at, side="right")) - 1
        if not 0 <= index < export.windows:
            continue
        if request.done_ns is None:
            failed[index] += 1
        else:
            latencies[index].append((request.done_ns - request.sent_ns) / 1e9)
    return [
        WindowRequests(int(bounds[i]), int(bounds[i + 1]), tuple(latencies[i]), failed[i])
        for i in range(export.windows)
    ]


def summarize_window(window: WindowRequests, batch_size: int) -> WindowSummary:
    stats = LatencyStats.from_samples(window.latencies)
    return WindowSummary(
        duration=window.duration,
        completed=stats.count,
        throughput=stats.count * batch_size / window.duration,
        mean_latency=stats.mean,
        p99=stats.p99,
    )


def _live_settled(windows: Sequence[tuple[float, float]], settings: MeasureSettings) -> bool:
    """Our rule on what perf_analyzer prints per window (throughput, p99): the mean is checked
    on the export afterwards."""
    count = settings.stable_windows
    if len(windows) < count:
        return False
    last = windows[-count:]
    return (
        all(t > 0 for t, _ in last)
        and spread([t for t, _ in last]) <= settings.tolerance
        and spread([p for _, p in last]) <= 2 * settings.tolerance
    )


# -- running it --------------------------------------------------------------------------------


class _PerfAnalyzerProbe(InterferenceProbe):
    """The interference probe, with perf_analyzer's busiest thread as the load generator's."""

    def __init__(self, pid: int) -> None:
        try:
            self._pa: psutil.Process | None = psutil.Process(pid)
        except psutil.Error:
            self._pa = None
        self._threads = self._thread_seconds()
        super().__init__([LoadThread.current()])

    def _thread_seconds(self) -> dict[int, float]:
        try:
            threads = self._pa.threads() if self._pa is not None else []
        except psutil.Error:
            return {}
        return {t.id: t.user_time + t.system_time for t in threads}

    def sample(self) -> WindowLoad:
        window = super().sample()
        now = self._thread_seconds()
        busiest = max((now[t] - self._threads.get(t, 0.0) for t in now), default=0.0)
        self._threads = now
        return dataclasses.replace(window, loadgen_busy=min(1.0, max(0.0, busiest / window.wall_s)))


class _Control:
    """The control plane beside the run: the model's config and statistics over gRPC."""

    def __init__(self, endpoint: Endpoint) -> None:
        self._channel = grpc.insecure_channel(endpoint.address, options=GRPC_OPTIONS)
        self._stub = service_pb2_grpc.GRPCInferenceServiceStub(self._channel)

    def max_batch_size(self, model: str) -> int:
        try:
            reply = self._stub.ModelConfig(service_pb2.ModelConfigRequest(name=model), timeout=10)
        except grpc.RpcError as err:
            raise ServerError(f"cannot read {model!r}'s config: {err.details()}") from None
        return int(reply.config.max_batch_size)

    def statistics(self, model: str) -> ModelStatsSnapshot | None:
        try:
            reply = self._stub.ModelStatistics(service_pb2.ModelStatisticsRequest(name=model), timeout=5)
        except grpc.RpcError:
            return None
        return snapshot_from_statistics(reply)

    def close(self) -> None:
        self._channel.close()


@dataclass
class _Edge:
    """A window edge as seen live: the counters then of the model measured and of its steps (a
    pipeline's composing models), by model, as :mod:`measurement` reads them."""

    stats: dict[str, ModelStatsSnapshot | None]


def _lines(stream: IO[str]) -> queue.Queue[str | None]:
    """perf_analyzer's output, line by line, from a reader thread (None at its end), so the
    controller can wait with a deadline."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=pump, name="tritontune-perf-analyzer-output", daemon=True).start()
    return lines


def _stop(process: subprocess.Popen[str], grace_s: float) -> None:
    """SIGINT (it finishes its requests and writes its export), then kill after ``grace_s``."""
    if process.poll() is not None:
        return
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def measure_with_perf_analyzer(
    endpoint: Endpoint | str,
    model: str,
    requests: list[Any],
    load: LoadSpec,
    *,
    batch_size: int = 1,
    settings: MeasureSettings | None = None,
    seed: int | None = None,
    workdir: Path | None = None,
    step_models: tuple[str, ...] = (),
) -> Measurement:
    """Measure ``model`` at one load level with perf_analyzer generating the load: the meaning and
    result of :func:`measurement.measure_load`, with ``engine`` perf_analyzer.

    ``requests`` are prepared gRPC requests (:func:`inputs.build_requests`); perf_analyzer sends
    exactly them. Plain gRPC endpoints only (a plain ``host:port`` is one). ``workdir`` keeps the
    input data and the export (default: a temporary folder, removed after). ``step_models`` (a
    pipeline's composing models): their statistics are read at the same window edges as
    ``model``'s (:attr:`Measurement.steps`)."""
    settings = settings or MeasureSettings()
    endpoint = Endpoint.grpc(endpoint) if isinstance(endpoint, str) else endpoint
    if endpoint.protocol != ClientProtocol.GRPC or endpoint.tls is not None or endpoint.headers:
        raise InputError(
            f"the perf_analyzer engine supports plain gRPC only (not {endpoint.url()}"
            f"{' with headers' if endpoint.headers else ''}); use the asyncio engine"
        )
    if not requests:
        raise ValueError("at least one request payload is needed")
    binary = find_perf_analyzer()
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
        return _measure(
            binary, endpoint, model, requests, load, batch_size, settings, seed, workdir, step_models
        )
    with tempfile.TemporaryDirectory(prefix="tritontune-pa-") as folder:
        return _measure(
            binary,
            endpoint,
            model,
            requests,
            load,
            batch_size,
            settings,
            seed,
            Path(folder),
            step_models,
        )


def _measure(
    binary: Path,
    endpoint: Endpoint,
    model: str,
    requests: list[Any],
    load: LoadSpec,
    batch_size: int,
    settings: MeasureSettings,
    seed: int | None,
    workdir: Path,
    step_models: tuple[str, ...] = (),
) -> Measurement:
    control = _Control(endpoint)
    try:
        batching = control.max_batch_size(model) > 0
        files = RunFiles(workdir / "input_data.json", workdir / "export.json")
        files.input_data.write_text(json.dumps(input_data_document(requests, batching=batching)))
        files.export.unlink(missing_ok=True)  # perf_analyzer refuses to overwrite one
        intervals = workdir / "intervals.txt"
        if write_request_intervals(load, intervals, duration_s=settings.time_cap(), seed=seed):
            files = dataclasses.replace(files, intervals=intervals)
        command = perf_analyzer_command(
            binary,
            endpoint,
            model,
            load,
            files,
            settings,
            batch_size=batch_size if batching else 1,
            shapes=_fixed_shapes(requests, batching=batching),
        )
        models = (model, *step_models)
        started = time.perf_counter()
        edges, loads = _run(command, control, models, settings, files, started)
    finally:
        control.close()
    export = read_export(files.export)
    return _result(export, edges, loads, load, batch_size, settings, started, models)


def _run(
    command: list[str],
    control: _Control,
    models: tuple[str, ...],
    settings: MeasureSettings,
    files: RunFiles,
    started: float,
) -> tuple[list[_Edge], list[WindowLoad]]:
    """Run perf_analyzer until our rule says stop; the window edges (the statistics of
    ``models``: the one measured, then its steps) and interference seen."""
    warmup = _warmup_windows(settings)
    deadline = started + settings.time_cap() + 10.0
    tail: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
    try:
        process = subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            env=perf_analyzer_env(),
            start_new_session=True,  # a Ctrl-C reaches us; we stop it (finally, below)
        )
    except OSError as err:
        raise InputError(f"cannot start {command[0]} ({err.strerror}; {INSTALL_HINT})") from None
    edges: list[_Edge] = []
    loads: list[WindowLoad] = []
    live: list[tuple[float, float]] = []
    probe: _PerfAnalyzerProbe | None = None
    stopped = False

    def edge() -> _Edge:
        return _Edge({model: control.statistics(model) for model in models})

    try:
        assert process.stdout is not None
        output = _lines(process.stdout)
        if warmup == 0:
            edges.append(edge())
            if settings.detect_interference:
                probe = _PerfAnalyzerProbe(process.pid)
        for line in _until(output, deadline):
            if line.strip():
                tail.append(line.strip())
            match = _PASS.search(line)
            if match is None:
                continue
            n = int(match["n"])
            if n < warmup:
                continue
            edges.append(edge())
            if n == warmup:
                if settings.detect_interference:
                    probe = _PerfAnalyzerProbe(process.pid)
                continue
            if probe is not None:
                loads.append(probe.sample())
            p99 = float(match["p99"]) / 1e6 if match["p99"] else float("nan")
            live.append((float(match["tput"]), p99))
            # the stable-windows rule of every engine, on what perf_analyzer prints per window
            settled = _live_settled(live, settings)
            if settings.measured(len(live), settled, loads) or time.perf_counter() >= deadline - 10.0:
                stopped = True
                break
        _stop(process, settings.request_timeout_s + 10.0)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0 or not files.export.is_file():
        last = " | ".join(tail) or "no output"
        what = "stopped" if stopped else f"exited with status {process.returncode}"
        raise ServerError(f"perf_analyzer {what} without a result: {last}")
    if not live:
        raise ServerError(f"perf_analyzer measured no window after the warm-up: {' | '.join(tail)}")
    return edges, loads


def _until(lines: queue.Queue[str | None], deadline: float) -> Iterator[str]:
    """Lines until the output ends or ``deadline`` passes."""
    while True:
        left = deadline - time.perf_counter()
        if left <= 0:
            return
        try:
            line = lines.get(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if line is None:
            return
        yield line


def _result(
    export: PerfAnalyzerExport,
    edges: list[_Edge],
    loads: list[WindowLoad],
    load: LoadSpec,
    batch_size: int,
    settings: MeasureSettings,
    started: float,
    models: tuple[str, ...],
) -> Measurement:
    """The Measurement from the export's windows after the warm-up, as :mod:`measurement` builds
    it from its own log; ``models``: the one measured, then its steps."""
    warmup = _warmup_windows(settings)
    # The windows we saw live; the export holds the same ones (the interrupted one not).
    measured = window_requests(export)[warmup : warmup + len(edges) - 1]
    if not measured:
        raise ServerError("perf_analyzer's export holds no window after the warm-up")
    windows = [summarize_window(w, batch_size) for w in measured]
    stable = is_stable(windows, count=settings.stable_windows, tolerance=settings.tolerance)
    chosen = settings.stable_windows if stable else len(windows)
    merged = measured[-chosen:]
    latencies = [lat for w in merged for lat in w.latencies]
    failed = sum(w.failed for w in merged)
    span = max((merged[-1].end_ns - merged[0].start_ns) / 1e9, 1e-9)
    first, last = edges[len(measured) - chosen], edges[len(measured)]
    splits = ServerSplit.between(first.stats, last.stats)
    model, *step_models = models
    errors = {NO_RESPONSE_ERROR: failed} if failed else {}
    interference = Interference.of(loads, loads[-chosen:]) if loads else None
    return Measurement(
        load=load,
        batch_size=batch_size,
        throughput=len(latencies) * batch_size / span,
        request_rate=len(latencies) / span,
        latency=LatencyStats.from_samples(latencies),
        errors=errors,
        stable=stable,
        windows=tuple(windows[-chosen:]),
        throughput_deviation=relative_deviation([w.throughput for w in windows[-chosen:]]),
        p99_deviation=relative_deviation([w.p99 for w in windows[-chosen:]]),
        duration_s=time.perf_counter() - started,
        server=splits.get(model),
        send_lag_p99_s=None,
        error_examples={NO_RESPONSE_ERROR: "perf_analyzer recorded no response"} if failed else {},
        interference=interference,
        engine=LoadEngine.PERF_ANALYZER,
        steps={step: splits[step] for step in step_models if step in splits},
    )
