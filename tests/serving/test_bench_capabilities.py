"""What a kind of bench lacks is declared before it starts, and refused in that one line.

A pipeline measures one class end to end; a group of models measures a workload's classes, each
sent to its model. What each cannot do is what it serves' ``LACKS`` (no server needed to know
it), and the one session's members refuse it from there: no member only raises, and the line a
command gives before launch is the one the bench would give."""

import dataclasses
import re
from pathlib import Path

import pytest

from tests.pipelines import write_pipeline
from tritontune.config.repository import load_model_source
from tritontune.config.variant import Variant
from tritontune.errors import InputError
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.traffic import read_traffic
from tritontune.precision.convert import cache_dir as precision_cache_dir
from tritontune.serving.opening import open_pipeline_session, open_session
from tritontune.serving.served import Capability, ModelGroup, ServedPipeline, require
from tritontune.serving.session import TuningSession

WORKLOAD = Path(__file__).parents[2] / "examples" / "workloads" / "interactive-batch.yaml"


def test_one_model_lacks_nothing(example_repository: Path):
    session = TuningSession(load_model_source(example_repository, "mlp"))
    assert session.lacks == {}
    for capability in Capability:
        require(session.lacks, capability)  # no refusal


def test_a_pipeline_refuses_classes_and_endpoints_with_its_declared_line(tmp_path: Path):
    repository = write_pipeline(tmp_path / "repository")
    session = open_pipeline_session(repository, "pipe")
    why = ServedPipeline.LACKS[Capability.TRAFFIC]
    assert set(session.lacks) == {Capability.TRAFFIC, Capability.ENDPOINTS}
    with pytest.raises(InputError, match="not searched for pipelines yet") as traffic:
        session.measure_traffic(read_traffic(WORKLOAD), 1.0)
    assert str(traffic.value) == why
    with pytest.raises(InputError, match="not searched for pipelines yet"):
        session.load_endpoints({"a": Variant()})
    with pytest.raises(InputError, match="not searched for pipelines yet"):
        session.load_routes({})
    # and before any session is made: what `search --workload -m pipe` says
    with pytest.raises(InputError, match=re.escape(why)):
        open_session(repository, "pipe", for_traffic=True)


def test_a_group_refuses_one_class_and_endpoints_with_its_declared_line(example_repository: Path):
    mlp = load_model_source(example_repository, "mlp")
    group = TuningSession(ModelGroup((mlp, dataclasses.replace(mlp, name="other"))))
    assert set(group.lacks) == {Capability.ONE_CLASS, Capability.ENDPOINTS}
    with pytest.raises(InputError, match="one class of load has no model to call"):
        group.measure(LoadSpec.concurrency(1))
    with pytest.raises(InputError, match="no endpoints to split"):
        group.load_endpoints({"a": Variant()})


def test_a_group_mounts_every_models_files_and_the_precision_cache(example_repository: Path):
    """A group's models get precision variants, linked from the precision cache: a server in a
    container must see the cache as one model's session does (it was left out)."""
    mlp = load_model_source(example_repository, "mlp")
    group = TuningSession(ModelGroup((mlp, dataclasses.replace(mlp, name="other"))))
    linked = set(group._linked_directories())
    assert precision_cache_dir().resolve() in linked
    assert set(TuningSession(mlp)._linked_directories()) <= linked
