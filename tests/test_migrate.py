"""``tritontune.migrate``: a Model Analyzer profile config as a tritontune config-file mapping;
every MA key it cannot map is a note naming the key and why, bad input one error naming the key."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tritontune.errors import InputError
from tritontune.migrate import Migration, migrate
from tritontune.search.space import SearchSpace, SpaceSource, apply_space

SOURCE = "ma.yaml"


def run(text: str, model: str | None = None) -> Migration:
    """``text`` migrated, with a model_repository unless it says none (or its own)."""
    if "\nmodel_repository:" not in f"\n{text}" and not text.startswith("-"):
        text = "model_repository: repo\n" + text
    return migrate(yaml.safe_load(text), SOURCE, model=model)


def space_of(migration: Migration) -> dict[str, Any]:
    """The written space, checked by the search's own space reader."""
    space = migration.config["search"]["space"]
    apply_space(SpaceSource("written", inline=space), SearchSpace())
    return space


NO_SLO = (
    "constraints: no perf_latency_p99 max (nor latency_budget): add search.slo_p99 (e.g. 50ms) or "
    "pass --slo-p99"
)


def other_notes(migration: Migration) -> tuple[str, ...]:
    """The notes, but the one that says the file has no SLO (most of these tests give none)."""
    return tuple(note for note in migration.notes if note != NO_SLO)


def notes_about(migration: Migration, key: str) -> list[str]:
    return [note for note in migration.notes if note.startswith(f"{key}:")]


# --- the model ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "models",
    [
        "mlp",
        "mlp, other",
        "[mlp, other]",
        "[{mlp: {}}, other]",
        "{mlp: , other: {}}",
    ],
)
def test_profile_models_in_each_of_model_analyzers_forms(models: str):
    migration = run(f"model_repository: repo\nprofile_models: {models}\n")
    assert migration.model == "mlp"
    assert migration.config == {"model_repository": "repo", "model": "mlp"}
    several = notes_about(migration, "profile_models")
    assert several == (
        [
            "profile_models: 2 models (mlp, other): tritontune tunes one model per search; this "
            "file is for mlp (import-ma --model NAME writes one for another)"
        ]
        if "other" in models
        else []
    )


def test_one_of_several_models_is_chosen_with_its_own_settings():
    text = """
profile_models:
  first:
    constraints: {perf_latency_p99: {max: 10}}
  second:
    constraints: {perf_latency_p99: {max: 40}}
"""
    migration = run(text, model="second")
    assert migration.config["model"] == "second"
    assert migration.config["search"]["slo_p99"] == "40ms"
    with pytest.raises(
        InputError, match=r"^ma.yaml: profile_models: has no model 'third' \(it lists first, second\)"
    ):
        run(text, model="third")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- a list\n", "ma.yaml: expected a Model Analyzer profile config (a mapping"),
        ("model_repository: repo\n", "ma.yaml: profile_models: missing; expected the model(s)"),
        ("profile_models: []\n", "ma.yaml: profile_models: names no model"),
        ("profile_models: 3\n", "ma.yaml: profile_models: expected the model(s) to profile"),
        ("profile_models: {mlp: 3}\n", "ma.yaml: profile_models.mlp: expected a mapping"),
        ("model_repository: [a]\nprofile_models: mlp\n", "ma.yaml: model_repository: expected the path"),
    ],
)
def test_bad_files_name_the_file_and_the_key(text: str, message: str):
    with pytest.raises(InputError) as err:
        run(text)
    assert str(err.value).startswith(message)


def test_no_model_repository_is_a_note():
    migration = migrate({"profile_models": "mlp"}, SOURCE)
    assert migration.notes == ("model_repository: not given: add it to the file, or pass -r DIR", NO_SLO)


# --- constraints and objectives ----------------------------------------------------------------


def test_a_models_latency_constraint_is_the_slo():
    migration = run("profile_models:\n  mlp:\n    constraints:\n      perf_latency_p99: {max: 50}\n")
    assert migration.config["search"] == {"slo_p99": "50ms"}
    assert migration.notes == ()


