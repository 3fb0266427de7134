"""The GPU check: tritontune's GPU path end to end on a host with no network, in one short run.

``make gpu-check OUT=DIR`` (or ``python3 gpu/check.py --out DIR``) with the kit from ``make gpu-kit``
beside it:

1. **host**: the GPU, driver and CUDA versions (``nvidia-smi``), PyTorch and what it sees;
2. **install**: the kit into a private environment (a venv that sees the host's packages through a
   ``.pth`` file; only what the host lacks is installed, offline, with ``pip --no-index``), the
   bundled tritonserver unpacked into it, the kit's libpython 3.12 only where the host has none;
3. **model**: a transformer encoder in PyTorch (``gpu/encoder_model.py``, weights from a fixed
   seed) as a Python-backend model, ``KIND_GPU`` on a GPU host (``KIND_CPU``, and numpy where
   PyTorch is missing, on a CPU host);
4. **profile** at a few loads, with dynamic batching;
5. **search** under a p99 SLO over instances per GPU (1-4), batching on/off, delays and batch sizes,
   a few trials and the playoff;
6. **export** the winner, and **check** the exported repository (the CI gate);
7. Triton's GPU metrics per config (utilization, memory), or the line saying the server has none.

Each step is timed and recorded; a failed step says why, and the next runs where it can. Written
to ``--out``: ``gpu-check.json`` (everything), ``gpu-check.txt`` (a short summary),
``steps.log`` (every command's output), ``profile.json``, ``search.results.json``,
``tritontune.lock.yaml`` (the tuning record). The whole run is meant to fit in 8 minutes on one
H100; ``--cpu`` (or a host without an NVIDIA GPU) runs the CPU rehearsal CI runs: the same steps,
smaller, one trial.
"""

from __future__ import annotations

import argparse
import json
import lzma
import os
import platform
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from kit import KitWheel, normalize, read_wheel  # gpu/kit.py: what the kit is made of

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
MODEL = "encoder"
STUDY = "gpu-check"


@dataclass(frozen=True)
class Plan:
    """What one run measures: the GPU plan for a GPU host, the CPU rehearsal elsewhere."""

    kind: str
    layers: int
    d_model: int
    heads: int
    sequence: int
    max_batch_size: int
    slo: str
    trials: int
    playoff_top: int
    profile_loads: str
    max_load: int
    space: dict
    window: str
    check_rounds: int
    check_tolerance: str = "10%"
    """``check --tolerance``: how far under the recorded figure a round may fall."""


GPU_PLAN = Plan(
    kind="gpu",
    layers=12,
    d_model=1024,
    heads=16,
    sequence=256,
    max_batch_size=64,
    slo="50ms",
    trials=5,
    playoff_top=2,
    profile_loads="1,16,64",
    max_load=256,
    space={
        "instance_count": {"min": 1, "max": 4},
        "dynamic_batching": [True, False],
        "max_queue_delay": {"min": "100us", "max": "5ms"},
        "max_batch_size": [8, 16, 32, 64],
        "preferred_batch_size": ["none", "max"],
    },
    window="0.5s",
    check_rounds=1,
)
CPU_PLAN = Plan(
    kind="cpu",
    layers=2,
    d_model=64,
    heads=4,
    sequence=32,
    max_batch_size=16,
    slo="500ms",
    trials=1,
    playoff_top=0,
    profile_loads="2",
    max_load=8,
    space={
        "instance_count": 1,
        "dynamic_batching": [True],
        "max_queue_delay": {"min": "100us", "max": "2ms"},
        "max_batch_size": [4, 8],
        "preferred_batch_size": ["none"],
    },
    window="0.3s",
    check_rounds=1,
    # One round against one screening figure (no playoff) on a shared 2-core machine: the CPU
    # plan proves that every step runs, not the machine's speed (a quiet CI run's check fell
    # 17 % under the record in its one round, 2026-11-27, and failed the plan at 10 %).
    check_tolerance="50%",
)


class StepFailed(Exception):
    """A step's reason to stop, in one line."""


@dataclass
class Step:
    name: str
    ok: bool = False
    seconds: float = 0.0
    detail: dict = field(default_factory=dict)
    error: str | None = None
    skipped: str | None = None


