"""Coming from Model Analyzer: its ``profile`` config file as a tritontune config file.

:func:`migrate` maps a Model Analyzer YAML file onto the mapping ``tritontune search -f FILE``
reads: a key whose meaning tritontune shares becomes the tritontune option or ``search.space``
dimension; every key or value it cannot map becomes a *note* that names it and says why, since a
migration that hid what it left out would let a user believe tritontune searched what Model
Analyzer did. Model Analyzer's own precedence rules are kept (a model's constraints and flags
replace the global ones; a list under ``model_config_parameters`` is a sweep). No file is read or
written here: the CLI (``tritontune import-ma``) does. Every key: ``docs/model-analyzer.md``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tritontune.errors import InputError
from tritontune.search.space import DIMENSIONS
from tritontune.server.factory import OWNED_FLAGS


@dataclass(frozen=True)
class Migration:
    """A Model Analyzer config, as tritontune reads it."""

    source: str
    """The MA config file, as named in errors, notes and the written file's header."""
    model: str
    config: dict[str, Any]
    """The tritontune config-file mapping: top-level options, then ``search:`` (with its
    ``space:``), ``profile:`` and ``export:`` sections where the MA config said something for
    them."""
    notes: tuple[str, ...]
    """One line per MA key or value not mapped, ``key: value: why``."""

    def yaml_text(self, file_name: str = "FILE") -> str:
        """The config file to write: a header that says where it came from and what was not
        taken (the notes, as comments, so they stay with the file), then the mapping."""
        lines = [
            f"# tritontune config file, from the Model Analyzer config {self.source}",
            f"# (tritontune import-ma). Run: tritontune search -f {file_name}",
        ]
        if self.notes:
            lines.append(f"# What {self.source} says that this file does not, or says otherwise:")
            lines += [f"#   {note}" for note in self.notes]
        body = yaml.safe_dump(self.config, sort_keys=False, default_flow_style=None, width=100)
        return "\n".join(lines) + "\n\n" + body


#: Model Analyzer's default for ``run_config_search_{min,max}_instance_count``.
MA_INSTANCE_COUNT_RANGE = (1, 5)
#: Model Analyzer's default for ``run_config_search_{min,max}_model_batch_size`` (it sweeps the
#: powers of two between them).
MA_MODEL_BATCH_SIZE_RANGE = (1, 128)

#: Keys a model may set for itself that *replace* the global key of the same name, as in MA.
_MODEL_SCOPED = (
    "constraints",
    "objectives",
    "perf_analyzer_flags",
    "triton_server_flags",
    "triton_server_environment",
    "triton_docker_args",
    "genai_perf_flags",
)
#: What else a ``profile_models`` entry may hold.
_MODEL_KEYS = {*_MODEL_SCOPED, "cpu_only", "parameters", "model_config_parameters", "weighting"}

_NO_PERF_ANALYZER = "tritontune sends the load with its own generator (no perf_analyzer)"
_LOAD_FOUND = "tritontune ramps the load itself from the lowest one until p99 misses the SLO"
_BUDGET = "tritontune's budget is search.trials or search.timeout"
_ENSEMBLE = (
    "tritontune reads an ensemble's composing models from its ensemble_scheduling and searches "
    "them together; settings of one composing model go in search.space, keyed by model "
    "(MODEL: {instance_count: 1}; docs/concepts/pipelines.md)"
)
_CSV = "`search --csv FILE` writes Model Analyzer's inference CSV columns, fixed"
_REPORTS = "tritontune writes a report when asked (search --report FILE, tritontune report)"