def test_global_constraints_apply_and_a_models_own_replace_them():
    migration = run("profile_models: mlp\nconstraints: {perf_latency_p99: {max: 12.5}}\n")
    assert migration.config["search"]["slo_p99"] == "12.5ms"
    migration = run(
        "constraints: {perf_latency_p99: {max: 100}, gpu_used_memory: {max: 200}}\n"
        "profile_models:\n  mlp:\n    constraints: {perf_latency_p99: {max: 20}}\n"
    )
    assert migration.config["search"]["slo_p99"] == "20ms"
    assert notes_about(migration, "constraints") == [
        "constraints: replaced by profile_models.mlp.constraints, as in Model Analyzer"
    ]


def test_latency_budget_overrides_the_constraint():
    migration = run(
        "latency_budget: 30\nconstraints: {perf_latency_p99: {max: 100}}\nprofile_models: mlp\n"
    )
    assert migration.config["search"]["slo_p99"] == "30ms"
    assert (
        "constraints.perf_latency_p99: replaced by latency_budget, as in Model Analyzer"
        in migration.notes
    )


def test_other_constraints_are_notes():
    migration = run(
        "profile_models: mlp\nconstraints:\n  perf_latency_p99: {max: 50}\n"
        "  perf_throughput: {min: 5}\n  perf_latency_p95: {max: 40}\n  gpu_used_memory: {max: 200}\n"
    )
    assert migration.config["search"]["slo_p99"] == "50ms"
    assert migration.notes == (
        "constraints.perf_throughput: min 5: tritontune maximizes throughput under the SLO; a "
        "minimum is not part of its search",
        "constraints.perf_latency_p95: max 40: tritontune's SLO is on p99 (search.slo_p99); not taken",
        "constraints.gpu_used_memory: max 200: tritontune constrains p99 latency only; not taken",
    )


@pytest.mark.parametrize(
    ("constraints", "message"),
    [
        (
            "{perf_latency_p99: {max: fast}}",
            "constraints.perf_latency_p99.max: 'fast' is not a number of milliseconds",
        ),
        (
            "{perf_latency_p99: {max: 0}}",
            "constraints.perf_latency_p99.max: 0 is not a latency above 0 (milliseconds)",
        ),
        ("{gpu_used_memory: {max: lots}}", "constraints.gpu_used_memory.max: 'lots' is not a number"),
        ("{perf_latency_p99: 50}", "constraints.perf_latency_p99: expected a bound, e.g. {max: 50}"),
        ("[perf_latency_p99]", "constraints: expected a mapping of metrics to bounds"),
    ],
)
def test_a_constraint_that_is_not_a_number_is_an_error(constraints: str, message: str):
    with pytest.raises(InputError) as err:
        run(f"profile_models:\n  mlp:\n    constraints: {constraints}\n")
    assert str(err.value).startswith(f"ma.yaml: profile_models.mlp.{message}")


def test_objectives_throughput_is_kept_weights_and_others_are_notes():
    assert other_notes(run("profile_models: mlp\nobjectives: [perf_throughput]\n")) == ()
    assert other_notes(run("profile_models: mlp\nobjectives: {perf_throughput: 10}\n")) == ()
    migration = run("profile_models: mlp\nobjectives: {perf_throughput: 10, perf_latency_p99: 5}\n")
    assert notes_about(migration, "objectives") == [
        "objectives: perf_throughput weight 10: tritontune maximizes throughput under the SLO; "
        "weights are not taken",
        "objectives: perf_latency_p99 weight 5: tritontune does not trade latency for throughput: "
        "it maximizes throughput with p99 under the SLO (search.slo_p99); not taken",
    ]
    migration = run("profile_models: mlp\nobjectives: [gpu_used_memory]\n")
    assert notes_about(migration, "objectives") == [
        "objectives: gpu_used_memory: tritontune's objective is throughput under the SLO; not taken",
        "objectives: tritontune maximizes throughput (perf_throughput) under the SLO, whatever the "
        "objectives",
    ]


# --- the space ---------------------------------------------------------------------------------

SWEEP = """
model_repository: /path/to/model/repository/
run_config_search_disable: True
profile_models:
  mlp:
    model_config_parameters:
      max_batch_size: [6, 8]
      dynamic_batching:
        max_queue_delay_microseconds: [200, 300]
      instance_group:
        - kind: KIND_GPU
          count: [1, 2]
"""


