"""The GPU kit and check (``gpu/``): what goes into the kit, what the check installs of it, its model
and its summary. CI also builds the kit and runs the check's CPU plan for real (``make
gpu-check-cpu`` in ``.ci/run``); these are the fast parts, without a server."""

from __future__ import annotations

import importlib.util
import json
import sys
import types
import zipfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent


def load(name: str, path: Path) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


sys.path.insert(0, str(ROOT / "gpu"))  # check.py imports kit.py beside it, as when run there
kit = load("gpu_kit", ROOT / "gpu" / "kit.py")
check = load("gpu_check", ROOT / "gpu" / "check.py")


def make_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-py3-none-any.whl"
    metadata = "\n".join(
        ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
        + [f"Requires-Dist: {r}" for r in requires]
    )
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA", metadata + "\n\n")
    return path


def test_host_packages_parse_and_torch_stays_out_of_the_cpu_emulation():
    packages = {p.name: p for p in kit.host_packages()}
    assert {"torch", "numpy", "grpcio", "onnxruntime", "typer"} <= set(packages)
    assert not packages["torch"].in_cpu_emulation
    assert packages["numpy"].in_cpu_emulation


def test_a_malformed_host_packages_line_is_refused_with_its_place(tmp_path):
    bad = tmp_path / "host.txt"
    bad.write_text("numpy\ntorch cpu: maybe\n")
    with pytest.raises(SystemExit, match=r"host\.txt:2: expected NAME"):
        kit.host_packages(bad)


@pytest.mark.parametrize(
    ("member", "kept"),
    [
        ("pytriton/tritonserver/bin/tritonserver", True),
        ("pytriton/tritonserver/backends/python/libtriton_python.so", True),
        ("pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub", True),
        ("pytriton/tritonserver/python_backend_stubs/3.11/triton_python_backend_stub", False),
        ("pytriton/tritonserver/caches/local/libtritoncache_local.so", True),
        ("nvidia_pytriton.libs/libtritonserver-717102f0.so", True),
        ("nvidia_pytriton.libs/libpython3-419a3a08.13.so.1.0", False),
        ("pytriton/decorators.py", False),
        ("nvidia_pytriton-0.7.0.dist-info/METADATA", False),
    ],
)
def test_the_server_archive_keeps_the_server_and_the_312_stub_only(member, kept):
    assert kit.server_member(member) is kept


def test_wheel_name_comes_from_the_metadata(tmp_path):
    path = make_wheel(tmp_path, "Foo_Bar", "1.0", [])
    assert kit.read_wheel(path).name == "foo-bar"


def test_the_install_takes_from_the_kit_only_what_the_host_lacks_or_has_too_old(tmp_path):
    wheels = {
        w.name: w
        for w in map(
            check.read_wheel,
            [
                make_wheel(
                    tmp_path,
                    "tritontune",
                    "0.1.0",
                    [
                        "numpy>=1.24",
                        "optuna>=5",
                        "tritonclient[grpc]>=2.51",
                        "onnxruntime; extra == 'local'",
                    ],
                ),
                make_wheel(tmp_path, "optuna", "5.0.0", ["sqlalchemy>=1.4", "numpy"]),
                make_wheel(tmp_path, "sqlalchemy", "2.1.9", []),
                make_wheel(
                    tmp_path,
                    "tritonclient",
                    "2.73.0",
                    ["numpy", "protobuf<7,>=6.30; extra == 'grpc'", "grpcio>=1.81; extra == 'grpc'"],
                ),
                make_wheel(tmp_path, "protobuf", "6.33.6", []),
                make_wheel(tmp_path, "plotly", "7.1.0", []),  # nobody asks for it here
            ],
        )
    }
    host = {"numpy": "2.5.2", "protobuf": "7.1.0", "grpcio": "1.70.0", "onnxruntime": "1.30.0"}
    chosen, unmet = check.plan_install(wheels, host.get)
    assert [w.name for w in chosen] == ["optuna", "protobuf", "sqlalchemy", "tritonclient", "tritontune"]
    assert unmet == ["tritonclient needs grpcio>=1.81: the host has 1.70.0, the kit none"]


def test_a_need_the_host_meets_is_not_installed_even_if_the_kit_has_it(tmp_path):
    wheels = {
        w.name: w
        for w in map(
            check.read_wheel,
            [
                make_wheel(tmp_path, "tritontune", "0.1.0", ["protobuf>=4.21"]),
                make_wheel(tmp_path, "protobuf", "6.33.6", []),
            ],
        )
    }
    chosen, unmet = check.plan_install(wheels, {"protobuf": "5.29.0"}.get)
    assert [w.name for w in chosen] == ["tritontune"]
    assert unmet == []


