"""The session's load settings reach every measurement: ``--load-processes auto`` gives a single
class's level and a workload's level alike the same cap on load processes (the cores a local
server leaves), a fixed count none. The measurements themselves are faked (no server): the thing
under test is what the session asks of them."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.measure.client_cost import ClientCost
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.mixed import ClassRequests
from tritontune.measure.traffic import parse_traffic
from tritontune.serving import session as session_module
from tritontune.serving.session import TuningSession

TRAFFIC = parse_traffic(
    {"classes": [{"name": "a", "rate": 100}, {"name": "b", "rate": 200}]}, where="test workload"
)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """What the session asked of each measurement (its keyword arguments)."""
    calls: list[dict[str, Any]] = []

    def measured(*_: object, **kwargs: Any) -> SimpleNamespace:
        calls.append(kwargs)
        return SimpleNamespace(latency=SimpleNamespace(count=1), error_count=0, client=None)

    monkeypatch.setattr(session_module, "measure_load", measured)
    monkeypatch.setattr(session_module, "measure_traffic", measured)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    return calls


def loaded_session(example_repository: Path, processes: int | None, launch: str) -> TuningSession:
    """A session with a config loaded on a stand-in server (``launch``: local or remote)."""
    session = TuningSession(
        load_model_source(example_repository, "mlp"), load=LoadSettings(processes=processes)
    )
    shutil.rmtree(session.server.work_dir, ignore_errors=True)  # the real one is never started
    capabilities = SimpleNamespace(gpu_count=0)
    info = SimpleNamespace(launch=launch, metrics_url=None, capabilities=capabilities)
    session.server = SimpleNamespace(  # type: ignore[assignment]
        check_alive=lambda: None, endpoint=lambda: "127.0.0.1:1", info=info
    )
    session._requests, session._loaded = [object()], Variant()
    session._class_requests = {name: ClassRequests("mlp", [object()]) for name in ("a", "b")}
    return session


@pytest.mark.parametrize(("launch", "cap"), [("local", 7), ("remote", 8)])
def test_auto_caps_a_workload_level_as_a_single_class_level(
    example_repository: Path, asked: list[dict[str, Any]], launch: str, cap: int
):
    session = loaded_session(example_repository, None, launch)
    session.measure(LoadSpec.concurrency(4))
    session.measure_traffic(TRAFFIC, 300.0)
    single, workload = asked
    assert single["processes"] == workload["processes"] == 1  # auto starts with one
    assert single["max_processes"] == workload["max_processes"] == cap


def test_a_fixed_count_is_used_as_it_is(example_repository: Path, asked: list[dict[str, Any]]):
    session = loaded_session(example_repository, 3, "local")
    session.measure(LoadSpec.concurrency(4))
    session.measure_traffic(TRAFFIC, 300.0)
    assert [(kw["processes"], kw["max_processes"]) for kw in asked] == [(3, None), (3, None)]


def test_auto_starts_a_heavier_level_where_the_last_one_ended(
    example_repository: Path, monkeypatch: pytest.MonkeyPatch
):
    """Under auto a level that needed 4 processes teaches the session: a heavier level of the
    same kind starts with 4, a lighter one, or one of another kind, from one."""
    started: list[tuple[str, int]] = []

    def measured(*args: Any, **kwargs: Any) -> SimpleNamespace:
        started.append((str(args[3]), kwargs["processes"]))
        cost = ClientCost(None, 1.0, 0.5, 0.001, bound_windows=0, windows=3, processes=4)
        return SimpleNamespace(latency=SimpleNamespace(count=1), error_count=0, client=cost)

    monkeypatch.setattr(session_module, "measure_load", measured)
    monkeypatch.setattr(session_module, "measure_traffic", measured)
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    session = loaded_session(example_repository, None, "local")
    session.measure(LoadSpec.rate(8000))
    session.measure(LoadSpec.rate(16000))
    session.measure(LoadSpec.rate(2000))
    session.measure(LoadSpec.concurrency(64))
    session.measure_traffic(TRAFFIC, 9000.0)  # a workload's total rate is a rate
    assert [p for _, p in started] == [1, 4, 1, 1, 4], started