@dataclass
class Context:
    out: Path
    work: Path
    kit: Path
    plan: Plan
    log: Any
    timeout_s: float
    started: float = field(default_factory=time.monotonic)
    env: dict = field(default_factory=lambda: dict(os.environ, PYTHONUNBUFFERED="1"))
    tritontune: Path | None = None
    venv_python: Path | None = None

    def remaining(self) -> float:
        return self.timeout_s - (time.monotonic() - self.started)

    def run(self, argv: list[str], *, limit_s: float, what: str) -> str:
        """Run a command, its output to steps.log; raise StepFailed naming its telling line."""
        limit = max(10.0, min(limit_s, self.remaining() - 5))
        self.log.write(f"\n$ {' '.join(map(str, argv))}\n")
        self.log.flush()
        try:
            done = subprocess.run(
                [str(a) for a in argv],
                cwd=self.work,
                env=self.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=limit,
            )
        except subprocess.TimeoutExpired as err:
            output = err.output.decode() if isinstance(err.output, bytes) else (err.output or "")
            self.log.write(output + f"\n[timed out after {limit:.0f} s]\n")
            raise StepFailed(f"{what}: timed out after {limit:.0f} s") from None
        self.log.write(done.stdout)
        self.log.flush()
        if done.returncode != 0:
            raise StepFailed(f"{what}: exit {done.returncode}: {telling(done.stdout)}")
        return done.stdout

    def tt(self, *args: str, limit_s: float, what: str) -> str:
        if self.tritontune is None:
            raise StepFailed("tritontune is not installed (the install step failed)")
        return self.run([str(self.tritontune), *args], limit_s=limit_s, what=what)


