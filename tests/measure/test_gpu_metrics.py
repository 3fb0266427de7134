"""Triton's GPU gauges: parsed from a GPU server's metrics text, summarized per level, kept."""

from pathlib import Path

import pytest

from tritontune.measure.gpu_metrics import (
    NO_GPUS,
    GpuFigures,
    combine,
    gpu_from_list,
    gpu_summary,
    gpu_to_list,
    parse_gpu_metrics,
    scrape_gpu_metrics,
    summarize,
)

DATA = Path(__file__).parent / "data"
GPU0 = "GPU-1f7e2a9c-55d0-4b2e-9a41-0c3d8e6b7a10"
GPU1 = "GPU-8c21b4d7-0e93-4f6a-b2c5-7d9e1a3f5b22"


def two_gpus() -> str:
    return (DATA / "triton_metrics_2gpus.txt").read_text()


def test_a_gpu_servers_metrics_give_each_gpus_gauges():
    readings = parse_gpu_metrics(two_gpus())
    assert [r.uuid for r in readings] == [GPU0, GPU1]
    first = readings[0]
    assert first.utilization == pytest.approx(0.73)
    assert first.memory_used_bytes == 5637144576
    assert first.memory_total_bytes == 85899345920
    assert first.power_w == pytest.approx(245.312)
    assert readings[1].utilization == pytest.approx(0.41)


def test_a_level_reports_mean_utilization_max_memory_mean_power():
    start = parse_gpu_metrics(two_gpus())
    end = parse_gpu_metrics(
        two_gpus()
        .replace(f'{GPU0}"}} 0.730000', f'{GPU0}"}} 0.930000')
        .replace("5637144576.000000", "7000000000.000000")
        .replace("245.312000", "305.312000")
    )  # fmt: skip
    gpu0, gpu1 = summarize([start, end])
    assert gpu0.samples == 2
    assert gpu0.utilization_mean == pytest.approx(0.83)
    assert gpu0.memory_used_max_bytes == 7_000_000_000
    assert gpu0.power_mean_w == pytest.approx(275.312)
    assert gpu1.utilization_mean == pytest.approx(0.41)
    kept = gpu_to_list((gpu0, gpu1))
    assert gpu_to_list(gpu_from_list(kept)) == kept  # JSON round trip (rounded once)
    assert gpu_summary((gpu0,)).startswith("GPU 0 (GPU-1f7e2a9c): 83% util, 6.5/80.0 GiB, 275 W")


def test_rounds_combine_by_samples():
    one = GpuFigures(GPU0, 1, 0.5, 1e9, 8e10, 100.0)
    three = GpuFigures(GPU0, 3, 0.9, 2e9, 8e10, 200.0)
    (combined,) = combine([(one,), None, (three,)]) or ()
    assert combined.samples == 4
    assert combined.utilization_mean == pytest.approx(0.8)
    assert combined.memory_used_max_bytes == 2e9
    assert combined.power_mean_w == pytest.approx(175.0)
    assert combine([None, None]) is None


def test_no_gpus_is_said_not_zero():
    cpu_only = "\n".join(line for line in two_gpus().splitlines() if "gpu" not in line) + "\n"
    assert parse_gpu_metrics(cpu_only) == ()
    assert summarize([()]) == ()
    assert gpu_summary(None) == NO_GPUS == "no GPU metrics: the server reports no GPUs"
    assert gpu_to_list(None) is None


def test_an_unreachable_endpoint_is_a_skipped_sample():
    assert scrape_gpu_metrics("http://127.0.0.1:9/metrics", timeout_s=0.5) is None
