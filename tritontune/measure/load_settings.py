"""How load is generated for every measurement of a command: which engine, how many processes.

Chosen once per command (``--load-engine``, ``--load-processes``) and held by the session, since
a search measures with several :class:`~tritontune.measure.measurement.MeasureSettings` (short
screening levels, longer playoff rounds) but always with the same load generator.
"""

from __future__ import annotations

from dataclasses import dataclass

from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadEngine

#: ``--load-processes auto``: start with one, add processes while a level is client-bound.
AUTO = "auto"


@dataclass(frozen=True)
class LoadSettings:
    """The load generator for a command's measurements."""

    engine: LoadEngine = LoadEngine.ASYNCIO
    processes: int | None = 1
    """Load processes for the asyncio engine; None: ``auto`` (more while a level is client-bound,
    up to :func:`tritontune.measure.load_processes.auto_processes_limit`)."""

    def refuse_traffic(self) -> None:
        """Refuse a traffic mix with an engine that cannot send one (said before a server is
        launched: a workload's commands call it first)."""
        if self.engine == LoadEngine.PERF_ANALYZER:
            raise InputError(
                "--load-engine perf_analyzer measures one class of traffic at a time; a "
                "workload's classes (each its own stream, priority and objective) need the "
                "asyncio engine"
            )

    def describe(self) -> str:
        if self.engine == LoadEngine.PERF_ANALYZER:
            return "perf_analyzer"
        processes = AUTO if self.processes is None else str(self.processes)
        return f"asyncio, {processes} load process{'es' if processes != '1' else ''}"


def parse_load_settings(engine: str, processes: str) -> LoadSettings:
    """The options' values, or an :class:`InputError` naming the option and what it expects."""
    try:
        chosen = LoadEngine(engine.strip().lower().replace("-", "_"))
    except ValueError:
        raise InputError(
            f"--load-engine: {engine!r} is not one of {', '.join(e.value for e in LoadEngine)}"
        ) from None
    text = processes.strip().lower()
    count: int | None
    if text == AUTO:
        count = None
    else:
        try:
            count = int(text)
        except ValueError:
            count = 0
        if count < 1:
            raise InputError(
                f"--load-processes: expected a count of 1 or more, or auto; got {processes!r}"
            )
    if chosen == LoadEngine.PERF_ANALYZER and count != 1:
        raise InputError(
            "--load-processes: perf_analyzer is one process of its own; "
            "leave --load-processes at 1 with --load-engine perf_analyzer"
        )
    return LoadSettings(chosen, count)