def telling(output: str) -> str:
    """The line of a command's output that says what went wrong (errors first, else the last)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"error|failed|refused|not found|exception", line, re.IGNORECASE):
            return line[:400]
    return lines[-1][:400] if lines else "(no output)"


# -- host ----------------------------------------------------------------------------------------


def nvidia_smi() -> dict:
    """GPUs, driver and CUDA version from nvidia-smi; empty without one."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return {}
    query = subprocess.run(
        [smi, "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    gpus = [
        dict(zip(("name", "driver", "memory"), (c.strip() for c in line.split(",")), strict=False))
        for line in query.stdout.splitlines()
        if line.strip()
    ]
    header = subprocess.run([smi], capture_output=True, text=True, timeout=30).stdout
    cuda = re.search(r"CUDA Version:\s*([0-9.]+)", header)
    return {"gpus": gpus, "cuda_driver_api": cuda.group(1) if cuda else None}


def torch_facts(python: str) -> dict:
    """PyTorch's version and what it sees, asked of ``python`` (none when it has no PyTorch)."""
    probe = (
        "import json\n"
        "try:\n import torch\nexcept ImportError:\n print(json.dumps(None)); raise SystemExit\n"
        "ok = torch.cuda.is_available()\n"
        "print(json.dumps({'version': torch.__version__, 'cuda': torch.version.cuda,"
        " 'cuda_available': ok, 'devices': [torch.cuda.get_device_name(i)"
        " for i in range(torch.cuda.device_count())] if ok else []}))\n"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=180)
    if done.returncode != 0:
        return {"error": telling(done.stderr or done.stdout)}
    return json.loads(done.stdout.strip().splitlines()[-1]) or {}


def step_host(ctx: Context) -> dict:
    facts = {
        "python": sys.version.split()[0],
        "python_executable": sys.executable,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
    }
    facts.update(nvidia_smi())
    facts["torch"] = torch_facts(sys.executable)
    return facts


# -- install -------------------------------------------------------------------------------------


def host_site_dirs() -> list[str]:
    """The folders this (the host's) interpreter imports packages from."""
    return [
        p
        for p in sys.path
        if p.rstrip("/").endswith(("site-packages", "dist-packages")) and Path(p).is_dir()
    ]


def plan_install(
    wheels: dict[str, KitWheel],
    installed: Callable[[str], str | None],
    root: str = "tritontune",
    root_extras: frozenset[str] = frozenset(),
) -> tuple[list[KitWheel], list[str]]:
    """Which of the kit's wheels to install, and what stays unmet (one line each).

    From ``root`` down its requirements: one the host satisfies is left to the host (its own
    needs are the host's business); one it lacks, or has at a version the requirement refuses,
    comes from the kit, whose wheel's requirements are then followed in turn. A need neither
    meets is reported, not fatal: the check then shows whether it matters.
    """
    from packaging.requirements import Requirement

    chosen: dict[str, KitWheel] = {}
    unmet: list[str] = []
    todo: list[tuple[str, frozenset[str]]] = [(root, root_extras)]
    visited: set[tuple[str, frozenset[str]]] = set()
    while todo:
        name, extras = todo.pop()
        if (name, extras) in visited:
            continue
        visited.add((name, extras))
        wheel = wheels[name]
        chosen[name] = wheel
        for text in wheel.requires:
            req = Requirement(text)
            if req.marker is not None and not any(
                req.marker.evaluate({"extra": extra}) for extra in ("", *extras)
            ):
                continue
            dep = normalize(req.name)
            if dep in chosen:
                continue
            have = installed(dep)
            if have is not None and req.specifier.contains(have, prereleases=True):
                continue
            if dep in wheels and req.specifier.contains(wheels[dep].version, prereleases=True):
                todo.append((dep, frozenset(req.extras)))
                continue
            host = f"the host has {have}" if have else "the host has none"
            unmet.append(f"{wheel.name} needs {req.name}{req.specifier}: {host}, the kit none")
    return sorted(chosen.values(), key=lambda w: w.name), sorted(set(unmet))


def host_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def step_install(ctx: Context) -> dict:
    manifest_path = ctx.kit / "manifest.json"
    if not manifest_path.is_file():
        raise StepFailed(f"no kit at {ctx.kit} (build it with make gpu-kit)")
    manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    venv = ctx.work / "venv"
    ctx.run([sys.executable, "-m", "venv", "--without-pip", venv], limit_s=60, what="venv")
    python = venv / "bin" / "python"
    purelib = Path(
        ctx.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            limit_s=30,
            what="venv paths",
        ).strip()
    )
    # The private environment sees the host's packages (PyTorch, numpy, ...) after its own.
    (purelib / "_tritontune_host.pth").write_text("\n".join(host_site_dirs()) + "\n")
    wheels = {w.name: w for w in map(read_wheel, sorted((ctx.kit / "wheels").glob("*.whl")))}
    chosen, unmet = plan_install(wheels, host_version)
    pip = [python, "-m", "pip"] if host_version("pip") else [sys.executable, "-m", "pip"]
    ctx.run(
        [
            *pip,
            *([] if pip[0] == python else ["--python", python]),
            "install",
            "--no-index",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            *(w.path for w in chosen),
        ],
        limit_s=240,
        what="pip install --no-index",
    )
    with lzma.open(ctx.kit / manifest["server"]["file"]) as packed, tarfile.open(fileobj=packed) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(purelib, filter="data")
        else:  # Python < 3.12 without the backported filters
            tar.extractall(purelib)  # noqa: S202 - our own archive
    stub = purelib / "pytriton/tritonserver/python_backend_stubs/3.12/triton_python_backend_stub"
    libpython = "the host's"
    if not has_libpython(stub):
        if not manifest.get("libpython"):
            raise StepFailed("the host has no libpython3.12.so.1.0 and the kit carries none")
        lib = ctx.work / "lib"
        lib.mkdir(exist_ok=True)
        with lzma.open(ctx.kit / manifest["libpython"]["file"]) as packed:
            (lib / "libpython3.12.so.1.0").write_bytes(packed.read())
        ctx.env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(lib), ctx.env.get("LD_LIBRARY_PATH", "")) if p
        )
        libpython = f"the kit's ({manifest['libpython']['from']})"
    ctx.venv_python = python
    ctx.tritontune = venv / "bin" / "tritontune"
    version = ctx.tt("--version", limit_s=60, what="tritontune --version").strip()
    return {
        "venv": str(venv),
        "installed": [f"{w.name} {w.version}" for w in chosen],
        "unmet": unmet,
        "libpython": libpython,
        "tritontune": version,
    }


def has_libpython(stub: Path) -> bool:
    """Whether the backend stub finds its libpython3.12 (ldd; else the usual places)."""
    name = "libpython3.12.so.1.0"
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (libdir, env.get("LD_LIBRARY_PATH")) if p)
    if shutil.which("ldd"):
        done = subprocess.run(["ldd", str(stub)], capture_output=True, text=True, env=env)
        for line in done.stdout.splitlines():
            if name in line:
                return "not found" not in line
    if libdir and (Path(libdir) / name).is_file():
        return True
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    if Path(ldconfig).exists():
        listed = subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout
        return name in listed
    return False


