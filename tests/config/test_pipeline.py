"""Ensembles read as pipelines: the graph, its order, and each rule Triton checks on load."""

from __future__ import annotations

from pathlib import Path

import pytest

from tritontune.config.model_config import parse_config_text
from tritontune.config.pipeline import LATEST_VERSION, is_pipeline, load_pipeline
from tritontune.errors import ConfigError, InputError

TOKENIZER = """
name: "tok"
backend: "python"
max_batch_size: 8
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
"""

ENCODER = """
name: "enc"
platform: "onnxruntime_onnx"
max_batch_size: 8
input [
  { name: "input_ids" data_type: TYPE_INT64 dims: [ -1 ] },
  { name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }
]
output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
"""

#: The steps are written consumer first: the order is the graph's, not the file's.
PIPE = """
name: "pipe"
platform: "ensemble"
max_batch_size: 8
input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]
output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "enc"
      model_version: -1
      input_map { key: "input_ids" value: "ids" }
      input_map { key: "attention_mask" value: "mask" }
      output_map { key: "embedding" value: "embedding" }
    },
    {
      model_name: "tok"
      model_version: -1
      input_map { key: "TEXT" value: "text" }
      output_map { key: "input_ids" value: "ids" }
      output_map { key: "attention_mask" value: "mask" }
    }
  ]
}
"""


def add_model(repo: Path, name: str, config: str, *, versions: tuple[str, ...] = ("1",)) -> None:
    """A model directory: its config and version directories (with the file its backend needs)."""
    directory = repo / name
    for version in versions:
        (directory / version).mkdir(parents=True)
        if "onnxruntime" in config:
            (directory / version / "model.onnx").write_bytes(b"")
        elif "python" in config:
            (directory / version / "model.py").write_text("")
    (directory / "config.pbtxt").write_text(config)


def rewrite(repo: Path, name: str, old: str, new: str) -> None:
    path = repo / name / "config.pbtxt"
    text = path.read_text()
    assert old in text, f"{old!r} not in {name}'s config"
    path.write_text(text.replace(old, new))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "models"
    add_model(repo, "tok", TOKENIZER)
    add_model(repo, "enc", ENCODER)
    add_model(repo, "pipe", PIPE)
    return repo


def refusal(repo: Path, name: str = "pipe") -> str:
    with pytest.raises(ConfigError) as err:
        load_pipeline(repo, name)
    message = str(err.value)
    assert "\n" not in message
    return message.replace(f"{repo}/", "REPO/").replace(str(repo), "REPO")


def test_two_step_pipeline(repo: Path):
    pipeline = load_pipeline(repo, "pipe")
    assert pipeline.name == "pipe"
    assert is_pipeline(pipeline.config)
    assert [(s.index, s.model) for s in pipeline.steps] == [(1, "tok"), (0, "enc")]
    tok, enc = pipeline.steps
    assert tok.version == LATEST_VERSION
    assert tok.input_map == {"TEXT": "text"}
    assert list(tok.output_map.items()) == [("attention_mask", "mask"), ("input_ids", "ids")]
    assert list(enc.input_map.items()) == [("attention_mask", "mask"), ("input_ids", "ids")]
    assert enc.reads == ("mask", "ids")
    assert enc.writes == ("embedding",)
    assert pipeline.inputs == ("text",)
    assert pipeline.outputs == ("embedding",)
    assert pipeline.composing_models == ("tok", "enc")
    assert [(m.name, m.version, m.backend) for m in pipeline.models] == [
        ("tok", "1", "python"),
        ("enc", "1", "onnxruntime"),
    ]
    assert pipeline.source_of(enc).name == "enc"


def test_producers_and_consumers(repo: Path):
    pipeline = load_pipeline(repo, "pipe")
    tok, enc = pipeline.steps
    assert pipeline.producer_of("text") is None
    assert pipeline.producer_of("ids") == tok
    assert pipeline.producer_of("embedding") == enc
    assert pipeline.consumers_of("text") == (tok,)
    assert pipeline.consumers_of("mask") == (enc,)
    assert pipeline.consumers_of("embedding") == ()
    with pytest.raises(KeyError):
        pipeline.producer_of("nothing")
    with pytest.raises(KeyError):
        pipeline.consumers_of("nothing")