#: Top-level MA keys that have no tritontune counterpart, and why (each becomes a note).
_NOT_TAKEN: dict[str, str] = {
    "checkpoint_directory": "tritontune keeps every trial in its study (storage, default "
    "sqlite:///tritontune.db); running the same command again resumes it",
    "output_model_repository_path": "tritontune measures in a private working repository; "
    "`tritontune export --out DIR` writes the winner's repository",
    "override_output_model_repository": "`tritontune export --out DIR` writes the winner's "
    "repository (--force to replace what DIR holds)",
    "export_path": "tritontune writes its files where --results, --report and --csv say; "
    "`tritontune export --out DIR` writes the tuned repository",
    "num_configs_per_model": "tritontune re-measures its top candidates in an interleaved playoff "
    "(search.playoff_top, default 3)",
    "filename_model_inference": _CSV,
    "filename_model_gpu": _CSV,
    "filename_server_only": _CSV,
    "inference_output_fields": _CSV,
    "gpu_output_fields": _CSV,
    "server_output_fields": _CSV,
    "skip_summary_reports": _REPORTS,
    "skip_detailed_reports": _REPORTS,
    "always_report_gpu_metrics": _REPORTS,
    "plots": _REPORTS,
    "report_model_configs": "a `model-analyzer report` key; `tritontune report --study NAME` "
    "draws the report",
    "perf_analyzer_path": _NO_PERF_ANALYZER,
    "perf_analyzer_timeout": _NO_PERF_ANALYZER,
    "perf_analyzer_cpu_util": _NO_PERF_ANALYZER,
    "perf_analyzer_max_auto_adjusts": _NO_PERF_ANALYZER,
    "perf_output": _NO_PERF_ANALYZER,
    "perf_output_path": _NO_PERF_ANALYZER,
    "client_max_retries": "tritontune does not retry: over 1% failed requests fails a load level",
    "duration_seconds": "tritontune reads the server's metrics during each measurement itself",
    "monitoring_interval": "tritontune reads the server's metrics once per measurement window",
    "collect_cpu_metrics": "tritontune records the host and what else ran during each window itself",
    "dcgm_disable": "tritontune uses no DCGM",
    "run_config_search_min_concurrency": _LOAD_FOUND,
    "run_config_search_min_request_rate": _LOAD_FOUND,
    "run_config_search_max_binary_search_steps": "tritontune bisects between the last load that "
    "met the SLO and the first that missed, by its own rule",
    "run_config_search_disable": "tritontune always searches (what search.space fixes stays "
    "fixed); `tritontune profile -f FILE` measures one config at fixed loads",
    "min_percentage_of_search_space": _BUDGET,
    "max_percentage_of_search_space": _BUDGET,
    "optuna_min_trials": _BUDGET,
    "optuna_early_exit_threshold": _BUDGET,
    "early_exit_enable": _BUDGET,
    "use_concurrency_formula": _LOAD_FOUND,
    "concurrency_sweep_disable": "tritontune measures each config at its operating load, then "
    "re-measures the top ones in an interleaved playoff",
    "run_config_profile_models_concurrently_enable": "tritontune tunes several models on one "
    "server together when each class of a workload file names its model (search --workload)",
    "reload_model_disable": "tritontune switches configs by reloading the model (a remote server "
    "must run in explicit model-control mode)",
    "ensemble_composing_models": _ENSEMBLE,
    "cpu_only_composing_models": _ENSEMBLE,
    "triton_install_path": "used by the c_api launch mode only; tritontune runs tritonserver as "
    "a process",
    "triton_metrics_url": "tritontune reads the metrics of the server it started or --url names",
    "triton_docker_mounts": "tritontune mounts the model repository and the files it links to itself",
    "triton_docker_labels": "tritontune labels its containers itself",
    "min_throughput": "tritontune maximizes throughput under the SLO; a minimum is not part of "
    "its search (compare the winner's figure)",
    "config_file": "a Model Analyzer command-line key; tritontune reads the file import-ma wrote "
    "(-f FILE)",
}
#: The top-level keys the steps of :meth:`_Migrator.run` map (all others are notes).
_HANDLED = {
    "model_repository",
    "profile_models",
    *_MODEL_SCOPED,
    "latency_budget",
    "batch_sizes",
    "concurrency",
    "request_rate",
    "request_rate_search_enable",
    "triton_launch_mode",
    "client_protocol",
    "triton_server_path",
    "triton_docker_image",
    "triton_docker_shm_size",
    "gpus",
    "triton_output_path",
    "triton_grpc_endpoint",
    "triton_http_endpoint",
    "run_config_search_mode",
    "run_config_search_max_concurrency",
    "run_config_search_max_request_rate",
    "optuna_max_trials",
    "num_top_model_configs",
    "model_type",
    "weighting",
    "run_config_search_min_instance_count",
    "run_config_search_max_instance_count",
    "run_config_search_min_model_batch_size",
    "run_config_search_max_model_batch_size",
    "bls_composing_models",
}


#: Why the model-scoped keys with no counterpart are not taken.
_SCOPED_NOT_TAKEN = {
    "triton_server_environment": "tritontune's local server inherits the environment tritontune "
    "runs in: set these variables there",
    "triton_docker_args": "tritontune starts its container with its own arguments (image, gpus, "
    "shm_size)",
    "genai_perf_flags": "tritontune tunes configs by request throughput and latency; GenAI-Perf "
    "(LLM token metrics) is not used",
}

#: Why a latency other than p99 (a constraint, perf_analyzer's percentile) is not taken.
_LATENCY_ONLY_P99 = "tritontune's SLO is on p99 (search.slo_p99)"
#: ``perf_analyzer_flags`` MA sets itself (so tritontune has no use for them either).
_PA_SET_BY_MA = {
    "model-name",
    "model-repository",
    "service-kind",
    "triton-server-directory",
    "protocol",
    "url",
    "measurement-mode",
}
#: ``perf_analyzer_flags`` for TLS to a remote server: the tritontune option each one is.
_PA_TLS = {
    "ssl-grpc-root-certifications-file": "ssl_ca",
    "ssl-https-ca-certificates-file": "ssl_ca",
    "ssl-grpc-certificate-chain-file": "ssl_cert",
    "ssl-https-client-certificate-file": "ssl_cert",
    "ssl-grpc-private-key-file": "ssl_key",
    "ssl-https-private-key-file": "ssl_key",
}
_PA_WINDOWS = "tritontune measures in short windows until the throughput is stable (window, max_windows)"
#: Model Analyzer's default endpoints of a remote server, by client protocol.
_MA_ENDPOINTS = {"grpc": "localhost:8001", "http": "localhost:8000"}
_LAUNCH_MODES = {"local": "local", "docker": "docker", "remote": "remote", "c_api": "local"}
_KINDS = {"kind_gpu": "gpu", "gpu": "gpu", "kind_cpu": "cpu", "cpu": "cpu"}
_THREAD_PARAMETERS = ("intra_op_thread_count", "inter_op_thread_count")
#: The space dimensions a MA ``model_config_parameters`` sweep may leave to tritontune's defaults.
_CORE_DIMENSIONS = ("max_batch_size", "dynamic_batching", "max_queue_delay", "instance_count")


def migrate(data: Any, source: Path | str, model: str | None = None) -> Migration:
    """The tritontune config for the MA profile config ``data`` (read from ``source``).

    ``model`` picks one of several ``profile_models`` (default: the first, with a note naming
    the others). Bad input (not a mapping, no model, a constraint or a count that is not a
    number, ...) is an :class:`InputError` naming ``source`` and the key."""
    return _Migrator(str(source)).run(data, model)