# -- the model -----------------------------------------------------------------------------------


def config_pbtxt(plan: Plan) -> str:
    kind = "KIND_GPU" if plan.kind == "gpu" else "KIND_CPU"
    parameters = {
        "layers": plan.layers,
        "d_model": plan.d_model,
        "heads": plan.heads,
        "vocab": 30522,
    }
    params = "\n".join(
        f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}' for k, v in parameters.items()
    )
    return (
        f'name: "{MODEL}"\n'
        'backend: "python"\n'
        f"max_batch_size: {plan.max_batch_size}\n"
        f'input [{{ name: "INPUT_IDS" data_type: TYPE_INT64 dims: [ {plan.sequence} ] }}]\n'
        f'output [{{ name: "EMBEDDING" data_type: TYPE_FP32 dims: [ {plan.d_model} ] }}]\n'
        f"instance_group [{{ kind: {kind} count: 1 }}]\n"
        f"{params}\n"
    )


def step_model(ctx: Context) -> dict:
    repo = ctx.work / "model_repository"
    version = repo / MODEL / "1"
    version.mkdir(parents=True, exist_ok=True)
    shutil.copy2(HERE / "encoder_model.py", version / "model.py")
    (repo / MODEL / "config.pbtxt").write_text(config_pbtxt(ctx.plan), encoding="utf-8")
    import yaml  # the host has PyYAML

    (ctx.work / "space.yaml").write_text(yaml.safe_dump(ctx.plan.space), encoding="utf-8")
    return {
        "model": MODEL,
        "kind": ctx.plan.kind,
        "layers": ctx.plan.layers,
        "d_model": ctx.plan.d_model,
        "sequence": ctx.plan.sequence,
        "max_batch_size": ctx.plan.max_batch_size,
    }


# -- tritontune ----------------------------------------------------------------------------------


def step_profile(ctx: Context) -> dict:
    plan = ctx.plan
    ctx.tt(
        "profile",
        "-r",
        "model_repository",
        "-m",
        MODEL,
        "--kind",
        plan.kind,
        "--instances",
        "1",
        "--max-queue-delay",
        "500us",
        "--concurrency",
        plan.profile_loads,
        "--warmup",
        "0.5s",
        "--window",
        plan.window,
        "--json",
        str(ctx.out / "profile.json"),
        "--server-log",
        "profile.tritonserver.log",
        limit_s=150,
        what="profile",
    )
    data = json.loads((ctx.out / "profile.json").read_text(encoding="utf-8"))
    return {"gpu_metrics": data.get("gpu_metrics"), "levels": levels_of(data)}


def levels_of(data: dict) -> list[dict]:
    """Each level of ``profile --json``, in a few figures (with its GPU figures)."""
    found = []
    for level in data.get("levels", []):
        latency = level.get("latency_ms") or {}
        server = level.get("server") or {}
        found.append(
            {
                "load": level.get("load"),
                "throughput": level.get("throughput_infer_per_s"),
                "p50_ms": latency.get("p50"),
                "p99_ms": latency.get("p99"),
                "avg_batch_size": server.get("avg_batch_size"),
                "compute_ms": None
                if server.get("avg_compute_s") is None
                else round(server["avg_compute_s"] * 1e3, 3),
                "gpu": level.get("gpu"),
            }
        )
    return found


def step_search(ctx: Context) -> dict:
    plan = ctx.plan
    ctx.tt(
        "search",
        "-r",
        "model_repository",
        "-m",
        MODEL,
        "--slo-p99",
        plan.slo,
        "--space",
        "space.yaml",
        "--trials",
        str(plan.trials),
        "--seed",
        "1",
        "--storage",
        "sqlite:///study.db",
        "--study",
        STUDY,
        "--max-load",
        str(plan.max_load),
        "--playoff-top",
        str(plan.playoff_top),
        "--playoff-rounds",
        "2",
        "--load-processes",
        "auto",
        "--results",
        str(ctx.out / "search.results.json"),
        "--server-log",
        "search.tritonserver.log",
        limit_s=330,
        what="search",
    )
    return summarize_search(json.loads((ctx.out / "search.results.json").read_text()))