def test_is_pipeline():
    assert is_pipeline(parse_config_text(PIPE))
    assert not is_pipeline(parse_config_text(ENCODER))
    assert not is_pipeline(parse_config_text('name: "x" backend: "ensemble"'))


def test_diamond(tmp_path: Path):
    """Two steps read one tensor; the step joining them runs after both."""
    repo = tmp_path / "models"
    add_model(repo, "tok", TOKENIZER)
    for name in ("left", "right"):
        add_model(
            repo,
            name,
            f"""
            name: "{name}" backend: "python" max_batch_size: 8
            input [ {{ name: "ids" data_type: TYPE_INT64 dims: [ -1 ] }} ]
            output [ {{ name: "score" data_type: TYPE_FP32 dims: [ 1 ] }} ]
            """,
        )
    add_model(
        repo,
        "join",
        """
        name: "join" backend: "python" max_batch_size: 8
        input [
          { name: "a" data_type: TYPE_FP32 dims: [ 1 ] },
          { name: "b" data_type: TYPE_FP32 dims: [ 1 ] }
        ]
        output [ { name: "score" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """,
    )
    add_model(
        repo,
        "diamond",
        """
        name: "diamond" platform: "ensemble" max_batch_size: 8
        input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "score" data_type: TYPE_FP32 dims: [ 1 ] } ]
        ensemble_scheduling { step [
          { model_name: "join" model_version: -1
            input_map { key: "a" value: "left_score" } input_map { key: "b" value: "right_score" }
            output_map { key: "score" value: "score" } },
          { model_name: "right" model_version: -1
            input_map { key: "ids" value: "ids" } output_map { key: "score" value: "right_score" } },
          { model_name: "tok" model_version: -1
            input_map { key: "TEXT" value: "text" }
            output_map { key: "input_ids" value: "ids" } },
          { model_name: "left" model_version: -1
            input_map { key: "ids" value: "ids" } output_map { key: "score" value: "left_score" } }
        ] }
        """,
    )
    pipeline = load_pipeline(repo, "diamond")
    assert [s.model for s in pipeline.steps] == ["tok", "right", "left", "join"]
    assert [s.model for s in pipeline.consumers_of("ids")] == ["right", "left"]
    assert pipeline.producer_of("left_score") == pipeline.steps[2]


def test_cycle(repo: Path):
    rewrite(
        repo,
        "tok",
        'input [ { name: "TEXT"',
        'input [ { name: "emb" data_type: TYPE_FP32 dims: [ 384 ] }, { name: "TEXT"',
    )
    rewrite(
        repo,
        "pipe",
        'input_map { key: "TEXT" value: "text" }',
        'input_map { key: "TEXT" value: "text" } input_map { key: "emb" value: "embedding" }',
    )
    assert refusal(repo) == (
        "REPO/pipe/config.pbtxt: ensemble_scheduling: the steps form a cycle, so none of them can "
        "run: step[0] (model 'enc') -> 'embedding' -> step[1] (model 'tok') -> 'mask' -> "
        "step[0] (model 'enc')"
    )


def test_a_step_reading_its_own_output_is_a_cycle(repo: Path):
    rewrite(
        repo,
        "tok",
        'input [ { name: "TEXT"',
        'input [ { name: "ids" data_type: TYPE_INT64 dims: [ -1 ] }, { name: "TEXT"',
    )
    rewrite(
        repo,
        "pipe",
        'input_map { key: "TEXT" value: "text" }',
        'input_map { key: "TEXT" value: "text" } input_map { key: "ids" value: "ids" }',
    )
    assert refusal(repo).endswith(
        "cycle, so none of them can run: step[1] (model 'tok') -> 'ids' -> step[1] (model 'tok')"
    )


STEP0 = "REPO/pipe/config.pbtxt: ensemble_scheduling.step[0]"
STEP1 = "REPO/pipe/config.pbtxt: ensemble_scheduling.step[1]"


