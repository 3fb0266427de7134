"""``tritontune check``: re-measure a tuned repository and fail when it regressed.

Every model and tuning record is read and validated before any server starts (a broken record is
an input error, not a measurement); then each model is loaded on a real server and measured at
its recorded load in rounds (:mod:`tritontune.check.verdict`). A model fails when p99 is over the
SLO, throughput fell more than the tolerance below the record, or requests failed. Models tuned
for a workload are checked together, as they serve it; a pipeline end to end, its composing
models never alone. Differences that weaken the comparison without voiding it (another machine,
version, an edited config) are warnings beside the verdict. See ``docs/cli/check.md``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from tritontune import __version__
from tritontune.check.verdict import (
    Criterion,
    RoundFigures,
    judge,
    needs_more_rounds,
    objective_criterion,
)
from tritontune.config.model_config import config_digest
from tritontune.config.pipeline import describe_configs, is_pipeline, load_pipeline
from tritontune.config.repository import ModelSource, load_model_source
from tritontune.config.variant import Variant, describe_config
from tritontune.errors import InputError, ServerDiedError, TritonTuneError
from tritontune.hostinfo import HostInfo, describe_host
from tritontune.measure.load_settings import LoadSettings
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.measurement import Measurement, MeasureSettings
from tritontune.measure.mixed import ClassVerdict, TrafficMeasurement
from tritontune.measure.mixed import judge as judge_class
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.traffic import Layout, Traffic, read_traffic
from tritontune.server.factory import LaunchSettings
from tritontune.serving.bench import Bench
from tritontune.serving.faults import with_restarts
from tritontune.serving.opening import open_group_session, open_session
from tritontune.serving.served import GROUP_SEPARATOR
from tritontune.serving.session import TuningSession
from tritontune.study.figures import StepFigure, median_steps
from tritontune.tuning_record import (
    INPUT_DATA_FILE,
    RECORD_FILE,
    TuningRecord,
    WorkloadRecord,
    read_record,
)

#: Rounds are full measurements with longer windows than a search's: more samples, a truer p99.
CHECK_MEASURE = MeasureSettings(warmup_s=0.5, window_s=1.0, min_window_requests=200, max_windows=6)


@dataclass(frozen=True)
class CheckSettings:
    tolerance: float = 0.10
    """How far below the recorded throughput a model may fall before it fails."""
    min_rounds: int = 3
    max_rounds: int = 5
    measure: MeasureSettings = CHECK_MEASURE
    launch: LaunchSettings = field(default_factory=LaunchSettings)
    load: LoadSettings = field(default_factory=LoadSettings)
    """What generates the load of the rounds (engine, processes)."""
    failure_log_dir: Path | None = None
    """Where a model's server log is kept (``check-MODEL.tritonserver.log``) when it failed."""


@dataclass
class ModelCheck:
    """The outcome for one model of the repository."""

    name: str
    record: TuningRecord | None
    """None for a model without a tuning record: validated and loaded, not measured."""
    problems: list[str] = field(default_factory=list)
    """Why the model could not be validated, loaded or measured (each one fails it)."""
    warnings: list[str] = field(default_factory=list)
    criteria: list[Criterion] = field(default_factory=list)
    rounds: list[RoundFigures] = field(default_factory=list)
    measurements: list[Measurement] = field(default_factory=list)
    """Each round's full measurement, in the order of ``rounds``."""
    knobs: dict = field(default_factory=dict)
    """The knobs of the config as loaded (:func:`describe_config`); empty when it did not load."""
    duration_s: float = 0.0
    server_log: Path | None = None
    """Where the server's log was kept (``--server-log``, or because the model failed)."""
    server_log_reason: str = ""

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.criteria)

    @property
    def steps(self) -> tuple[StepFigure, ...]:
        """A pipeline's composing models over the rounds, each figure the median of the rounds':
        where an end-to-end request's time went, step by step; empty for a single model."""
        return median_steps(
            [StepFigure.of(model, split) for model, split in m.steps.items()] for m in self.measurements
        )

    @property
    def confidence(self) -> str | None:
        """The weakest confidence among the criteria that decided the verdict."""
        deciding = [c for c in self.criteria if c.passed == self.passed] or self.criteria
        if not deciding:
            return None
        order = ("low", "medium", "high")
        return min((c.confidence for c in deciding), key=order.index)