def test_model_config_parameters_lists_are_choices():
    migration = run(SWEEP)
    assert space_of(migration) == {
        "max_batch_size": [6, 8],
        "dynamic_batching": True,
        "max_queue_delay": ["200us", "300us"],
        "instance_count": [1, 2],
        "instance_kind": "gpu",
    }
    assert notes_about(migration, "run_config_search_disable") == [
        "run_config_search_disable: true: tritontune always searches (what search.space fixes stays "
        "fixed); `tritontune profile -f FILE` measures one config at fixed loads"
    ]


def test_a_sweep_of_instance_group_lists():
    """MA's docs: a list of group lists is a sweep; one group per config is what tritontune has."""
    migration = run(
        """
profile_models:
  mlp:
    model_config_parameters:
      max_batch_size: 2
      dynamic_batching: {max_queue_delay_microseconds: 200}
      instance_group:
        - - {kind: KIND_GPU, count: 1}
        - - {kind: KIND_CPU, count: 1}
"""
    )
    assert space_of(migration) == {
        "max_batch_size": 2,
        "dynamic_batching": True,
        "max_queue_delay": "200us",
        "instance_count": 1,
        "instance_kind": ["gpu", "cpu"],
    }
    assert notes_about(migration, "profile_models.mlp.model_config_parameters.instance_group") == []


def test_instance_groups_tritontune_cannot_hold():
    migration = run(
        """
profile_models:
  mlp:
    model_config_parameters:
      instance_group:
        - - {kind: KIND_GPU, count: 1}
          - {kind: KIND_CPU, count: 2}
        - - {kind: KIND_CPU, count: 4, gpus: [0]}
"""
    )
    assert space_of(migration) == {"instance_count": [1, 4], "instance_kind": ["gpu", "cpu"]}
    where = "profile_models.mlp.model_config_parameters"
    assert other_notes(migration) == (
        f"{where}.instance_group: 2 groups in one config: tritontune's configs have one; the first "
        "is taken",
        f"{where}.instance_group.gpus: [0]: not a dimension tritontune searches; not taken",
        f"{where}.instance_group: Model Analyzer tried the listed groups; tritontune searches every "
        "kind with every count",
        f"{where}: Model Analyzer kept what it does not list at the model's values; tritontune also "
        "searches max_batch_size, dynamic_batching, max_queue_delay (fix them under search.space "
        "to keep them)",
    )


def test_preferred_sizes_thread_counts_response_cache_and_other_fields():
    migration = run(
        """
profile_models:
  mlp:
    cpu_only: true
    model_config_parameters:
      max_batch_size: 64
      dynamic_batching:
        preferred_batch_size: [16, 32]
        max_queue_delay_microseconds: 0
        preserve_ordering: true
      instance_group: [{count: {start: 1, stop: 3}}]
      parameters:
        intra_op_thread_count: {string_value: ["1", "2"]}
        execution_mode: {string_value: "0"}
      response_cache: {enable: [true, false]}
      optimization: {graph: {level: 1}}
"""
    )
    assert space_of(migration) == {
        "max_batch_size": 64,
        "dynamic_batching": True,
        "max_queue_delay": "0us",
        "preferred_batch_size": ["none", "max"],
        "instance_count": [1, 2, 3],
        "instance_kind": "cpu",
        "intra_op_thread_count": [1, 2],
        "response_cache": [True, False],
    }
    where = "profile_models.mlp.model_config_parameters"
    assert other_notes(migration) == (
        f"{where}.dynamic_batching.preferred_batch_size: [16, 32]: tritontune's preferred_batch_size "
        "is none or max (= max_batch_size); searched as [none, max]",
        f"{where}.dynamic_batching.preserve_ordering: true: not a dimension tritontune searches: "
        "set it in the model's config.pbtxt",
        f"{where}.parameters.execution_mode: a backend parameter tritontune does not search; set it "
        "in config.pbtxt",
        f"{where}.optimization: not a dimension tritontune searches: set it in the model's "
        "config.pbtxt (tritontune keeps what the base config has)",
    )