class _Migrator:
    """One migration: the MA config's keys read in a fixed order, each one written to the
    tritontune mapping or to the notes."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.notes: list[str] = []
        self.top: dict[str, Any] = {}
        self.search: dict[str, Any] = {}
        self.space: dict[str, Any] = {}
        self.profile: dict[str, Any] = {}
        self.export: dict[str, Any] = {}

    # --- what errors and notes say -----------------------------------------------------------

    def error(self, where: str, expected: str) -> InputError:
        return InputError(f"{self.source}: {where}: {expected}")

    def note(self, where: str, why: str, value: Any = None) -> None:
        shown = _shown(value)
        self.notes.append(f"{where}: {shown}: {why}" if shown else f"{where}: {why}")

    # --- the whole file ----------------------------------------------------------------------

    def run(self, data: Any, wanted: str | None) -> Migration:
        if not isinstance(data, dict):
            raise InputError(
                f"{self.source}: expected a Model Analyzer profile config (a mapping of keys such "
                "as model_repository and profile_models to values)"
            )
        data = {str(key): value for key, value in data.items()}
        if isinstance(data.get("model_repository"), str) and data["model_repository"]:
            self.top["model_repository"] = data["model_repository"]
        elif "model_repository" in data:
            raise self.error("model_repository", "expected the path of the model repository")
        else:
            self.note("model_repository", "not given: add it to the file, or pass -r DIR")
        name, spec = self.choose_model(data.get("profile_models"), wanted)
        self.top["model"] = name
        where = f"profile_models.{name}"
        scoped = self.model_scoped(data, spec, where)

        self.launch(data)
        self.server_flags(*scoped["triton_server_flags"])
        self.slo(data, *scoped["constraints"])
        self.objectives(*scoped["objectives"])
        self.request(data, spec, where, scoped["perf_analyzer_flags"])
        self.search_settings(data)
        self.composing(data.get("bls_composing_models"))
        self.space_from(data, spec, where)
        for key, why in _SCOPED_NOT_TAKEN.items():
            key_where, value = scoped[key]
            if value:
                self.note(key_where, why)
        for key in spec:
            if key not in _MODEL_KEYS:
                self.note(f"{where}.{key}", "not a Model Analyzer model key tritontune knows; not taken")
        for key, value in data.items():
            if key in _HANDLED:
                continue
            why = _NOT_TAKEN.get(key, "not a Model Analyzer profile key tritontune knows; not taken")
            self.note(key, why, value)
        return Migration(self.source, name, self.assemble(), tuple(self.notes))

    def assemble(self) -> dict[str, Any]:
        """The config-file mapping: top-level options (shared by search, profile and check),
        then a section per command, each only when it holds something."""
        config = dict(self.top)
        if self.space:
            self.search["space"] = {
                name: _dimension(self.space[name]) for name in DIMENSIONS if name in self.space
            }
        for section, values in (
            ("search", self.search),
            ("profile", self.profile),
            ("export", self.export),
        ):
            if values:
                config[section] = values
        return config

    # --- which model -------------------------------------------------------------------------

    def choose_model(self, value: Any, wanted: str | None) -> tuple[str, dict[str, Any]]:
        """The model to tune, and its own settings: MA's ``profile_models`` is a comma list, a
        list (of names, or of ``{name: settings}``) or a mapping of names to settings."""
        models = self.profile_models(value)
        names = list(models)
        if wanted is not None and wanted not in models:
            raise self.error("profile_models", f"has no model {wanted!r} (it lists {', '.join(names)})")
        name = wanted or names[0]
        if len(names) > 1:
            self.note(
                "profile_models",
                f"{len(names)} models ({', '.join(names)}): tritontune tunes one model per "
                f"search; this file is for {name} (import-ma --model NAME writes one for another)",
            )
        return name, models[name]

    def profile_models(self, value: Any) -> dict[str, dict[str, Any]]:
        expected = (
            "expected the model(s) to profile: a name, a list of names, or a mapping of names to "
            "settings"
        )
        if value is None:
            raise self.error("profile_models", f"missing; {expected}, e.g. profile_models: [mlp]")
        entries: list[Any]
        if isinstance(value, str):
            entries = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, dict):
            entries = [value]
        elif isinstance(value, list):
            entries = value
        else:
            raise self.error("profile_models", expected)
        models: dict[str, dict[str, Any]] = {}
        for entry in entries:
            if isinstance(entry, str) and entry.strip():
                models[entry.strip()] = {}
            elif isinstance(entry, dict):
                for name, spec in entry.items():
                    if spec is not None and not isinstance(spec, dict):
                        raise self.error(
                            f"profile_models.{name}", "expected a mapping of the model's settings"
                        )
                    models[str(name)] = {str(k): v for k, v in (spec or {}).items()}
            else:
                raise self.error("profile_models", expected)
        if not models:
            raise self.error("profile_models", f"names no model; {expected}")
        return models

    def model_scoped(
        self, data: dict[str, Any], spec: dict[str, Any], where: str
    ) -> dict[str, tuple[str, Any]]:
        """For each key a model may set for itself: where its value comes from and the value.
        The model's own replaces the global one, as in MA (the global one is then a note)."""
        scoped = {}
        for key in _MODEL_SCOPED:
            if spec.get(key):
                scoped[key] = (f"{where}.{key}", spec[key])
                if data.get(key):
                    self.note(key, f"replaced by {where}.{key}, as in Model Analyzer")
            else:
                scoped[key] = (key, data.get(key))
        return scoped

    # --- the server ----------------------------------------------------------------------------

    def composing(self, value: Any) -> None:
        """MA's ``bls_composing_models`` (a comma list, or a list of names or of ``{name: ...}``):
        the models a BLS model calls, which search and profile take as ``composing``."""
        if value is None:
            return
        if isinstance(value, str):
            names = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, list):
            names = []
            for item in value:
                if isinstance(item, dict) and len(item) == 1:
                    names.append(str(next(iter(item))))
                elif isinstance(item, str) and item.strip():
                    names.append(item.strip())
                else:
                    raise self.error("bls_composing_models", "a list of model names")
        elif isinstance(value, dict):
            names = [str(name) for name in value]
        else:
            raise self.error("bls_composing_models", "a comma list or a list of model names")
        if names:
            self.search["composing"] = names
            self.profile["composing"] = names

    def launch(self, data: dict[str, Any]) -> None:
        """``triton_launch_mode`` and what goes with it: where tritonserver comes from and how
        it is reached."""
        mode = str(data.get("triton_launch_mode", "local")).lower()
        if mode not in _LAUNCH_MODES:
            raise self.error(
                "triton_launch_mode",
                f"{data['triton_launch_mode']!r} is not one of {', '.join(_LAUNCH_MODES)}",
            )
        launch = _LAUNCH_MODES[mode]
        if "triton_launch_mode" in data:
            self.top["launch"] = launch
        if mode == "c_api":
            self.note(
                "triton_launch_mode",
                "tritontune runs tritonserver as a process: launch local (the C API has no "
                "tritontune counterpart)",
                mode,
            )
        if data.get("client_protocol") is not None:
            protocol = str(data["client_protocol"]).lower()
            if protocol not in ("grpc", "http"):
                raise self.error(
                    "client_protocol", f"{data['client_protocol']!r} is not one of grpc, http"
                )
            self.top["protocol"] = protocol
        self.only_for(data, launch, "local", "triton_server_path", self.server_path)
        self.only_for(data, launch, "docker", "triton_docker_image", lambda v: self.put("image", v))
        self.only_for(
            data, launch, "docker", "triton_docker_shm_size", lambda v: self.put("shm_size", v)
        )
        self.only_for(data, launch, "docker", "gpus", self.gpus)
        self.only_for(
            data, launch, ("local", "docker"), "triton_output_path", lambda v: self.put("server_log", v)
        )
        if launch == "docker" and "gpus" not in data:
            self.note(
                "triton_launch_mode",
                "Model Analyzer gave its container every GPU by default; tritontune starts it "
                "without GPUs unless gpus: all is set",
                mode,
            )
        self.endpoints(data, launch)

    def only_for(
        self,
        data: dict[str, Any],
        launch: str,
        wanted: str | tuple[str, ...],
        key: str,
        put: Callable[[Any], None],
    ) -> None:
        """Map ``key`` with ``put`` when the launch mode is ``wanted``; else it is a note."""
        if data.get(key) is None:
            return
        modes = (wanted,) if isinstance(wanted, str) else wanted
        if launch in modes:
            put(data[key])
        else:
            self.note(
                key, f"used with launch {' or '.join(modes)} only (this file: {launch})", data[key]
            )

    def put(self, option: str, value: Any) -> None:
        self.top[option] = str(value)

    def server_path(self, value: Any) -> None:
        text = str(value)
        if "/" in text:
            self.top["tritonserver"] = text
        elif text != "tritonserver":
            self.note(
                "triton_server_path",
                "tritontune's --tritonserver takes a path; a bare name is not looked up on PATH",
                text,
            )

    def gpus(self, value: Any) -> None:
        """MA's ``gpus`` (``all``, or GPU UUIDs) as the container's GPUs: ``all`` or device ids."""
        ids = [str(v).strip() for v in (value if isinstance(value, list) else str(value).split(","))]
        ids = [i for i in ids if i]
        if [i.lower() for i in ids] == ["all"]:
            self.top["gpus"] = "all"
        elif ids and all(i.isdigit() for i in ids):
            self.top["gpus"] = ",".join(ids)
        else:
            self.note("gpus", "tritontune takes all or device ids such as 0,1, not GPU UUIDs", value)

    def endpoints(self, data: dict[str, Any], launch: str) -> None:
        """A remote server's address (``url``) from the endpoint of the client protocol; MA's
        defaults when the file gives none."""
        keys = {"grpc": "triton_grpc_endpoint", "http": "triton_http_endpoint"}
        if launch != "remote":
            for key in keys.values():
                if data.get(key) is not None:
                    self.note(
                        key,
                        "used with launch remote only; tritontune picks free ports for the server "
                        "it starts",
                        data[key],
                    )
            return
        protocol = self.top.setdefault("protocol", "grpc")
        self.top["url"] = str(data.get(keys[protocol]) or _MA_ENDPOINTS[protocol])
        other = "http" if protocol == "grpc" else "grpc"
        if data.get(keys[other]) is not None:
            self.note(
                keys[other], f"not used: tritontune talks {protocol} to the server", data[keys[other]]
            )

    def server_flags(self, where: str, flags: Any) -> None:
        """``triton_server_flags`` as ``server_arg`` (``--flag=value``), except the flags
        tritontune sets itself (it would refuse them)."""
        if not flags:
            return
        if not isinstance(flags, dict):
            raise self.error(where, "expected a mapping of tritonserver flags to values")
        if self.top.get("launch") == "remote":
            self.note(
                where, "the remote server is not tritontune's to start; pass them where it is started"
            )
            return
        args = []
        for key, value in flags.items():
            flag = "--" + str(key).replace("_", "-")
            if flag in OWNED_FLAGS:
                self.note(f"{where}.{key}", f"{flag} is set by tritontune ({OWNED_FLAGS[flag]})", value)
                continue
            if value is None:
                args.append(flag)
            else:
                args.append(f"{flag}={str(value).lower() if isinstance(value, bool) else value}")
        if args:
            self.top["server_arg"] = args

    # --- what the search aims at ---------------------------------------------------------------

    def slo(self, data: dict[str, Any], where: str, constraints: Any) -> None:
        """``search.slo_p99`` from a ``perf_latency_p99`` constraint (ms), or ``latency_budget``,
        which overrides it as in MA. The other constraints are notes."""
        slo_ms = None
        if constraints:
            if not isinstance(constraints, dict):
                raise self.error(
                    where, "expected a mapping of metrics to bounds, e.g. perf_latency_p99: {max: 50}"
                )
            for metric, bound in constraints.items():
                metric_where = f"{where}.{metric}"
                if not isinstance(bound, dict) or not bound:
                    raise self.error(metric_where, "expected a bound, e.g. {max: 50}")
                latency = metric.startswith("perf_latency")
                for side, value in bound.items():
                    number = self.number(f"{metric_where}.{side}", value, latency=latency)
                    if metric in ("perf_latency_p99", "perf_latency") and side == "max":
                        slo_ms = number if slo_ms is None else min(slo_ms, number)
                    elif metric in ("perf_latency_p99", "perf_latency"):
                        self.note(f"{metric_where}.{side}", "only a max latency is a constraint", value)
                    elif metric.startswith("perf_latency"):
                        self.note(metric_where, _LATENCY_ONLY_P99 + "; not taken", f"{side} {value}")
                    elif metric == "perf_throughput":
                        self.note(
                            metric_where,
                            "tritontune maximizes throughput under the SLO; a minimum is "
                            "not part of its search",
                            f"{side} {value}",
                        )
                    else:
                        self.note(
                            metric_where,
                            "tritontune constrains p99 latency only; not taken",
                            f"{side} {value}",
                        )
        if data.get("latency_budget") is not None:
            budget = self.number("latency_budget", data["latency_budget"], latency=True)
            if slo_ms is not None and budget != slo_ms:
                self.note(
                    f"{where}.perf_latency_p99", "replaced by latency_budget, as in Model Analyzer"
                )
            slo_ms = budget
        if slo_ms is None:
            self.note(
                "constraints",
                "no perf_latency_p99 max (nor latency_budget): add search.slo_p99 (e.g. 50ms) or "
                "pass --slo-p99",
            )
        else:
            self.search["slo_p99"] = f"{int(slo_ms) if slo_ms.is_integer() else slo_ms}ms"

    def number(self, where: str, value: Any, *, latency: bool) -> float:
        """A bound: a latency is milliseconds above 0; other metrics' bounds are only checked
        to be numbers (they become notes)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(
                where, f"{value!r} is not a number" + (" of milliseconds" if latency else "")
            )
        if latency and value <= 0:
            raise self.error(where, f"{value!r} is not a latency above 0 (milliseconds)")
        return float(value)

    def objectives(self, where: str, objectives: Any) -> None:
        """tritontune has one objective: throughput under the SLO. MA's others, and weights
        between several, are notes."""
        if not objectives:
            return
        if isinstance(objectives, str):
            objectives = [part.strip() for part in objectives.split(",") if part.strip()]
        if isinstance(objectives, list):
            weights: dict[str, Any] = {str(o): None for o in objectives}
        elif isinstance(objectives, dict):
            weights = {str(k): v for k, v in objectives.items()}
        else:
            raise self.error(where, "expected a list of metrics or a mapping of metrics to weights")
        several = len(weights) > 1
        for metric, weight in weights.items():
            shown = f"{metric} weight {weight}" if weight is not None else metric
            if metric == "perf_throughput":
                if several and weight is not None:
                    self.note(
                        where,
                        "tritontune maximizes throughput under the SLO; weights are not taken",
                        shown,
                    )
            elif metric.startswith("perf_latency"):
                self.note(
                    where,
                    "tritontune does not trade latency for throughput: it maximizes throughput "
                    "with p99 under the SLO (search.slo_p99); not taken",
                    shown,
                )
            else:
                self.note(where, "tritontune's objective is throughput under the SLO; not taken", shown)
        if "perf_throughput" not in weights:
            self.note(
                where,
                "tritontune maximizes throughput (perf_throughput) under the SLO, whatever the "
                "objectives",
            )

    # --- what each request carries and how load is offered -------------------------------------

    def request(
        self,
        data: dict[str, Any],
        spec: dict[str, Any],
        where: str,
        flags: tuple[str, Any],
    ) -> None:
        """The client batch size, input data and load mode from ``batch_sizes``,
        ``concurrency``, ``request_rate`` (global, or the model's ``parameters``) and
        ``perf_analyzer_flags``."""
        parameters = spec.get("parameters") or {}
        if not isinstance(parameters, dict):
            raise self.error(
                f"{where}.parameters", "expected a mapping (batch_sizes, concurrency, request_rate)"
            )
        for key in parameters:
            if key not in ("batch_sizes", "concurrency", "request_rate"):
                self.note(
                    f"{where}.parameters.{key}",
                    "not a Model Analyzer parameter tritontune knows; not taken",
                )

        def parameter(key: str) -> tuple[str, Any]:
            if key in parameters:
                if data.get(key) is not None:
                    self.note(key, f"replaced by {where}.parameters.{key}, as in Model Analyzer")
                return f"{where}.parameters.{key}", parameters[key]
            return key, data.get(key)

        flags_where, pa_flags = flags
        pa_flags = pa_flags or {}
        if not isinstance(pa_flags, dict):
            raise self.error(flags_where, "expected a mapping of perf_analyzer flags to values")
        batch_where, batch_sizes = parameter("batch_sizes")
        if batch_sizes is not None:
            sizes = self.ints(batch_where, batch_sizes, minimum=1)
            if "batch-size" in pa_flags:
                self.note(batch_where, f"replaced by {flags_where}.batch-size", batch_sizes)
            elif len(sizes) == 1:
                self.top["batch_size"] = sizes[0]
            else:
                self.note(
                    batch_where,
                    "tritontune measures one client batch size per search "
                    "(batch_size): run one search per size; not taken",
                    sizes,
                )
        concurrency, rate = parameter("concurrency"), parameter("request_rate")
        # The model's own load kind replaces the other kind's global levels too.
        if "request_rate" in parameters and "concurrency" not in parameters:
            concurrency = self.replaced(concurrency, rate[0])
        if "concurrency" in parameters and "request_rate" not in parameters:
            rate = self.replaced(rate, concurrency[0])
        self.loads(concurrency, rate, data)
        for key, value in pa_flags.items():
            self.perf_analyzer_flag(f"{flags_where}.{key}", str(key).replace("_", "-"), value)

    def replaced(self, setting: tuple[str, Any], by: str) -> tuple[str, Any]:
        """A global setting the model's own ``by`` replaces: a note, and no value."""
        if setting[1] is not None:
            self.note(setting[0], f"replaced by {by}, as in Model Analyzer")
        return setting[0], None

    def loads(self, concurrency: tuple[str, Any], rate: tuple[str, Any], data: dict[str, Any]) -> None:
        """MA measured at the listed loads; tritontune's search finds its own, so the levels go
        to ``profile:`` (``tritontune profile -f FILE`` measures them) and request rates make the
        search open-loop."""
        (c_where, c_value), (r_where, r_value) = concurrency, rate
        if c_value is not None and r_value is not None:
            raise self.error(
                r_where, f"give concurrency or request_rate, not both ({c_where} is given too)"
            )
        if c_value is not None:
            levels = self.profile["concurrency"] = self.ints(c_where, c_value, minimum=1)
            self.note(
                c_where,
                "search finds the highest concurrency that meets the SLO itself; the levels "
                "are written to profile.concurrency (tritontune profile measures them)",
                levels,
            )
        if r_value is not None:
            rates = self.profile["request_rate"] = self.ints(r_where, r_value, minimum=1)
            self.profile["arrival"] = "constant"  # perf_analyzer's default request-rate schedule
            self.search["load"] = "poisson"
            self.note(
                r_where,
                "search finds the highest rate that meets the SLO itself, with Poisson "
                "arrivals (load: poisson); the rates are written to profile.request_rate",
                rates,
            )
        if data.get("request_rate_search_enable") is True:
            self.search["load"] = "poisson"
            self.note(
                "request_rate_search_enable",
                "searched open-loop (load: poisson): arrivals are "
                "Poisson, where perf_analyzer spaced them evenly by default",
            )

    def perf_analyzer_flag(self, where: str, flag: str, value: Any) -> None:
        if flag == "input-data":
            self.input_data(where, value)
        elif flag == "batch-size":
            self.top["batch_size"] = self.whole(where, value, minimum=1)
        elif flag == "concurrency-range":
            self.search["load"] = "concurrency"
            self.note(where, _LOAD_FOUND + " (load: concurrency); the range is not taken", value)
        elif flag == "request-rate-range":
            self.search["load"] = "poisson"
            self.note(
                where, _LOAD_FOUND + " (load: poisson, Poisson arrivals); the range is not taken", value
            )
        elif flag == "percentile":
            if str(value).strip() != "99":
                self.note(where, _LATENCY_ONLY_P99 + ": give your p99 target there", value)
        elif flag == "measurement-interval":
            self.top["window"] = f"{self.whole(where, value, minimum=1)}ms"
        elif flag in ("measurement-request-count", "stability-percentage", "max-trials"):
            self.note(where, _PA_WINDOWS + "; not taken", value)
        elif flag in _PA_TLS:
            if self.top.get("launch") == "remote":
                self.top[_PA_TLS[flag]] = str(value)
            else:
                self.note(
                    where, "TLS is for launch remote only (the server tritontune starts has none)", value
                )
        elif flag in _PA_SET_BY_MA:
            self.note(where, "set by tritontune itself; not taken", value)
        else:
            self.note(where, f"{_NO_PERF_ANALYZER}; not taken", value)

    def input_data(self, where: str, value: Any) -> None:
        """perf_analyzer's ``--input-data``: a JSON file is tritontune's ``input_data`` too;
        ``random`` is what tritontune does without one; ``zero`` it does not do."""
        paths = value if isinstance(value, list) else [value]
        taken = None
        for path in (str(p) for p in paths):
            if path == "random":
                self.note(
                    where, "tritontune sends seeded random inputs when input_data is not given", path
                )
            elif path == "zero":
                self.note(where, "tritontune sends seeded random inputs, not zeros; not taken", path)
            elif taken is None:
                taken = self.top["input_data"] = path
            else:
                self.note(where, f"tritontune takes one input data file ({taken}); not taken", path)

    # --- how the search runs -------------------------------------------------------------------

    def search_settings(self, data: dict[str, Any]) -> None:
        mode = data.get("run_config_search_mode")
        if mode is not None and str(mode).lower() != "optuna":
            self.note(
                "run_config_search_mode",
                "tritontune always searches with Optuna's TPE sampler, then "
                "re-measures its top candidates in an interleaved playoff",
                mode,
            )
        self.max_load(data)
        if data.get("optuna_max_trials") is not None:
            self.search["trials"] = self.whole("optuna_max_trials", data["optuna_max_trials"], minimum=1)
        top = data.get("num_top_model_configs")
        if top:
            self.export["top_k"] = self.whole("num_top_model_configs", top, minimum=1)
        model_type = data.get("model_type")
        if model_type is not None and str(model_type).lower() != "generic":
            self.note(
                "model_type",
                "tritontune tunes by request throughput and p99 latency (no token "
                "metrics); searched as a generic model",
                model_type,
            )
        if data.get("weighting") is not None:
            self.note("weighting", "tritontune tunes one model per search; not taken", data["weighting"])

    def max_load(self, data: dict[str, Any]) -> None:
        """MA's highest concurrency (or request rate, with a rate search) is where tritontune's
        ramp stops too (``max_load``); the bound of the other load mode is a note."""
        poisson = self.search.get("load") == "poisson"
        keys = ("run_config_search_max_concurrency", "run_config_search_max_request_rate")
        taken, other = (keys[1], keys[0]) if poisson else keys
        if data.get(taken) is not None:
            self.search["max_load"] = self.whole(taken, data[taken], minimum=1)
        if data.get(other) is not None:
            mode = "request rates (poisson)" if poisson else "concurrency"
            self.note(other, f"this search ramps {mode}; its bound is {taken}", data[other])

    # --- the space -----------------------------------------------------------------------------

    def space_from(self, data: dict[str, Any], spec: dict[str, Any], where: str) -> None:
        """``search.space`` from the model's ``model_config_parameters`` and ``cpu_only``, then
        the ``run_config_search_*`` ranges for what those leave open (as in MA, listed values
        win over the ranges)."""
        if spec.get("weighting") is not None:
            self.note(
                f"{where}.weighting",
                "tritontune tunes one model per search; not taken",
                spec["weighting"],
            )
        parameters = spec.get("model_config_parameters")
        if parameters:
            mcp_where = f"{where}.model_config_parameters"
            if not isinstance(parameters, dict):
                raise self.error(mcp_where, "expected a mapping of model config fields to values")
            for key, value in parameters.items():
                self.model_config_parameter(f"{mcp_where}.{key}", str(key), value)
            left = [d for d in _CORE_DIMENSIONS if d not in self.space]
            if left:
                self.note(
                    mcp_where,
                    "Model Analyzer kept what it does not list at the model's values; tritontune "
                    f"also searches {', '.join(left)} (fix them under search.space to keep them)",
                )
        if spec.get("cpu_only") is True:
            if self.space.get("instance_kind", ["cpu"]) != ["cpu"]:
                self.note(
                    f"{where}.cpu_only", "the instance_group's kind wins, as in Model Analyzer", True
                )
            else:
                self.space["instance_kind"] = ["cpu"]
        self.ranges(data)

    def ranges(self, data: dict[str, Any]) -> None:
        """MA's automatic-search bounds, for the dimensions ``model_config_parameters`` left
        open (as in MA, listed values win over the bounds). MA sweeps max_batch_size over the
        powers of two between its bounds."""
        for dimension, name, defaults, minimum in (
            ("instance_count", "instance_count", MA_INSTANCE_COUNT_RANGE, 1),
            ("max_batch_size", "model_batch_size", MA_MODEL_BATCH_SIZE_RANGE, 0),
        ):
            keys = (f"run_config_search_min_{name}", f"run_config_search_max_{name}")
            given = {key: data[key] for key in keys if data.get(key) is not None}
            if not given:
                continue
            if dimension in self.space:
                for key, value in given.items():
                    self.note(key, f"the {dimension} values listed for the model win", value)
                continue
            low, high = (
                self.whole(key, given[key], minimum=minimum) if key in given else default
                for key, default in zip(keys, defaults, strict=True)
            )
            if low > high:
                raise self.error(keys[0], f"{low} is above {keys[1]} ({high})")
            if dimension == "instance_count":
                self.space[dimension] = {"min": low, "max": high}
            else:
                powers = [2**i for i in range(high.bit_length()) if low <= 2**i <= high]
                self.space[dimension] = powers or [low]

    def model_config_parameter(self, where: str, key: str, value: Any) -> None:
        if key == "max_batch_size":
            self.add("max_batch_size", self.ints(where, value, minimum=0))
        elif key == "dynamic_batching":
            self.dynamic_batching(where, value)
        elif key == "instance_group":
            self.instance_group(where, value)
        elif key == "response_cache":
            if not isinstance(value, dict) or "enable" not in value:
                raise self.error(where, "expected {enable: true} or {enable: [true, false]}")
            self.add("response_cache", self.bools(f"{where}.enable", value["enable"]))
            for other in value:
                if other != "enable":
                    self.note(f"{where}.{other}", "not a dimension tritontune searches; not taken")
        elif key == "parameters":
            self.backend_parameters(where, value)
        else:
            self.note(
                where,
                "not a dimension tritontune searches: set it in the model's config.pbtxt "
                "(tritontune keeps what the base config has)",
            )

    def dynamic_batching(self, where: str, value: Any) -> None:
        """Dynamic batching on, with the listed queue delays; tritontune's preferred batch size
        is a strategy (none, or max_batch_size), not a list of sizes."""
        settings = value if isinstance(value, list) else [value]
        self.add("dynamic_batching", [True])
        for setting in settings:
            if setting is not None and not isinstance(setting, dict):
                raise self.error(
                    where, "expected a mapping, e.g. {max_queue_delay_microseconds: [100, 200]}"
                )
            for key, option in (setting or {}).items():
                if key == "max_queue_delay_microseconds":
                    delays = self.ints(f"{where}.{key}", option, minimum=0)
                    self.add("max_queue_delay", [f"{d}us" for d in delays])
                elif key == "preferred_batch_size":
                    self.add("preferred_batch_size", ["none", "max"])
                    self.note(
                        f"{where}.{key}",
                        "tritontune's preferred_batch_size is none or max "
                        "(= max_batch_size); searched as [none, max]",
                        option,
                    )
                else:
                    self.note(
                        f"{where}.{key}",
                        "not a dimension tritontune searches: set it in the model's config.pbtxt",
                        option,
                    )
        if len(settings) > 1:
            self.note(where, "several settings: tritontune searches every delay with every other choice")

    def instance_group(self, where: str, value: Any) -> None:
        """The instance count and kind. MA sweeps a list of group lists; tritontune's configs
        have one group, and search every kind with every count."""
        expected = "expected a list of instance groups, e.g. [{kind: KIND_GPU, count: [1, 2]}]"
        if not isinstance(value, list) or not value:
            raise self.error(where, expected)
        alternatives = value if all(isinstance(v, list) for v in value) else [value]
        pairs: set[tuple[Any, Any]] = set()
        kinds: list[str] = []
        counts: list[int] = []
        for groups in alternatives:
            if not groups or not all(isinstance(g, dict) for g in groups):
                raise self.error(where, expected)
            if len(groups) > 1:
                self.note(
                    where,
                    f"{len(groups)} groups in one config: tritontune's configs have one; the first "
                    "is taken",
                )
            group = groups[0]
            group_kinds = self.kinds(f"{where}.kind", group["kind"]) if "kind" in group else []
            group_counts = (
                self.ints(f"{where}.count", group["count"], minimum=1) if "count" in group else []
            )
            for key in group:
                if key not in ("kind", "count"):
                    self.note(
                        f"{where}.{key}", "not a dimension tritontune searches; not taken", group[key]
                    )
            kinds += [k for k in group_kinds if k not in kinds]
            counts += [c for c in group_counts if c not in counts]
            # (kind, count) pairs this group list stands for; None: left to the defaults
            any_kind: list[str | None] = [*group_kinds] or [None]
            any_count: list[int | None] = [*group_counts] or [None]
            pairs.update((k, c) for k in any_kind for c in any_count)
        if len(pairs) < max(len(kinds), 1) * max(len(counts), 1):
            self.note(
                where,
                "Model Analyzer tried the listed groups; tritontune searches every kind with "
                "every count",
            )
        if kinds:
            self.add("instance_kind", kinds)
        if counts:
            self.add("instance_count", counts)

    def kinds(self, where: str, value: Any) -> list[str]:
        kinds = []
        for kind in value if isinstance(value, list) else [value]:
            text = str(kind).lower()
            if text in _KINDS:
                kinds.append(_KINDS[text])
            elif text in ("kind_auto", "kind_model"):
                self.note(
                    where, "tritontune searches cpu or gpu instances; the server's kinds are used", kind
                )
            else:
                raise self.error(where, f"{kind!r} is not an instance kind (KIND_GPU, KIND_CPU)")
        return kinds

    def backend_parameters(self, where: str, value: Any) -> None:
        """onnxruntime's thread counts are dimensions; other backend parameters are not."""
        if not isinstance(value, dict):
            raise self.error(
                where,
                "expected a mapping of backend parameters, e.g. "
                "{intra_op_thread_count: {string_value: '1'}}",
            )
        for key, parameter in value.items():
            key_where = f"{where}.{key}"
            if key not in _THREAD_PARAMETERS:
                self.note(
                    key_where, "a backend parameter tritontune does not search; set it in config.pbtxt"
                )
                continue
            raw = parameter.get("string_value") if isinstance(parameter, dict) else parameter
            self.add(key, self.ints(key_where, raw, minimum=0))

    # --- values ----------------------------------------------------------------------------------

    def add(self, dimension: str, values: Iterable[Any]) -> None:
        """Add ``values`` to a space dimension's choices (each once, in order)."""
        choices = self.space.setdefault(dimension, [])
        choices += [v for v in values if v not in choices]

    def ints(self, where: str, value: Any, *, minimum: int) -> list[int]:
        """MA's numeric lists: a number, a list, a comma list (``1,2,4``) or a range
        (``{start: 2, stop: 64, step: 8}``, ``stop`` included)."""
        if isinstance(value, dict):
            if set(value) - {"start", "stop", "step"} or not {"start", "stop"} <= set(value):
                raise self.error(where, "a range is {start: N, stop: M} with an optional step")
            start, stop = (self.whole(where, value[k], minimum=minimum) for k in ("start", "stop"))
            step = self.whole(where, value.get("step", 1), minimum=1)
            if start > stop:
                raise self.error(where, f"empty range (start {start} > stop {stop})")
            return list(range(start, stop + 1, step))
        if isinstance(value, list):
            items = value
        elif isinstance(value, str):
            items = value.split(",")
        else:
            items = [value]
        numbers = []
        for item in items:
            text = str(item).strip()
            whole = isinstance(item, (int, str)) and not isinstance(item, bool) and text.isdigit()
            if not whole or int(text) < minimum:
                raise self.error(where, f"{item!r} is not a whole number >= {minimum}")
            if int(text) not in numbers:
                numbers.append(int(text))
        if not numbers:
            raise self.error(where, "empty; give at least one value")
        return numbers

    def whole(self, where: str, value: Any, *, minimum: int) -> int:
        """One whole number (a setting such as a trial count, where a list means nothing)."""
        if isinstance(value, (list, dict)):
            raise self.error(
                where, f"expected one whole number >= {minimum}, not {_shown(value) or 'a mapping'}"
            )
        return self.ints(where, value, minimum=minimum)[0]

    def bools(self, where: str, value: Any) -> list[bool]:
        values = value if isinstance(value, list) else [value]
        if not values or not all(isinstance(v, bool) for v in values):
            raise self.error(where, f"{value!r} is not true, false or a list of them")
        return values


def _dimension(values: Any) -> Any:
    """A space value as a person would write it: one choice is a fixed value, a range stays."""
    return values[0] if isinstance(values, list) and len(values) == 1 else values


def _shown(value: Any) -> str:
    """``value`` in a note: scalars and short lists as written, larger structures left out."""
    if value is None or isinstance(value, dict):
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        if not all(isinstance(v, (str, int, float)) for v in value):
            return ""
        return "[" + ", ".join(_shown(v) for v in value) + "]"
    return str(value)