@dataclass
class WorkloadCheck:
    """The outcome for the models tuned for one workload, checked together."""

    models: tuple[str, ...]
    record: WorkloadRecord
    traffic: Traffic | None = None
    rate: float = 0.0
    """The total rate sent (req/s): the record's lowest capacity less the tolerance."""
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    criteria: list[Criterion] = field(default_factory=list)
    """One per class: its objective met in most rounds."""
    rounds: list[TrafficMeasurement] = field(default_factory=list)
    verdicts: list[dict[str, ClassVerdict]] = field(default_factory=list)
    """Each round's verdict per class, in the order of ``rounds``."""
    duration_s: float = 0.0
    server_log: Path | None = None
    server_log_reason: str = ""

    @property
    def name(self) -> str:
        return " + ".join(self.models)

    @property
    def passed(self) -> bool:
        return not self.problems and all(c.passed for c in self.criteria)

    @property
    def serving(self) -> str:
        """How the models serve the workload, in words (the reports say it)."""
        if self.record.layout == Layout.SHARED and len(self.record.models) > 1:
            return "several models on one server"
        return f"{self.record.layout} layout"

    def class_p99s(self, name: str) -> list[float]:
        return [m.figures(name).latency.p99 for m in self.rounds if m.figures(name).latency.count]


@dataclass
class CheckReport:
    repository: Path
    tolerance: float
    host: HostInfo
    server_version: str = "unknown"
    models: list[ModelCheck] = field(default_factory=list)
    workloads: list[WorkloadCheck] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(m.passed for m in self.models) and all(w.passed for w in self.workloads)


@dataclass(frozen=True)
class _Model:
    """A model found in the repository, read but not yet loaded."""

    name: str
    directory: Path
    source: ModelSource | None
    record: TuningRecord | None
    problem: str | None
    workload: WorkloadRecord | None = None
    """The record of a model tuned for a workload (``record`` is then None)."""
    traffic: Traffic | None = None
    """The workload file beside :attr:`workload`, read."""
    part_of: str | None = None
    """The pipeline whose record lists this model: checked in it, end to end, never alone."""
    composing: tuple[_Model, ...] = ()
    """A pipeline's composing models, as its record lists them (empty for one model)."""


def find_models(repository: Path) -> list[_Model]:
    """Every model directory of ``repository`` with its config and record read.

    A config that can't be read (or an ensemble whose graph Triton would refuse) is a problem of
    that model (it fails the check); a record that can't be read is an input error (which file,
    which field), raised before anything runs.
    """
    repository = Path(repository)
    if not repository.is_dir():
        raise InputError(f"{repository}: model repository not found (expected a directory)")
    directories = sorted(
        p
        for p in repository.iterdir()
        if p.is_dir()
        and not p.name.startswith(".")
        and ((p / "config.pbtxt").is_file() or any(c.name.isdigit() for c in p.iterdir()))
    )
    if not directories:
        raise InputError(f"{repository}: holds no models (expected NAME/config.pbtxt)")
    models = []
    for directory in directories:
        record_path = directory / RECORD_FILE
        record = read_record(record_path) if record_path.is_file() else None
        if record is not None and record.model != directory.name:
            raise InputError(
                f"{record_path}: model: {record.model!r} differs from the directory name "
                f"{directory.name!r}"
            )
        try:
            source, problem = load_model_source(repository, directory.name), None
            if is_pipeline(source.base_config):
                load_pipeline(repository, directory.name)  # its graph, as Triton checks it
        except TritonTuneError as err:
            source, problem = None, str(err)
        if isinstance(record, WorkloadRecord):
            traffic = read_traffic(directory / record.workload_file)
            models.append(_Model(directory.name, directory, source, None, problem, record, traffic))
        else:
            models.append(_Model(directory.name, directory, source, record, problem))
    _check_routes(models)
    models = _with_pipelines(models)
    if not any(m.record or m.workload for m in models):
        raise InputError(
            f"{repository}: no tuned models (no {RECORD_FILE} in any model directory); "
            "write one with `tritontune export`"
        )
    return models