def test_run_config_search_bounds_are_ranges_where_nothing_is_listed():
    migration = run(
        """
run_config_search_max_instance_count: 3
run_config_search_min_model_batch_size: 16
profile_models: mlp
"""
    )
    assert space_of(migration) == {
        "max_batch_size": [16, 32, 64, 128],  # MA: powers of two up to its default 128
        "instance_count": {"min": 1, "max": 3},
    }
    migration = run(SWEEP + "run_config_search_max_instance_count: 3\n")
    assert space_of(migration)["instance_count"] == [1, 2]
    assert notes_about(migration, "run_config_search_max_instance_count") == [
        "run_config_search_max_instance_count: 3: the instance_count values listed for the model win"
    ]
    with pytest.raises(
        InputError, match=r"^ma.yaml: optuna_max_trials: expected one whole number >= 1, not \[10, 20\]"
    ):
        run("optuna_max_trials: [10, 20]\nprofile_models: mlp\n")
    with pytest.raises(InputError, match="^ma.yaml: run_config_search_min_instance_count: 6 is above"):
        run("run_config_search_min_instance_count: 6\nprofile_models: mlp\n")


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        (
            "{max_batch_size: -1}",
            "model_config_parameters.max_batch_size: -1 is not a whole number >= 0",
        ),
        (
            "{max_batch_size: [8, x]}",
            "model_config_parameters.max_batch_size: 'x' is not a whole number",
        ),
        ("{instance_group: {count: 1}}", "model_config_parameters.instance_group: expected a list"),
        (
            "{instance_group: [{kind: KIND_TPU}]}",
            "model_config_parameters.instance_group.kind: 'KIND_TPU'",
        ),
        ("{dynamic_batching: 3}", "model_config_parameters.dynamic_batching: expected a mapping"),
        ("{response_cache: true}", "model_config_parameters.response_cache: expected {enable: true}"),
        ("[max_batch_size]", "model_config_parameters: expected a mapping"),
    ],
)
def test_bad_model_config_parameters(parameters: str, message: str):
    with pytest.raises(InputError) as err:
        run(f"profile_models:\n  mlp:\n    model_config_parameters: {parameters}\n")
    assert str(err.value).startswith(f"ma.yaml: profile_models.mlp.{message}")


# --- requests and load -------------------------------------------------------------------------


def test_perf_analyzer_flags():
    migration = run(
        """
profile_models:
  mlp:
    perf_analyzer_flags:
      input-data: [inputs.json, random, more.json]
      batch-size: 4
      percentile: 95
      measurement-interval: 2000
      stability-percentage: 5
      shape: INPUT:256
      request-rate-range: 100:1000:100
perf_analyzer_flags:
  percentile: 99
"""
    )
    config = migration.config
    assert (config["input_data"], config["batch_size"], config["window"]) == ("inputs.json", 4, "2000ms")
    assert config["search"] == {"load": "poisson"}
    where = "profile_models.mlp.perf_analyzer_flags"
    assert other_notes(migration) == (
        "perf_analyzer_flags: replaced by profile_models.mlp.perf_analyzer_flags, as in Model Analyzer",
        f"{where}.input-data: random: tritontune sends seeded random inputs when input_data is "
        "not given",
        f"{where}.input-data: more.json: tritontune takes one input data file (inputs.json); not taken",
        f"{where}.percentile: 95: tritontune's SLO is on p99 (search.slo_p99): give your p99 "
        "target there",
        f"{where}.stability-percentage: 5: tritontune measures in short windows until the throughput "
        "is stable (window, max_windows); not taken",
        f"{where}.shape: INPUT:256: tritontune sends the load with its own generator (no "
        "perf_analyzer); not taken",
        f"{where}.request-rate-range: 100:1000:100: tritontune ramps the load itself from the "
        "lowest one until p99 misses the SLO (load: poisson, Poisson arrivals); the range is not "
        "taken",
    )