def summarize_search(results: dict) -> dict:
    """The baseline, the winner and every screened config with its GPU figures."""

    def point(p: dict | None) -> dict | None:
        if not p:
            return None
        operating = [lv for lv in p.get("levels", []) if lv.get("load") == p.get("load")]
        return {
            "throughput": p.get("throughput"),
            "p99_ms": p.get("p99_ms"),
            "load": p.get("load"),
            "avg_batch_size": p.get("avg_batch_size"),
            "gpu": operating[-1].get("gpu") if operating else None,
        }

    def knobs(config: dict | None) -> str:
        if not config:
            return "?"
        group = config.get("instance_group") or [{}]
        bits = [f"{group[0].get('count', '?')}x {group[0].get('kind', '?')}"]
        bits.append(f"batch<={config.get('max_batch_size')}")
        if config.get("dynamic_batching"):
            bits.append(f"batching {config.get('max_queue_delay_us')} us")
        else:
            bits.append("no batching")
        return ", ".join(bits)

    best = results.get("best")
    return {
        "gpu_metrics": results.get("gpu_metrics"),
        "slo_p99_ms": results.get("slo_p99_ms"),
        "baseline": point(results.get("baseline")),
        "winner": None
        if not best
        else {
            "trial": best.get("trial"),
            "config": knobs(best.get("config")),
            "figures": best.get("figures"),
            "improvement_over_baseline": best.get("improvement_over_baseline"),
            **(point(best.get("operating_point")) or {}),
        },
        "configs": [
            {"trial": t.get("trial"), "config": knobs(t.get("config"))}
            | (point(t.get("screening_operating_point")) or {})
            for t in results.get("screening_top", [])
        ],
        "failed": results.get("failed", []),
        "completed_trials": results.get("completed_trials"),
    }


def step_export(ctx: Context) -> dict:
    ctx.tt(
        "export",
        "--study",
        STUDY,
        "--storage",
        "sqlite:///study.db",
        "--out",
        "tuned",
        limit_s=90,
        what="export",
    )
    record = ctx.work / "tuned" / MODEL / "tritontune.lock.yaml"
    if record.is_file():
        shutil.copy2(record, ctx.out / "tritontune.lock.yaml")
    return {"repository": str(ctx.work / "tuned"), "record": record.is_file()}


def step_check(ctx: Context) -> dict:
    output = ctx.tt(
        "check",
        "tuned",
        "--rounds",
        str(ctx.plan.check_rounds),
        "--tolerance",
        ctx.plan.check_tolerance,
        "--window",
        ctx.plan.window,
        "--junit",
        "check.junit.xml",
        "--server-log",
        "check.tritonserver.log",
        limit_s=150,
        what="check",
    )
    return {"output": [line for line in output.splitlines() if line.strip()][-6:]}


# -- the run -------------------------------------------------------------------------------------


def run_step(ctx: Context, steps: list[Step], name: str, fn: Callable[[Context], dict]) -> Step:
    step = Step(name)
    steps.append(step)
    if ctx.remaining() < 15:
        step.skipped = "the check's time is up"
        print(f"[{name}] skipped: {step.skipped}", flush=True)
        return step
    print(f"[{name}] ...", flush=True)
    started = time.monotonic()
    try:
        step.detail = fn(ctx)
        step.ok = True
    except StepFailed as err:
        step.error = str(err)
    except Exception as err:  # a bug of the check's: recorded, and the next step still runs
        step.error = f"{type(err).__name__}: {err}"
        ctx.log.write(traceback.format_exc())
    step.seconds = round(time.monotonic() - started, 1)
    state = "ok" if step.ok else f"FAILED: {step.error}"
    print(f"[{name}] {state} ({step.seconds} s)", flush=True)
    return step