def _check_routes(models: list[_Model]) -> None:
    """Every model a workload record routes a class to is in the repository, exported with the
    same workload: a model directory holds one config, so a model that two workloads route to
    (two groups of models exported into one repository) is refused, as is a shared model's
    record whose routes are not what the classes of its workload file name."""
    by_name = {m.name: m for m in models}
    for model in models:
        if model.workload is None:
            continue
        record = model.directory / RECORD_FILE
        for traffic_class, target in model.workload.routes.items():
            other = by_name.get(target)
            where = f"{record}: workload.routes.{traffic_class}"
            if other is None:
                raise InputError(f"{where}: model {target!r} is not in the repository")
            if other.workload is None:
                raise InputError(
                    f"{where}: model {target!r} has no workload record (it was not exported "
                    "with this workload)"
                )
            if other.workload.routes != model.workload.routes:
                raise InputError(
                    f"{where}: model {target!r} is exported with another workload (its record "
                    f"routes {_routes_text(other.workload.routes)}); a directory holds one "
                    "config: export each workload into a repository of its own"
                )
        named = model.traffic.routes(model.name) if model.traffic else model.workload.routes
        if model.workload.layout == Layout.SHARED and named != model.workload.routes:
            raise InputError(
                f"{record}: workload.routes: {_routes_text(model.workload.routes)} is not what the "
                f"classes of {model.workload.workload_file} call ({_routes_text(named)})"
            )


def _routes_text(routes: dict[str, str]) -> str:
    return ", ".join(f"{c} -> {m}" for c, m in routes.items())


def _with_pipelines(models: list[_Model]) -> list[_Model]:
    """``models`` with each pipeline's composing models marked as its own (checked in it, never
    alone); every model a pipeline's record lists must be in the repository, without a record of
    its own and in no other pipeline (one directory holds one config)."""
    by_name = {m.name: m for m in models}
    owner: dict[str, str] = {}
    for model in models:
        pipeline = model.record.pipeline if model.record else None
        for index, name in enumerate(pipeline.names if pipeline else ()):
            where = f"{model.directory / RECORD_FILE}: pipeline.models.{index}.model"
            other = by_name.get(name)
            if other is None:
                raise InputError(f"{where}: model {name!r} is not in the repository")
            if other.record is not None or other.workload is not None:
                raise InputError(
                    f"{where}: model {name!r} has a tuning record of its own; a model is checked "
                    "alone or in its pipeline, not both (export them into separate repositories)"
                )
            if name in owner:
                raise InputError(
                    f"{where}: model {name!r} is also a composing model of pipeline "
                    f"{owner[name]!r}, whose record wants its own config of it (export the "
                    "pipelines into separate repositories)"
                )
            owner[name] = model.name
    marked = []
    for m in models:
        if m.name in owner:
            m = replace(m, part_of=owner[m.name])
        elif m.record is not None and m.record.pipeline is not None:
            m = replace(m, composing=tuple(by_name[n] for n in m.record.pipeline.names))
        marked.append(m)
    return marked