@pytest.mark.parametrize(
    ("model", "old", "new", "message"),
    [
        (
            "pipe",
            'model_name: "tok"',
            'model_name: "tokx"',
            f"{STEP1}.model_name: model 'tokx' is not in REPO (models there: enc, pipe, tok)",
        ),
        (
            "pipe",
            'model_name: "tok"',
            'model_name: "../tok"',
            f"{STEP1}.model_name: model '../tok' is not in REPO (models there: enc, pipe, tok)",
        ),
        (
            "pipe",
            'key: "TEXT"',
            'key: "text"',
            f"{STEP1}.input_map: 'text' is not an input of model 'tok' (its inputs: TEXT)",
        ),
        (
            "pipe",
            'output_map { key: "embedding"',
            'output_map { key: "emb"',
            f"{STEP0}.output_map: 'emb' is not an output of model 'enc' (its outputs: embedding)",
        ),
        (
            "pipe",
            'input_map { key: "attention_mask" value: "mask" }',
            "",
            f"{STEP0}.input_map: input 'attention_mask' of model 'enc' is not mapped (map it to "
            "an ensemble tensor, or mark it optional in the model's config)",
        ),
        (
            "pipe",
            'key: "attention_mask" value: "mask" }\n      output_map',
            'key: "attention_mask" value: "masks" }\n      output_map',
            f"{STEP0}.input_map: tensor 'masks' (model 'enc' input 'attention_mask') is neither an "
            "ensemble input nor written by a step (ensemble inputs: text)",
        ),
        (
            "pipe",
            'output_map { key: "embedding" value: "embedding" }',
            'output_map { key: "embedding" value: "emb" }',
            "REPO/pipe/config.pbtxt: output 'embedding': no step writes this ensemble output (map "
            "a step's output to it in an output_map)",
        ),
        (
            "pipe",
            'output_map { key: "attention_mask" value: "mask" }',
            'output_map { key: "attention_mask" value: "embedding" }',
            f"{STEP1}.output_map: tensor 'embedding' is already written by step[0] (model 'enc'); "
            "a tensor has one producer (map this output to a tensor of its own)",
        ),
        (
            "pipe",
            'output_map { key: "attention_mask" value: "mask" }',
            'output_map { key: "attention_mask" value: "text" }',
            f"{STEP1}.output_map: tensor 'text' is an ensemble input; model 'tok' output "
            "'attention_mask' cannot write it too (map the output to a tensor of its own)",
        ),
        (
            "pipe",
            'output_map { key: "attention_mask" value: "mask" }',
            'output_map { key: "attention_mask" value: "ids" }',
            f"{STEP1}.output_map: outputs 'attention_mask', 'input_ids' of model 'tok' both write "
            "tensor 'ids' (a tensor has one producer)",
        ),
        (
            "enc",
            'name: "input_ids" data_type: TYPE_INT64',
            'name: "input_ids" data_type: TYPE_INT32',
            f"{STEP0}.input_map: tensor 'ids' is TYPE_INT64 (model 'tok' output 'input_ids' "
            "(step[1])) but model 'enc' input 'input_ids' (step[0]) is TYPE_INT32",
        ),
        (
            "pipe",
            'output [ { name: "embedding" data_type: TYPE_FP32',
            'output [ { name: "embedding" data_type: TYPE_FP16',
            "REPO/pipe/config.pbtxt: output 'embedding': tensor 'embedding' is TYPE_FP32 (model "
            "'enc' output 'embedding' (step[0])) but ensemble output 'embedding' is TYPE_FP16",
        ),
        (
            "pipe",
            'input [ { name: "text" data_type: TYPE_STRING',
            'input [ { name: "text" data_type: TYPE_INT32',
            f"{STEP1}.input_map: tensor 'text' is TYPE_INT32 (ensemble input 'text') but model "
            "'tok' input 'TEXT' (step[1]) is TYPE_STRING",
        ),
        (
            "pipe",
            "data_type: TYPE_FP32 dims: [ 384 ]",
            "data_type: TYPE_FP32 dims: [ 768 ]",
            "REPO/pipe/config.pbtxt: output 'embedding': tensor 'embedding' has shape [-1, 384] "
            "(model 'enc' output 'embedding' (step[0])) but ensemble output 'embedding' has shape "
            "[-1, 768]",
        ),
        (
            "pipe",
            "data_type: TYPE_FP32 dims: [ 384 ]",
            "data_type: TYPE_FP32 dims: [ 384, 1 ]",
            "REPO/pipe/config.pbtxt: output 'embedding': tensor 'embedding' has shape [-1, 384] "
            "(model 'enc' output 'embedding' (step[0])) but ensemble output 'embedding' has shape "
            "[-1, 384, 1]",
        ),
        (
            "enc",
            "max_batch_size: 8",
            "max_batch_size: 4",
            "REPO/pipe/config.pbtxt: max_batch_size: 8 is above the max_batch_size 4 of model "
            "'enc' (step[0]); the ensemble's may be at most its composing models'",
        ),
        (
            "pipe",
            'input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]',
            'input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] },'
            ' { name: "extra" data_type: TYPE_STRING dims: [ 1 ] } ]',
            "REPO/pipe/config.pbtxt: input 'extra': no step reads this ensemble input (Triton "
            "refuses unused ensemble tensors)",
        ),
        (
            "pipe",
            'model_name: "tok"\n      model_version: -1',
            'model_name: "tok"',
            f"{STEP1}.model_version: model 'tok' has no version 0 that Triton loads (its "
            "version_policy loads: 1); an unset model_version is 0: write model_version: -1 for "
            "the newest version",
        ),
        (
            "pipe",
            'model_name: "tok"\n      model_version: -1',
            'model_name: "tok"\n      model_version: 2',
            f"{STEP1}.model_version: model 'tok' has no version 2 that Triton loads (its "
            "version_policy loads: 1)",
        ),
        (
            "pipe",
            "max_batch_size: 8",
            "max_batch_size: 8 instance_group [ { count: 2 } ]",
            "REPO/pipe/config.pbtxt: instance_group: an ensemble has no instances of its own "
            "(Triton refuses it); set it on the composing models",
        ),
        (
            "pipe",
            'model_name: "enc"',
            'model_name: ""',
            f"{STEP0}.model_name: not set (the step must name a model of the repository)",
        ),
        (
            "pipe",
            'output_map { key: "embedding" value: "embedding" }',
            "",
            f"{STEP0}.output_map: empty (Triton needs every step to map at least one output of "
            "model 'enc')",
        ),
    ],
)
def test_refusals(repo: Path, model: str, old: str, new: str, message: str):
    rewrite(repo, model, old, new)
    assert refusal(repo) == message


