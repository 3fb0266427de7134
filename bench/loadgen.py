"""Benchmark: tritontune's load generator against perf_analyzer, one server, one run.

(a) The highest request rate each generator sustains against a trivial model (an identity model
    with dynamic batching, so the server is as cheap per request as the Python backend allows):
    closed loop at rising concurrency, best completed requests/s. Target: tritontune >= 0.7x.
(b) p99 latency at the same concurrency on the example model, measured alternately by both tools.
    Target: within 15 %.

Needs perf_analyzer from ``tritonclient[all]==2.51.0`` (in the dev extras), Debian's ``libb64-0d``
and ``nvidia-cuda-runtime-cu12`` (see ../shared/triton-local.md). Prints a table; ``--json FILE``
keeps the numbers.

    python bench/loadgen.py [--concurrency 1,4,16] [--rate-concurrency 8,32,128] [--repeats 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from tritontune.config.model_config import parse_config_text, write_config
from tritontune.config.repository import WorkingRepository, load_model_source
from tritontune.config.variant import Variant, apply_variant
from tritontune.measure.inputs import build_requests, input_specs, synthesize_payloads
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import MeasureSettings, measure_load
from tritontune.measure.perf_analyzer import perf_analyzer_env
from tritontune.server.local import LocalTritonLauncher

ROOT = Path(__file__).resolve().parent.parent
IDENTITY_CONFIG = """
name: "identity"
backend: "python"
max_batch_size: 256
input { name: "IN" data_type: TYPE_FP32 dims: [16] }
output { name: "OUT" data_type: TYPE_FP32 dims: [16] }
dynamic_batching { max_queue_delay_microseconds: 100 }
instance_group { count: 1 kind: KIND_CPU }
"""
IDENTITY_MODEL = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""
EXAMPLE_VARIANT = Variant(max_queue_delay_us=2000, instance_count=1)
SETTINGS = MeasureSettings(warmup_s=1.0, window_s=2.0, max_windows=10)


def perf_analyzer(grpc_url: str, model: str, concurrency: int, workdir: Path) -> dict[str, float]:
    """One perf_analyzer run at ``concurrency``: its requests/s and latency percentiles (s).

    perf_analyzer gives up when its windows don't settle within 10 %; on 2 shared cores that
    happens at high concurrency, so it is run once more at 25 % and the result flagged ``loose``.
    """
    binary = shutil.which("perf_analyzer", path=str(Path(sys.executable).parent))
    if binary is None:
        sys.exit("perf_analyzer not found: pip install 'tritonclient[all]==2.51.0'")
    csv_path = workdir / f"pa_{model}_{concurrency}.csv"
    run = None
    for stability in (10, 25):
        command = [
            binary, "-m", model, "-u", grpc_url, "-i", "grpc",
            "--concurrency-range", f"{concurrency}:{concurrency}",
            "--measurement-interval", str(int(SETTINGS.window_s * 1000)),
            "--stability-percentage", str(stability), "--max-trials", str(SETTINGS.max_windows),
            "-f", str(csv_path),
        ]  # fmt: skip
        csv_path.unlink(missing_ok=True)
        run = subprocess.run(
            command, capture_output=True, text=True, env=perf_analyzer_env(), timeout=300
        )
        if run.returncode == 0 and csv_path.is_file():
            break
        if "Failed to obtain stable measurement" not in run.stdout + run.stderr:
            break
    assert run is not None
    if run.returncode != 0 or not csv_path.is_file():
        sys.exit(f"perf_analyzer failed ({run.returncode}): {run.stdout[-500:]} {run.stderr[-500:]}")
    with open(csv_path) as handle:
        row = next(csv.DictReader(handle))
    return {
        "rate": float(row["Inferences/Second"]),
        "p50": float(row["p50 latency"]) / 1e6,
        "p99": float(row["p99 latency"]) / 1e6,
        "loose": stability != 10,
    }


def ours(grpc_url: str, model: str, concurrency: int, metadata: dict) -> dict[str, float]:
    specs = input_specs(metadata, batching=True)
    requests = build_requests(model, synthesize_payloads(specs, batch_size=1, batching=True), specs)
    m = measure_load(grpc_url, model, requests, LoadSpec.concurrency(concurrency), settings=SETTINGS)
    return {"rate": m.request_rate, "p50": m.latency.p50, "p99": m.latency.p99, "stable": m.stable}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrency", default="1,4,16", help="levels for the p99 comparison")
    parser.add_argument("--rate-concurrency", default="8,32,128", help="levels for the max rate")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    p99_levels = [int(v) for v in args.concurrency.split(",")]
    rate_levels = [int(v) for v in args.rate_concurrency.split(",")]

    workdir = Path(tempfile.mkdtemp(prefix="tritontune-bench-"))
    results: dict = {"max_rate": {}, "p99": {}}
    try:
        repo = WorkingRepository(workdir / "repo")
        identity = repo.root / "identity"
        (identity / "1").mkdir(parents=True)
        (identity / "1" / "model.py").write_text(IDENTITY_MODEL)
        write_config(parse_config_text(IDENTITY_CONFIG), identity / "config.pbtxt")
        with LocalTritonLauncher(repo.root, log_path=workdir / "server.log") as launcher:
            source = load_model_source(ROOT / "examples" / "model_repository", "mlp")
            served = repo.add(source, launcher.info.capabilities.backends)
            client = launcher.client()
            client.load_model("identity")
            client.load_model(
                "mlp", served.served_config(apply_variant(source.base_config, EXAMPLE_VARIANT))
            )
            url = launcher.info.grpc_url
            meta = {m: client.model_metadata(m) for m in ("identity", "mlp")}

            print(
                f"tritonserver {launcher.info.version}, {os.cpu_count()} cores, "
                f"windows of {SETTINGS.window_s}s"
            )
            print("\n(a) highest sustained request rate, trivial model (closed loop)")
            print(f"{'concurrency':>12} {'tritontune req/s':>17} {'perf_analyzer req/s':>20}")
            for level in rate_levels:
                a = ours(url, "identity", level, meta["identity"])
                b = perf_analyzer(url, "identity", level, workdir)
                results["max_rate"][level] = {
                    "tritontune": a["rate"],
                    "tritontune_stable": a["stable"],
                    "perf_analyzer": b["rate"],
                    "perf_analyzer_within_10pct": not b["loose"],
                }
                notes = ("" if a["stable"] else " tritontune unstable") + (
                    " perf_analyzer stable only within 25%" if b["loose"] else ""
                )
                print(f"{level:>12} {a['rate']:>17,.0f} {b['rate']:>20,.0f}{notes}")
            best_ours = max(r["tritontune"] for r in results["max_rate"].values())
            best_pa = max(r["perf_analyzer"] for r in results["max_rate"].values())
            ratio = best_ours / best_pa
            results["max_rate_ratio"] = ratio
            print(f"best: tritontune {best_ours:,.0f} vs perf_analyzer {best_pa:,.0f} req/s "
                  f"= {ratio:.2f}x (target >= 0.7x) {'OK' if ratio >= 0.7 else 'MISSED'}")  # fmt: skip

            print(
                f"\n(b) p99 on the example model {EXAMPLE_VARIANT.to_dict()}, median of {args.repeats}"
            )
            print(
                f"{'concurrency':>12} {'tritontune p99 ms':>18} {'perf_analyzer p99 ms':>21} {'diff':>7}"
            )
            worst = 0.0
            for level in p99_levels:
                runs_a, runs_b = [], []
                for _ in range(args.repeats):  # alternate, so drift hits both tools alike
                    runs_a.append(ours(url, "mlp", level, meta["mlp"])["p99"])
                    runs_b.append(perf_analyzer(url, "mlp", level, workdir)["p99"])
                a, b = statistics.median(runs_a), statistics.median(runs_b)
                diff = (a - b) / b
                worst = max(worst, abs(diff))
                results["p99"][level] = {
                    "tritontune_ms": a * 1e3,
                    "perf_analyzer_ms": b * 1e3,
                    "diff": diff,
                }
                print(f"{level:>12} {a * 1e3:>18.2f} {b * 1e3:>21.2f} {diff:>+7.1%}")
            results["p99_worst_diff"] = worst
            print(
                f"worst p99 difference {worst:.1%} (target <= 15%) {'OK' if worst <= 0.15 else 'MISSED'}"
            )
            client.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