def _changed_since_export(
    source: ModelSource, knobs: dict | None, config_sha256: str, model_files: dict[str, str]
) -> list[str]:
    """How a model's directory differs from its export: the config (with the knobs that moved,
    where the record has the model's own ``knobs``) and the model files."""
    found = []
    config = source.base_config
    if config_digest(config) != config_sha256:
        detail = ""
        if knobs is not None:
            now = describe_config(config)
            changed = sorted(k for k in set(now) | set(knobs) if now.get(k) != knobs.get(k))
            detail = ", ".join(f"{k}: {knobs.get(k, '-')} -> {now.get(k, '-')}" for k in changed)
        found.append("config.pbtxt changed since export" + (f" ({detail})" if detail else ""))
    if model_files:
        now_files = source.file_digests()
        changed_files = sorted(k for k in model_files if now_files.get(k) != model_files[k])
        if changed_files:
            found.append(f"model files changed since export: {', '.join(changed_files)}")
    return found


def static_warnings(model: _Model, host: HostInfo) -> list[str]:
    """What makes the record a weaker yardstick for this run (each is said, none fails)."""
    record: TuningRecord | WorkloadRecord | None = model.record or model.workload
    if record is None:
        return [f"no {RECORD_FILE}: validated and loaded, not measured"]
    found = []
    pipeline = record.pipeline if isinstance(record, TuningRecord) else None
    if model.source is not None:
        # A pipeline's knobs are its composing models': the ensemble's config has none to name.
        knobs = None if pipeline is not None else record.knobs
        found += _changed_since_export(model.source, knobs, record.config_sha256, record.model_files)
    if pipeline is not None:
        for listed, step in zip(pipeline.models, model.composing, strict=True):
            if step.source is not None:
                changes = _changed_since_export(
                    step.source, listed.knobs, listed.config_sha256, listed.model_files
                )
                found += [f"composing model {step.name}: {change}" for change in changes]
    if record.tritontune_version != __version__:
        found.append(f"recorded by tritontune {record.tritontune_version}, checking with {__version__}")
    differences = record.hardware.differences(host)
    if differences:
        found.append(
            "recorded on other hardware (" + "; ".join(differences) + "): throughput is compared "
            "across machines"
        )
    if isinstance(record, TuningRecord) and not record.operating_point.confirmed:
        found.append(
            "the recorded operating point is a screening figure: the search did not re-measure it"
        )
    return found


def run_check(
    repository: Path,
    settings: CheckSettings | None = None,
    *,
    on_model_start: Callable[[str], None] | None = None,
    on_round: Callable[[str, int, Measurement], None] | None = None,
) -> CheckReport:
    """Check every model of ``repository``; see the module docstring."""
    settings = settings or CheckSettings()
    if not 0 <= settings.tolerance < 1:
        raise InputError(f"--tolerance: {settings.tolerance:.0%} is not between 0 % and 100 %")
    host = describe_host()
    report = CheckReport(Path(repository), settings.tolerance, host)
    models = find_models(repository)
    checked: set[str] = set()
    for model in models:
        if model.part_of is not None:
            continue  # measured in its pipeline, end to end
        if model.workload is not None:
            if model.name not in checked:
                group = [m for m in models if m.name in model.workload.models]
                checked.update(m.name for m in group)
                if on_model_start:
                    on_model_start(" + ".join(m.name for m in group))
                report.workloads.append(_check_workload(group, report, settings))
            continue
        if on_model_start:
            on_model_start(model.name)
        check = ModelCheck(model.name, model.record, warnings=static_warnings(model, host))
        started = time.monotonic()
        if model.source is None:
            check.problems.append(model.problem or "could not be read")
        else:
            _check_on_server(model, model.source, check, report, settings, on_round)
        check.duration_s = time.monotonic() - started
        report.models.append(check)
    return report


def _check_on_server(
    model: _Model,
    source: ModelSource,
    check: ModelCheck,
    report: CheckReport,
    settings: CheckSettings,
    on_round: Callable[[str, int, Measurement], None] | None,
) -> None:
    record = model.record
    input_data = model.directory / INPUT_DATA_FILE
    shape = RequestShape(
        batch_size=record.load.batch_size if record else 1,
        dynamic_dim=record.load.dynamic_dim if record else 16,
        input_data=input_data if input_data.is_file() else None,
    )
    pipeline = record.pipeline if record is not None else None
    # A BLS model's calls are in its code: its record names them, as the search was told.
    composing = pipeline.names if pipeline is not None and pipeline.bls else ()
    opened = partial(open_session, source.directory.parent, source.name, composing=composing)
    with _checking_session(opened, source.name, check, settings, shape, settings.measure) as session:
        _check_loaded(session, check, report, record, settings, on_round)


