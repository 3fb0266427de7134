"""Two models on one real server, each class of a workload sent to its own (issue 27, item 3).

Two copies of the example MLP under their own names; a class of single requests for one, a class
of batches of 4 for the other (tests/groups.py). A search of two trials with the small budgets of
test_workload_search_integration.py (the ramp starts high and stops at twice that: the MLP serves
thousands of req/s). Triton's statistics of each model, read at the same window edges as the
classes' figures, say which model served which class.
"""

from __future__ import annotations

import html

import pytest

from tests.conftest import GroupStudy
from tritontune.config.variant import PIPELINE_KNOBS
from tritontune.report.workload import write_workload_report

pytestmark = pytest.mark.integration


def test_two_models_on_one_server_each_class_served_by_its_own(group_study: GroupStudy):
    """The search is ``group_study``'s (tests/conftest.py), shared with the export and check of
    tests/check/test_check_group_integration.py."""
    result, budget = group_study.result, group_study.budget
    assert group_study.orphaned_stubs == []

    # every trial tuned both models' configs (the space's, not their own: no batcher, 64)
    assert len(result.trials) == 2 and all(t.error is None for t in result.trials)
    for trial in result.trials:
        knobs = trial.knobs[PIPELINE_KNOBS]
        for model in ("mlp_a", "mlp_b"):
            assert knobs[model]["max_batch_size"] in (8, 16) and knobs[model]["dynamic_batching"]
        instances = sum(g["count"] for m in knobs.values() for g in m["instance_group"])
        assert instances <= budget.limit
        # Triton's statistics of each model, for each level of its capacity
        assert set(trial.capacity.detail["best"]["server"]) == {"mlp_a", "mlp_b"}

    # mlp_b's INT8 variant was built and judged (on synthesized inputs: no class names data)
    # before the trials, and every trial served it
    assert result.precisions["mlp_b/int8_dynamic"].accepted
    assert all(t.knobs[PIPELINE_KNOBS]["mlp_b"]["precision"] == "int8_dynamic" for t in result.trials)

    winner = result.winner
    assert winner is not None and winner.routes == {"chat": "mlp_a", "embed": "mlp_b"}
    assert set(winner.models) == {"mlp_a", "mlp_b"}
    best = result.winner_capacity().best
    assert best is not None and set(best.server) == {"mlp_a", "mlp_b"}
    for name, model in winner.routes.items():
        # the requests Triton counted on a model are the ones its class sent in the same span
        sent = best.figures(name).request_rate * best.span_s
        assert best.server[model].requests == pytest.approx(sent, rel=0.2, abs=5)
    # embed's batches of 4 went to mlp_b, chat's single requests to mlp_a
    assert best.server["mlp_b"].avg_batch_size >= 4
    by_model = result.to_dict()["winner_at_capacity"]["by_model"]
    assert by_model["mlp_a"]["classes"] == ["chat"] and by_model["mlp_b"]["classes"] == ["embed"]


def test_the_report_of_a_groups_winner_shows_each_models_work(group_study: GroupStudy, tmp_path):
    """``search --report`` on a group writes the winner's capacity report as for one model's
    workload (the CLI calls ``write_workload_report`` on ``winner_capacity()``), with a line per
    model: the classes it serves and Triton's statistics of it over the same span."""
    capacity = group_study.result.winner_capacity()
    assert capacity is not None
    page = write_workload_report(capacity, tmp_path / "g.html", title="two models: g").read_text()
    text = html.unescape(page)
    assert "mlp_a (serving chat)" in text and "mlp_b (serving embed)" in text
    assert "Little's law" in text and "plotly" in page