def test_client_batch_sizes_and_load_levels():
    migration = run("batch_sizes: 8\nconcurrency: {start: 2, stop: 64, step: 8}\nprofile_models: mlp\n")
    assert migration.config["batch_size"] == 8
    assert migration.config["profile"] == {"concurrency": [2, 10, 18, 26, 34, 42, 50, 58]}
    assert "search" not in migration.config  # no SLO (a note), load stays concurrency
    migration = run(
        "batch_sizes: 1,2,4\nprofile_models:\n  mlp:\n    parameters: {request_rate: [100, 400]}\n"
        "concurrency: [1, 2]\n"
    )
    assert "batch_size" not in migration.config
    assert migration.config["search"] == {"load": "poisson"}
    assert migration.config["profile"] == {"request_rate": [100, 400], "arrival": "constant"}
    assert notes_about(migration, "batch_sizes") == [
        "batch_sizes: [1, 2, 4]: tritontune measures one client batch size per search (batch_size): "
        "run one search per size; not taken"
    ]
    assert notes_about(migration, "concurrency") == [
        "concurrency: replaced by profile_models.mlp.parameters.request_rate, as in Model Analyzer"
    ]
    with pytest.raises(
        InputError, match="^ma.yaml: request_rate: give concurrency or request_rate, not both"
    ):
        run("concurrency: 4\nrequest_rate: 100\nprofile_models: mlp\n")


# --- the server --------------------------------------------------------------------------------


def test_docker_launch():
    migration = run(
        """
triton_launch_mode: docker
triton_docker_image: nvcr.io/nvidia/tritonserver:24.10-py3
triton_docker_shm_size: 2g
triton_server_path: /opt/tritonserver/bin/tritonserver
triton_server_flags: {log_verbose: true, exit_timeout_secs: 120, model-control-mode: poll}
profile_models: mlp
"""
    )
    config = migration.config
    assert {k: config[k] for k in ("launch", "image", "shm_size", "server_arg")} == {
        "launch": "docker",
        "image": "nvcr.io/nvidia/tritonserver:24.10-py3",
        "shm_size": "2g",
        "server_arg": ["--log-verbose=true", "--exit-timeout-secs=120"],
    }
    assert "tritonserver" not in config
    assert other_notes(migration)[:3] == (
        "triton_server_path: /opt/tritonserver/bin/tritonserver: used with launch local only (this "
        "file: docker)",
        "triton_launch_mode: docker: Model Analyzer gave its container every GPU by default; "
        "tritontune starts it without GPUs unless gpus: all is set",
        "triton_server_flags.model-control-mode: poll: --model-control-mode is set by tritontune "
        "(tritontune switches configs by reloading models in explicit model-control mode)",
    )
    assert run("triton_launch_mode: docker\ngpus: [0, 1]\nprofile_models: mlp\n").config["gpus"] == "0,1"
    assert run("triton_launch_mode: docker\ngpus: all\nprofile_models: mlp\n").config["gpus"] == "all"


def test_remote_launch():
    migration = run(
        """
triton_launch_mode: remote
client_protocol: http
triton_http_endpoint: triton.internal:8000
triton_grpc_endpoint: triton.internal:8001
triton_server_flags: {log_verbose: 1}
perf_analyzer_flags: {ssl-https-ca-certificates-file: ca.pem}
profile_models: mlp
"""
    )
    config = migration.config
    assert {k: config[k] for k in ("launch", "protocol", "url", "ssl_ca")} == {
        "launch": "remote",
        "protocol": "http",
        "url": "triton.internal:8000",
        "ssl_ca": "ca.pem",
    }
    assert other_notes(migration)[:2] == (
        "triton_grpc_endpoint: triton.internal:8001: not used: tritontune talks http to the server",
        "triton_server_flags: the remote server is not tritontune's to start; pass them where it is "
        "started",
    )
    default = run("triton_launch_mode: remote\nprofile_models: mlp\n").config
    assert (default["protocol"], default["url"]) == ("grpc", "localhost:8001")  # MA's defaults


def test_local_and_c_api_launch():
    migration = run(
        "triton_launch_mode: c_api\ntriton_server_path: /opt/tritonserver/bin/tritonserver\n"
        "triton_install_path: /opt/tritonserver\ntriton_output_path: server.log\n"
        "triton_grpc_endpoint: localhost:9001\nprofile_models: mlp\n"
    )
    config = migration.config
    assert (config["launch"], config["tritonserver"], config["server_log"]) == (
        "local",
        "/opt/tritonserver/bin/tritonserver",
        "server.log",
    )
    assert notes_about(migration, "triton_launch_mode") == [
        "triton_launch_mode: c_api: tritontune runs tritonserver as a process: launch local (the C "
        "API has no tritontune counterpart)"
    ]
    assert len(notes_about(migration, "triton_grpc_endpoint")) == 1
    assert len(notes_about(migration, "triton_install_path")) == 1
    assert "tritonserver" not in run("triton_server_path: tritonserver\nprofile_models: mlp\n").config
    with pytest.raises(InputError, match="^ma.yaml: triton_launch_mode: 'k8s' is not one of local"):
        run("triton_launch_mode: k8s\nprofile_models: mlp\n")