@contextmanager
def _checking_session(
    open_bench: Callable[..., TuningSession],
    log_name: str,
    check: ModelCheck | WorkloadCheck,
    settings: CheckSettings,
    shape: RequestShape | None,
    measure: MeasureSettings,
) -> Iterator[TuningSession]:
    """A server for one check, opened by ``open_bench`` (a session of one model, of a pipeline,
    or of a group of models) with the check's options; its log is kept (beside the JUnit file,
    as ``check-<log_name>.tritonserver.log``) when the check failed, and where it was kept is
    said in the check."""
    session = open_bench(
        launch=settings.launch,
        load=settings.load,
        request_shape=shape,
        settings=measure,
        failure_log=settings.failure_log_dir / f"check-{log_name}.tritonserver.log"
        if settings.failure_log_dir is not None
        else None,
    )
    try:
        with session:
            try:
                yield session
            finally:
                if not check.passed:
                    session.server.keep_log_because(f"the check of {check.name} failed")
    finally:
        check.server_log = session.server.kept_log
        check.server_log_reason = session.server.kept_log_reason


def _version_warnings(record: TuningRecord | WorkloadRecord, session: Bench) -> list[str]:
    if record.triton_version == session.info.version:
        return []
    return [f"recorded on Triton {record.triton_version}, checking on {session.info.version}"]


def _check_loaded(
    session: Bench,
    check: ModelCheck,
    report: CheckReport,
    record: TuningRecord | None,
    settings: CheckSettings,
    on_round: Callable[[str, int, Measurement], None] | None,
) -> None:
    report.server_version = session.info.version
    if record is not None:
        check.warnings += _version_warnings(record, session)
    try:
        # config.pbtxt as exported (a pipeline: each composing model's, then the ensemble)
        session.load(Variant())
        check.knobs = describe_configs(session.configs(Variant()))
    except TritonTuneError as err:
        check.problems.append(str(err))
        return
    if record is None:
        return
    load = record.load.spec()
    try:
        _measure_rounds(session, load, record, check, settings, on_round)
    except (ServerDiedError, TritonTuneError) as err:
        check.problems.append(f"measuring at {load.label()}: {err}")


#: A model just loaded runs slow at first (onnxruntime's arena, thread pools, caches): the first
#: round warms up for this long, so it measures the same steady state as the others.
FIRST_ROUND_WARMUP_S = 3.0


def _measure_rounds(
    session: Bench,
    load: LoadSpec,
    record: TuningRecord,
    check: ModelCheck,
    settings: CheckSettings,
    on_round: Callable[[str, int, Measurement], None] | None,
) -> None:
    first = replace(settings.measure, warmup_s=max(FIRST_ROUND_WARMUP_S, settings.measure.warmup_s))

    def measure_round() -> None:
        measure = partial(session.measure, load, first if not check.rounds else settings.measure)
        measurement, _ = with_restarts(session, measure, reload=True)
        total = measurement.latency.count + measurement.error_count
        check.measurements.append(measurement)
        check.rounds.append(
            RoundFigures(
                throughput=measurement.throughput,
                p99_s=measurement.latency.p99 if measurement.latency.count else float("inf"),
                error_rate=measurement.error_count / total if total else 1.0,
            )
        )
        if on_round:
            on_round(check.name, len(check.rounds), measurement)

    def judge_rounds() -> list[Criterion]:
        check.criteria = judge(
            check.rounds,
            slo_p99_s=record.slo_p99_s,
            recorded_throughput=record.reference_throughput,
            tolerance=settings.tolerance,
        )
        return check.criteria

    _rounds_until_agreed(measure_round, lambda: len(check.rounds), judge_rounds, settings)