def summary_text(report: dict) -> str:
    lines = [f"tritontune GPU check, {report['date']} ({report['mode']} plan), {report['seconds']} s"]
    host = report.get("host") or {}
    for gpu in host.get("gpus", []):
        lines.append(f"GPU: {gpu.get('name')}, driver {gpu.get('driver')}, {gpu.get('memory')}")
    if host.get("cuda_driver_api"):
        lines.append(f"CUDA (driver API): {host['cuda_driver_api']}")
    torch = host.get("torch") or {}
    if torch.get("version"):
        lines.append(
            f"PyTorch {torch['version']} (CUDA {torch.get('cuda')}), "
            f"sees {', '.join(torch.get('devices') or []) or 'no GPU'}"
        )
    for step in report["steps"]:
        state = "ok" if step["ok"] else ("skipped: " + step["skipped"] if step["skipped"] else "FAILED")
        lines.append(f"- {step['name']}: {state} ({step['seconds']} s)")
        if step["error"]:
            lines.append(f"    {step['error']}")
    search = next((s["detail"] for s in report["steps"] if s["name"] == "search" and s["ok"]), None)
    if search:
        lines.append(f"search, p99 <= {search.get('slo_p99_ms')} ms:")
        for label, p in (("baseline", search.get("baseline")), ("winner", search.get("winner"))):
            if p:
                lines.append(
                    f"  {label}: {fmt(p.get('throughput'))} infer/s at load {p.get('load')}, "
                    f"p99 {fmt(p.get('p99_ms'))} ms, batch {fmt(p.get('avg_batch_size'))}"
                    + (f" [{p['config']}]" if p.get("config") else "")
                )
        for c in search.get("configs", []):
            lines.append(
                f"  trial {c['trial']} [{c['config']}]: {fmt(c.get('throughput'))} infer/s, "
                f"p99 {fmt(c.get('p99_ms'))} ms; {gpu_line(c.get('gpu'))}"
            )
        if search.get("gpu_metrics"):
            lines.append(f"  {search['gpu_metrics']}")
    return "\n".join(lines) + "\n"


def fmt(value: Any) -> str:
    return f"{value:.1f}" if isinstance(value, (int, float)) else str(value)


def gpu_line(gpus: list[dict] | None) -> str:
    if not gpus:
        return "no GPU figures"
    parts = []
    for g in gpus:
        util = g.get("utilization_mean")
        used = g.get("memory_used_max_bytes")
        parts.append(
            f"GPU {'?' if util is None else f'{util:.0%}'} util, "
            f"{'?' if used is None else f'{used / 2**30:.1f} GiB'}"
        )
    return "; ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the JSON and summary go")
    parser.add_argument("--kit", type=Path, default=REPO / "gpu-kit")
    parser.add_argument("--work", type=Path, help="scratch folder (default: a new temporary one)")
    parser.add_argument("--cpu", action="store_true", help="the CPU rehearsal, even with a GPU")
    parser.add_argument("--timeout", type=float, default=450.0, help="seconds for the whole check")
    args = parser.parse_args(argv)
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    work = (args.work or Path(tempfile.mkdtemp(prefix="tritontune-gpu-check-"))).resolve()
    work.mkdir(parents=True, exist_ok=True)
    smi = {} if args.cpu else nvidia_smi()
    plan = GPU_PLAN if smi.get("gpus") else CPU_PLAN
    steps: list[Step] = []
    with open(out / "steps.log", "w", encoding="utf-8") as log:
        ctx = Context(
            out=out, work=work, kit=args.kit.resolve(), plan=plan, log=log, timeout_s=args.timeout
        )
        print(f"GPU check: {plan.kind} plan, work in {work}, results to {out}", flush=True)
        host = run_step(ctx, steps, "host", step_host)
        install = run_step(ctx, steps, "install", step_install)
        run_step(ctx, steps, "model", step_model)
        for name, fn in (("profile", step_profile), ("search", step_search)):
            if install.ok:
                run_step(ctx, steps, name, fn)
            else:
                steps.append(Step(name, skipped="the install failed"))
        search_ok = steps[-1].ok
        for name, fn in (("export", step_export), ("check", step_check)):
            if search_ok and (name == "export" or steps[-1].ok):
                run_step(ctx, steps, name, fn)
            else:
                steps.append(Step(name, skipped=f"nothing to {name}: the step before failed"))
        for log_name in ("profile", "search", "check"):
            server_log = work / f"{log_name}.tritonserver.log"
            if server_log.is_file():
                log.write(f"\n== {server_log.name} (last 60 lines)\n")
                log.writelines(server_log.read_text(errors="replace").splitlines(True)[-60:])
    report = {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "mode": plan.kind,
        "plan": asdict(plan),
        "seconds": round(time.monotonic() - ctx.started, 1),
        "host": host.detail,
        "steps": [asdict(s) for s in steps],
        "ok": all(s.ok for s in steps),
    }
    (out / "gpu-check.json").write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    text = summary_text(report)
    (out / "gpu-check.txt").write_text(text, encoding="utf-8")
    print(text, end="")
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