def test_unused_step_output(repo: Path):
    rewrite(repo, "tok", "output [", 'output [ { name: "type_ids" data_type: TYPE_INT64 dims: [ -1 ] },')
    rewrite(
        repo,
        "pipe",
        'output_map { key: "input_ids"',
        'output_map { key: "type_ids" value: "types" } output_map { key: "input_ids"',
    )
    assert refusal(repo) == (
        f"{STEP1}.output_map: tensor 'types' (model 'tok' output 'type_ids') is read by no step "
        "and is not an ensemble output (Triton refuses unused tensors; drop it from output_map)"
    )


def test_unmapped_optional_input_and_outputs_are_fine(repo: Path):
    rewrite(
        repo,
        "enc",
        'name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] }',
        'name: "attention_mask" data_type: TYPE_INT64 dims: [ -1 ] optional: true }',
    )
    rewrite(repo, "pipe", 'input_map { key: "attention_mask" value: "mask" }', "")
    rewrite(repo, "pipe", 'output_map { key: "attention_mask" value: "mask" }', "")
    pipeline = load_pipeline(repo, "pipe")
    assert pipeline.steps[1].input_map == {"input_ids": "ids"}


def test_a_model_that_does_not_batch_matches_by_its_leading_dimension(repo: Path):
    """As in Triton: a non-batching ``[-1, 384]`` is a batching ``[384]`` with its batch dim."""
    rewrite(repo, "enc", "max_batch_size: 8", "max_batch_size: 0")
    rewrite(repo, "enc", "dims: [ -1 ]", "dims: [ -1, -1 ]")
    rewrite(repo, "enc", "dims: [ 384 ]", "dims: [ -1, 384 ]")
    assert load_pipeline(repo, "pipe").composing_models == ("tok", "enc")
    rewrite(repo, "enc", "dims: [ -1, 384 ]", "dims: [ 2, 385 ]")
    assert refusal(repo) == (
        "REPO/pipe/config.pbtxt: output 'embedding': tensor 'embedding' has shape [2, 385] (model "
        "'enc' output 'embedding' (step[0])) but ensemble output 'embedding' has shape [-1, 384]"
    )


def test_not_an_ensemble(repo: Path):
    assert refusal(repo, "enc") == (
        "REPO/enc/config.pbtxt: platform: model 'enc' is not an ensemble ('onnxruntime'; an "
        'ensemble has platform: "ensemble")'
    )