def _rounds_until_agreed(
    measure_round: Callable[[], None],
    rounds_done: Callable[[], int],
    judge_rounds: Callable[[], list[Criterion]],
    settings: CheckSettings,
) -> None:
    """``min_rounds`` rounds, then two more at a time while some criterion's rounds disagree, up
    to ``max_rounds`` (odd counts: a median, never a tie). ``judge_rounds`` keeps its verdict
    where the check shows it, so a round that raises leaves the last verdict in place."""
    target = settings.min_rounds
    while True:
        while rounds_done() < target:
            measure_round()
        if not needs_more_rounds(judge_rounds()) or target >= settings.max_rounds:
            return
        target = min(settings.max_rounds, target + 2)


#: A workload's rounds: each class needs its own tail, so the windows wait for enough answers.
WORKLOAD_CHECK_MEASURE = MeasureSettings(
    warmup_s=1.0, window_s=1.0, min_window_requests=100, max_windows=6
)


def _check_workload(group: list[_Model], report: CheckReport, settings: CheckSettings) -> WorkloadCheck:
    """Send the workload again to the models that serve it; see the module docstring."""
    first = group[0]
    assert first.workload is not None
    record = first.workload
    check = WorkloadCheck(tuple(m.name for m in group), record)
    for model in group:
        check.warnings += [f"{model.name}: {w}" for w in static_warnings(model, report.host)]
    started = time.monotonic()
    broken = [f"{m.name}: {m.problem or 'could not be read'}" for m in group if m.source is None]
    if broken:
        check.problems += broken
        return check
    traffic = check.traffic = first.traffic
    assert traffic is not None  # read with the record (find_models)
    check.rate = record.reference_rate * (1 - settings.tolerance)
    source = first.source
    assert source is not None  # checked above: every source was read
    repository = first.directory.parent
    opened: Callable[..., TuningSession]
    if traffic.routed:  # several models, each class calling its own: one server for them all
        opened = partial(open_group_session, repository, traffic)
        log_name = GROUP_SEPARATOR.join(traffic.models)
    else:
        opened, log_name = partial(open_session, repository, source.name), source.name
    try:
        # --window applies to a workload's rounds too (its warm-up and the answers each window
        # waits for are the workload's own)
        measure = replace(WORKLOAD_CHECK_MEASURE, window_s=settings.measure.window_s)
        with _checking_session(opened, log_name, check, settings, None, measure) as session:
            report.server_version = session.info.version
            _measure_workload(session, group, check, settings)
    finally:
        check.duration_s = time.monotonic() - started
    return check


def _measure_workload(
    session: TuningSession, group: list[_Model], check: WorkloadCheck, settings: CheckSettings
) -> None:
    record, traffic = check.record, check.traffic
    assert traffic is not None
    check.warnings += _version_warnings(record, session)
    sources = {m.name: m.source for m in group if m.source is not None}
    try:
        if record.layout == Layout.ENDPOINTS:
            session.load_routes({c: sources[m] for c, m in record.routes.items()})
        else:
            session.load(Variant())  # config.pbtxt as exported (a group's: every model's)
    except TritonTuneError as err:
        check.problems.append(str(err))
        return

    def measure_round() -> None:
        measure = partial(session.measure_traffic, traffic, check.rate)
        measurement, _ = with_restarts(session, measure, reload=True)
        check.rounds.append(measurement)
        check.verdicts.append(
            {c.name: judge_class(c, measurement.figures(c.name)) for c in traffic.classes}
        )

    def judge_rounds() -> list[Criterion]:
        check.criteria = [
            objective_criterion(c.name, [v[c.name].met for v in check.verdicts]) for c in traffic.classes
        ]
        return check.criteria

    try:
        _rounds_until_agreed(measure_round, lambda: len(check.rounds), judge_rounds, settings)
    except (ServerDiedError, TritonTuneError) as err:
        check.problems.append(f"sending the workload at {check.rate:,.0f} req/s: {err}")