# --- the search and its outputs ----------------------------------------------------------------


def test_search_settings():
    migration = run(
        "run_config_search_mode: optuna\noptuna_max_trials: 40\noptuna_min_trials: 10\n"
        "num_top_model_configs: 3\nrequest_rate_search_enable: true\nprofile_models: mlp\n"
    )
    assert migration.config["search"] == {"trials": 40, "load": "poisson"}
    assert migration.config["export"] == {"top_k": 3}
    assert [n.split(":")[0] for n in other_notes(migration)] == [
        "request_rate_search_enable",
        "optuna_min_trials",
    ]
    assert notes_about(
        run("run_config_search_mode: quick\nprofile_models: mlp\n"), "run_config_search_mode"
    )


@pytest.mark.parametrize(
    "key",
    [
        "output_model_repository_path: out",
        "export_path: results",
        "checkpoint_directory: ckpt",
        "override_output_model_repository: true",
        "perf_analyzer_path: /usr/bin/perf_analyzer",
        "run_config_search_max_request_rate: 2000",
        "ensemble_composing_models: [a, b]",
        "triton_docker_mounts: ['/a:/a:ro']",
        "min_throughput: 100",
    ],
)
def test_keys_without_a_counterpart_are_one_note_each(key: str):
    migration = run(f"{key}\nprofile_models: mlp\n")
    name = key.split(":")[0]
    assert len(notes_about(migration, name)) == 1
    assert migration.config == {"model_repository": "repo", "model": "mlp"}


@pytest.mark.parametrize("value", ["a, b", "[a, b]", "[{a: {}}, {b: {}}]", "{a: {}, b: {}}"])
def test_bls_composing_models_become_the_models_a_bls_model_calls(value: str):
    migration = run(f"bls_composing_models: {value}\nprofile_models: chain\n")
    assert migration.config["search"]["composing"] == ["a", "b"]
    assert migration.config["profile"]["composing"] == ["a", "b"]
    assert not notes_about(migration, "bls_composing_models")


def test_bad_bls_composing_models_is_one_line():
    with pytest.raises(InputError, match="bls_composing_models: a list of model names"):
        run("bls_composing_models: [[a]]\nprofile_models: chain\n")


def test_unknown_keys_are_notes_never_dropped():
    migration = run(
        "profile_modles: x\nprofile_models:\n  mlp:\n    cpu_onli: true\n    triton_server_environment: "
        "{LD_PRELOAD: /x.so}\n"
    )
    assert other_notes(migration) == (
        "profile_models.mlp.triton_server_environment: tritontune's local server inherits the "
        "environment tritontune runs in: set these variables there",
        "profile_models.mlp.cpu_onli: not a Model Analyzer model key tritontune knows; not taken",
        "profile_modles: x: not a Model Analyzer profile key tritontune knows; not taken",
    )


def test_the_yaml_text_is_the_mapping_with_the_notes_as_comments():
    migration = run(SWEEP)
    text = migration.yaml_text("tritontune.yaml")
    assert yaml.safe_load(text) == migration.config
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[1] == "# (tritontune import-ma). Run: tritontune search -f tritontune.yaml"
    assert header[3:] == [f"#   {note}" for note in migration.notes]


def test_the_highest_load_bounds_the_ramp_of_the_same_load_mode():
    migration = run("run_config_search_max_concurrency: 256\nprofile_models: mlp\n")
    assert migration.config["search"] == {"max_load": 256}
    rated = run(
        "request_rate_search_enable: true\nrun_config_search_max_request_rate: 4000\n"
        "run_config_search_max_concurrency: 64\nprofile_models: mlp\n"
    )
    assert rated.config["search"]["load"] == "poisson" and rated.config["search"]["max_load"] == 4000
    assert notes_about(rated, "run_config_search_max_concurrency") == [
        "run_config_search_max_concurrency: 64: this search ramps request rates (poisson); its "
        "bound is run_config_search_max_request_rate"
    ]