def test_no_steps(repo: Path):
    (repo / "pipe" / "config.pbtxt").write_text(
        'name: "pipe" platform: "ensemble" input [ { name: "x" data_type: TYPE_FP32 dims: [1] } ]'
    )
    assert refusal(repo) == (
        "REPO/pipe/config.pbtxt: ensemble_scheduling: ensemble 'pipe' has no steps (each step "
        "names a model and maps its inputs and outputs)"
    )


def test_nested_ensembles_are_refused(repo: Path):
    add_model(repo, "inner", PIPE.replace('name: "pipe"', 'name: "inner"'))
    add_model(
        repo,
        "outer",
        """
        name: "outer" platform: "ensemble" max_batch_size: 8
        input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]
        ensemble_scheduling { step [ { model_name: "inner" model_version: -1
          input_map { key: "text" value: "text" }
          output_map { key: "embedding" value: "embedding" } } ] }
        """,
    )
    assert refusal(repo, "outer") == (
        "REPO/outer/config.pbtxt: ensemble_scheduling.step[0].model_name: model 'inner' is "
        "itself an ensemble; nested ensembles are not supported (write its steps into this "
        "ensemble)"
    )


def test_pinned_versions(tmp_path: Path):
    """A pinned version is one the model's version_policy loads; -1 is the newest of those."""
    repo = tmp_path / "models"
    add_model(repo, "tok", TOKENIZER + "version_policy { all {} }", versions=("1", "2"))
    add_model(repo, "enc", ENCODER, versions=("1", "3"))
    add_model(
        repo,
        "pipe",
        PIPE.replace(
            'model_version: -1\n      input_map { key: "TEXT"',
            'model_version: 1\n      input_map { key: "TEXT"',
        ),
    )
    pipeline = load_pipeline(repo, "pipe")
    assert [(m.name, m.version) for m in pipeline.models] == [("tok", "1"), ("enc", "3")]
    assert pipeline.source_of(pipeline.steps[0]).model_file == repo / "tok" / "1" / "model"
    rewrite(
        repo,
        "pipe",
        'model_name: "enc"\n      model_version: -1',
        'model_name: "enc"\n      model_version: 1',
    )
    assert refusal(repo) == (
        f"{STEP0}.model_version: model 'enc' has no version 1 that Triton loads (its "
        "version_policy loads: 3)"
    )


def test_the_ensembles_own_shapes_are_read_after_reshape(repo: Path):
    """Triton compares an ensemble input's or output's reshape, when it has one, not its dims."""
    declared = 'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]'
    reshaped = (
        'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 1, 384 ] '
        "reshape { shape: [ 384 ] } } ]"
    )
    rewrite(repo, "pipe", declared, reshaped)
    assert load_pipeline(repo, "pipe").outputs == ("embedding",)
    rewrite(repo, "pipe", "reshape { shape: [ 384 ] }", "")
    assert refusal(repo).endswith(
        "(model 'enc' output 'embedding' (step[0])) but ensemble output 'embedding' has shape "
        "[-1, 1, 384]"
    )


def test_every_reader_is_checked_against_the_producer(repo: Path):
    """Two steps read one tensor: the second reader's type is checked too, not only the first's."""
    add_model(
        repo,
        "count",
        """
        name: "count" backend: "python" max_batch_size: 8
        input [ { name: "ids" data_type: TYPE_INT32 dims: [ -1 ] } ]
        output [ { name: "n" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """,
    )
    rewrite(
        repo,
        "pipe",
        'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]',
        'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] },'
        ' { name: "n" data_type: TYPE_INT32 dims: [ 1 ] } ]',
    )
    rewrite(
        repo,
        "pipe",
        "  ]\n}",
        '    , { model_name: "count" model_version: -1 input_map { key: "ids" value: "ids" }\n'
        '        output_map { key: "n" value: "n" } }\n  ]\n}',
    )
    assert refusal(repo) == (
        "REPO/pipe/config.pbtxt: ensemble_scheduling.step[2].input_map: tensor 'ids' is "
        "TYPE_INT64 (model 'tok' output 'input_ids' (step[1])) but model 'count' input 'ids' "
        "(step[2]) is TYPE_INT32"
    )
    rewrite(repo, "count", 'name: "ids" data_type: TYPE_INT32', 'name: "ids" data_type: TYPE_INT64')
    pipeline = load_pipeline(repo, "pipe")
    assert [s.model for s in pipeline.consumers_of("ids")] == ["enc", "count"]
    assert pipeline.composing_models == ("tok", "enc", "count")