def test_the_config_sizes_the_model_and_picks_the_instance_kind():
    gpu = check.config_pbtxt(check.GPU_PLAN)
    assert "kind: KIND_GPU" in gpu and 'backend: "python"' in gpu
    assert f"dims: [ {check.GPU_PLAN.d_model} ]" in gpu
    assert 'key: "layers" value: { string_value: "12" }' in gpu
    assert "kind: KIND_CPU" in check.config_pbtxt(check.CPU_PLAN)


class _FakeTensor:
    def __init__(self, name: str, array: np.ndarray) -> None:
        self.name, self.array = name, array

    def as_numpy(self) -> np.ndarray:
        return self.array


def fake_backend_utils() -> types.ModuleType:
    module = types.ModuleType("triton_python_backend_utils")
    module.TritonModelException = RuntimeError  # type: ignore[attr-defined]
    module.Logger = types.SimpleNamespace(log_info=lambda message: None)  # type: ignore[attr-defined]
    module.Tensor = _FakeTensor  # type: ignore[attr-defined]
    module.InferenceResponse = lambda output_tensors: output_tensors  # type: ignore[attr-defined]
    module.get_input_tensor_by_name = lambda request, name: request[name]  # type: ignore[attr-defined]
    return module


def test_the_encoder_answers_each_request_of_a_batch_with_its_own_rows(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_backend_utils())
    monkeypatch.setitem(sys.modules, "torch", None)  # the numpy path, as on CI's host
    encoder = load("encoder_model", ROOT / "gpu" / "encoder_model.py")
    config = {"parameters": {"layers": {"string_value": "2"}, "d_model": {"string_value": "32"}}}
    model = encoder.TritonPythonModel()
    model.initialize({"model_config": json.dumps(config), "model_instance_kind": "CPU"})
    rng = np.random.default_rng(1)
    first = rng.integers(-(10**12), 10**12, (1, 8))  # any integers are tokens (modulo the vocabulary)
    second = rng.integers(0, 1000, (3, 8))
    together = model.execute([{"INPUT_IDS": _FakeTensor("INPUT_IDS", a)} for a in (first, second)])
    alone = model.execute([{"INPUT_IDS": _FakeTensor("INPUT_IDS", second)}])
    assert [r[0].array.shape for r in together] == [(1, 32), (3, 32)]
    assert together[0][0].array.dtype == np.float32
    np.testing.assert_allclose(together[1][0].array, alone[0][0].array, rtol=1e-4, atol=1e-5)


def test_a_gpu_instance_without_torch_is_refused(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton_python_backend_utils", fake_backend_utils())
    monkeypatch.setitem(sys.modules, "torch", None)
    encoder = load("encoder_model_gpu", ROOT / "gpu" / "encoder_model.py")
    with pytest.raises(RuntimeError, match="needs PyTorch"):
        encoder.TritonPythonModel().initialize(
            {"model_config": "{}", "model_instance_kind": "GPU", "model_instance_device_id": "0"}
        )


def test_the_summary_names_failed_steps_and_the_gpu_figures():
    gpu = [{"utilization_mean": 0.71, "memory_used_max_bytes": 3 * 2**30}]
    report = {
        "date": "2026-11-26T00:00:00Z",
        "mode": "gpu",
        "seconds": 300.0,
        "host": {"gpus": [{"name": "NVIDIA H100", "driver": "580", "memory": "81559 MiB"}]},
        "steps": [
            {
                "name": "install",
                "ok": True,
                "seconds": 9.0,
                "error": None,
                "skipped": None,
                "detail": {},
            },
            {
                "name": "search",
                "ok": True,
                "seconds": 200.0,
                "error": None,
                "skipped": None,
                "detail": {
                    "slo_p99_ms": 50.0,
                    "baseline": {"throughput": 500.0, "p99_ms": 20.0, "load": 8, "avg_batch_size": 1.0},
                    "winner": None,
                    "configs": [{"trial": 3, "config": "2x KIND_GPU", "throughput": 900.0, "gpu": gpu}],
                },
            },
            {"name": "check", "ok": False, "seconds": 4.0, "error": "check: exit 1: x", "skipped": None},
        ],
    }
    text = check.summary_text(report)
    assert "GPU: NVIDIA H100, driver 580" in text
    assert "- check: FAILED (4.0 s)\n    check: exit 1: x" in text
    assert "trial 3 [2x KIND_GPU]: 900.0 infer/s" in text and "GPU 71% util, 3.0 GiB" in text


def test_telling_prefers_the_error_line():
    assert check.telling("starting\nerror: the model failed to load\nbye\n") == (
        "error: the model failed to load"
    )
    assert check.telling("") == "(no output)"
