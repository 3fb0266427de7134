"""Text that comes from a model or a user (model and study names, config parameters) is shown as
text in the reports: it can't close the ``<script>`` holding the report's JSON, add an element, or
run. The pages are parsed back with Python's HTML parser and compared with the same page made from
harmless names."""

from __future__ import annotations

import json
from html.parser import HTMLParser
from pathlib import Path

import optuna

from tests.studies import make_study, read_study
from tritontune.report.data import collect

HOSTILE = "</script><script>alert(1)</script><img src=x onerror=alert(2)><!--"
MARKUP = '"><svg onload=alert(3)>'


class Elements(HTMLParser):
    """The start tags of a page, and the text of each ``<script type="application/json">``."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.json_texts: list[str] = []
        self._in_json = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self._in_json = tag == "script" and ("type", "application/json") in attrs

    def handle_endtag(self, tag: str) -> None:
        self._in_json = False

    def handle_data(self, data: str) -> None:
        if self._in_json:
            self.json_texts.append(data)


def elements(page: str) -> Elements:
    parsed = Elements()
    parsed.feed(page)
    return parsed


def report_page(repository: Path, model: str, study: str, parameter: str) -> tuple[str, dict]:
    from tritontune.report.html import render_report

    data = collect(read_study(make_study(repository, [3000, 6000])))
    data.model, data.study_name = model, study
    for r in data.top:
        r.knobs.setdefault("instance_group", [{"count": 1, "kind": "KIND_CPU"}])
        r.knobs["parameters"] = {"note": parameter}
    return render_report(data, optuna.create_study()), data.to_dict()


def test_hostile_names_stay_text_in_the_search_report(example_repository: Path):
    page, figures = report_page(example_repository, MARKUP, HOSTILE, HOSTILE)
    harmless, _ = report_page(example_repository, "mlp", "study", "x")
    hostile, plain = elements(page), elements(harmless)
    assert hostile.tags == plain.tags  # no element added (no img, svg or script of theirs)
    assert "img" not in hostile.tags and "svg" not in hostile.tags
    assert len(hostile.json_texts) == 1
    assert json.loads(hostile.json_texts[0]) == json.loads(json.dumps(figures))  # intact, as data
    assert HOSTILE not in page and MARKUP not in page


def test_hostile_names_stay_text_in_the_workload_report(tmp_path: Path):
    from tests.search.test_traffic_capacity import TRAFFIC, modelled_server
    from tritontune.report.workload import write_workload_report
    from tritontune.search.traffic_capacity import find_traffic_capacity

    capacity = find_traffic_capacity(modelled_server(1000.0), TRAFFIC, start=70.0)
    hostile = write_workload_report(capacity, tmp_path / "h.html", title=HOSTILE).read_text()
    harmless = write_workload_report(capacity, tmp_path / "p.html", title="mlp").read_text()
    assert elements(hostile).tags == elements(harmless).tags
    assert HOSTILE not in hostile