def test_decoupled_streams_are_not_joined(repo: Path):
    """A decoupled tokenizer's responses each carry on alone; the encoder may not also read an
    ensemble input, which belongs to the request rather than to one response."""
    rewrite(
        repo,
        "tok",
        "max_batch_size: 8",
        "max_batch_size: 8 model_transaction_policy { decoupled: true }",
    )
    assert load_pipeline(repo, "pipe").composing_models == ("tok", "enc")
    rewrite(
        repo,
        "pipe",
        'key: "attention_mask" value: "mask" }\n      output_map',
        'key: "attention_mask" value: "text" }\n      output_map',
    )
    rewrite(
        repo,
        "enc",
        'name: "attention_mask" data_type: TYPE_INT64',
        'name: "attention_mask" data_type: TYPE_STRING',
    )
    rewrite(repo, "pipe", 'output_map { key: "attention_mask" value: "mask" }', "")
    assert refusal(repo) == (
        f"{STEP0}.input_map: the inputs of model 'enc' come from different decoupled streams "
        "('text' from the ensemble's inputs and 'ids' from decoupled model 'tok' (step[1])); "
        "Triton refuses to join them"
    )


def test_the_ensembles_outputs_come_from_one_stream(repo: Path):
    rewrite(
        repo,
        "enc",
        "max_batch_size: 8",
        "max_batch_size: 8 model_transaction_policy { decoupled: true }",
    )
    rewrite(
        repo,
        "pipe",
        'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] } ]',
        'output [ { name: "embedding" data_type: TYPE_FP32 dims: [ 384 ] },'
        ' { name: "mask" data_type: TYPE_INT64 dims: [ -1 ] } ]',
    )
    assert refusal(repo) == (
        "REPO/pipe/config.pbtxt: output: the ensemble's outputs come from different decoupled "
        "streams ('embedding' from decoupled model 'enc' (step[0]) and 'mask' from the ensemble's "
        "inputs); Triton refuses to join them"
    )


def test_an_ensemble_needs_a_version_directory(repo: Path):
    (repo / "pipe" / "1").rmdir()
    with pytest.raises(InputError) as err:
        load_pipeline(repo, "pipe")
    assert str(err.value) == (
        f"{repo}/pipe: no version directory; Triton loads an ensemble only from one, even empty "
        f"(create {repo}/pipe/1)"
    )


def test_a_pipelines_configs_are_kept_as_one_text_and_read_back(tmp_path: Path):
    from tests.pipelines import PIPELINE, write_pipeline
    from tritontune.config.pipeline import configs_from_text, configs_to_text, describe_configs
    from tritontune.config.variant import Variant, apply_variant, knobs_summary

    pipeline = load_pipeline(write_pipeline(tmp_path), PIPELINE)
    configs = {
        source.name: apply_variant(source.base_config, Variant(instance_count=i + 1))
        for i, source in enumerate(pipeline.models)
    }
    text = configs_to_text(configs)
    assert configs_from_text(text, source="trial 3") == configs
    knobs = describe_configs(configs)
    assert set(knobs["pipeline"]) == {"scale", "shift"}
    assert knobs_summary(knobs) == (
        "scale: max_batch_size=8 batching(delay=0) 1xAUTO"
        " | shift: max_batch_size=8 batching(delay=0) 2xAUTO"
    )
    # One model's config is kept as it always was: its plain config.pbtxt text.
    single = {"scale": configs["scale"]}
    assert configs_from_text(configs_to_text(single), source="x") == single
    assert "pipeline" not in describe_configs(single)


def test_a_pipeline_variant_names_each_models_knobs():
    from tritontune.config.pipeline import PipelineVariant
    from tritontune.config.variant import Variant

    variant = PipelineVariant(models=(("a", Variant(max_batch_size=4)), ("b", Variant())))
    assert variant.of("a").max_batch_size == 4 and variant.of("c") == Variant()
    assert variant.to_dict() == {"a": {"max_batch_size": 4}}
    assert variant != Variant() and PipelineVariant() != Variant()
