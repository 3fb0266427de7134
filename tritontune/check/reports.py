"""A check's results for CI: JUnit XML (test reports) and Markdown (job summaries).

In JUnit, each model is a class with one test case per rule (``loads``, ``p99``, ``throughput``,
``errors``), so a CI system shows which rule of which model failed; the figures and the
confidence are in the failure message and the case's output.
"""

from __future__ import annotations

from pathlib import Path

import jinja2
from junitparser import Failure, JUnitXml, TestCase, TestSuite

from tritontune.check.gate import CheckReport, ModelCheck, WorkloadCheck
from tritontune.check.verdict import Criterion


def criterion_text(check: ModelCheck, criterion: Criterion) -> str:
    """``p99 41.2 ms <= 50 ms (3/3 rounds agree, high confidence)``."""
    agree = f"{criterion.agreeing}/{criterion.rounds} rounds agree, {criterion.confidence} confidence"
    if criterion.name == "p99":
        sign = "<=" if criterion.passed else ">"
        figures = f"p99 {criterion.measured * 1e3:.2f} ms {sign} SLO {criterion.limit * 1e3:g} ms"
    elif criterion.name == "throughput":
        recorded = check.record.operating_point.throughput if check.record else 0.0
        change = criterion.measured / recorded - 1 if recorded else 0.0
        sign = ">=" if criterion.passed else "<"
        figures = (
            f"throughput {criterion.measured:,.1f} infer/s {sign} floor {criterion.limit:,.1f} "
            f"({change:+.1%} vs recorded {recorded:,.1f})"
        )
    else:
        sign = "<=" if criterion.passed else ">"
        figures = f"failed requests {criterion.measured:.2%} {sign} {criterion.limit:.0%}"
    return f"{figures} ({agree})"


def workload_text(check: WorkloadCheck, name: str) -> str:
    """``interactive met its objective in 3/3 rounds at 480 req/s (p99 12.1, 13.0, 11.8 ms)``."""
    met = [v[name] for v in check.verdicts]
    p99s = ", ".join(f"{p * 1e3:.1f}" for p in check.class_p99s(name))
    missed = "; ".join(v.reason for v in met if not v.met)
    return (
        f"{name} met its objective in {sum(v.met for v in met)}/{len(met)} rounds at "
        f"{check.rate:,.0f} req/s in all (p99 {p99s} ms)" + (f"; missed: {missed}" if missed else "")
    )


def _loads_case(check: ModelCheck | WorkloadCheck) -> TestCase:
    """The ``loads`` case: the model(s) read, loaded and measured, with the warnings."""
    loads = TestCase("loads", classname=check.name, time=round(check.duration_s, 3))
    if check.problems:
        loads.result = [Failure("; ".join(check.problems))]
    if check.warnings:
        loads.system_out = "\n".join(f"warning: {w}" for w in check.warnings)
    return loads


def write_junit(report: CheckReport, path: Path) -> None:
    suite = TestSuite("tritontune check")
    suite.add_property("repository", str(report.repository))
    suite.add_property("tolerance", f"{report.tolerance:.0%}")
    suite.add_property("triton_version", report.server_version)
    suite.add_property("hardware", report.host.summary())
    for check in report.models:
        suite.add_testcase(_loads_case(check))
        for criterion in check.criteria:
            case = TestCase(criterion.name, classname=check.name)
            text = criterion_text(check, criterion)
            case.system_out = text
            if not criterion.passed:
                case.result = [Failure(f"{check.name}: {text}")]
            suite.add_testcase(case)
    for workload in report.workloads:
        suite.add_testcase(_loads_case(workload))
        for criterion in workload.criteria:
            case = TestCase(f"class {criterion.name}", classname=workload.name)
            case.system_out = workload_text(workload, criterion.name)
            if not criterion.passed:
                case.result = [Failure(f"{workload.name}: {case.system_out}")]
            suite.add_testcase(case)
    xml = JUnitXml()
    xml.add_testsuite(suite)
    xml.write(str(path), pretty=True)


_SUMMARY = jinja2.Environment(autoescape=False, trim_blocks=True, lstrip_blocks=True).from_string(
    """\
## tritontune check: {{ "passed" if report.passed else "FAILED" }}

`{{ report.repository }}` on Triton {{ report.server_version }}, {{ report.host.summary() }};
throughput may fall {{ "%.0f" % (report.tolerance * 100) }} % below its record
(the lowest playoff round, where recorded).

| model | load | p99 (SLO) | throughput (recorded) | verdict | confidence |
|---|---|---|---|---|---|
{% for m in report.models %}
{% set p99 = by_name(m, "p99") %}{% set tput = by_name(m, "throughput") %}
| {{ m.name }} | {{ m.record.load.spec().label() if m.record else "-" }} \
| {{ ("%.2f ms (%g ms)" % (p99.measured * 1e3, m.record.slo_p99_ms)) if p99 else "-" }} \
| {{ ("%.1f (%.1f) %+.1f %%" % (tput.measured, m.record.operating_point.throughput, \
(tput.measured / m.record.operating_point.throughput - 1) * 100)) if tput else "-" }} \
| {{ "pass" if m.passed else "**FAIL**" }} | {{ m.confidence or "-" }} |
{% endfor %}
{% for m in report.models if m.steps %}

**{{ m.name }}** (a pipeline, measured end to end): where a request's time went, per step
(median of {{ m.rounds | length }} rounds)

| step | queue ms | compute ms | avg batch |
|---|---|---|---|
{% for s in m.steps %}
| {{ s.model }} | {{ "%.2f" % (s.queue_s * 1e3) }} | {{ "%.2f" % (s.compute_s * 1e3) }} \
| {{ "%.1f" % s.avg_batch_size }} |
{% endfor %}
{% endfor %}
{% for w in report.workloads %}

**{{ w.name }}** (tuned for a workload, {{ w.serving }}): \
{{ "pass" if w.passed else "**FAIL**" }} at {{ "{:,.0f}".format(w.rate) }} req/s in all
{% for p in w.problems %}
- problem: {{ p }}
{% endfor %}
{% for c in w.criteria %}
- {{ "pass" if c.passed else "**FAIL**" }}: {{ workload_text(w, c.name) }}
{% endfor %}
{% for warning in w.warnings %}
- warning: {{ warning }}
{% endfor %}
{% endfor %}
{% for m in report.models if not m.passed or m.warnings %}

**{{ m.name }}**
{% for p in m.problems %}
- problem: {{ p }}
{% endfor %}
{% for c in m.criteria if not c.passed %}
- failed: {{ text(m, c) }}
{% endfor %}
{% for w in m.warnings %}
- warning: {{ w }}
{% endfor %}
{% endfor %}
"""
)


def _by_name(check: ModelCheck, name: str) -> Criterion | None:
    return next((c for c in check.criteria if c.name == name), None)


def render_summary(report: CheckReport) -> str:
    """The Markdown summary (GitHub's ``$GITHUB_STEP_SUMMARY`` renders it as is)."""
    return _SUMMARY.render(
        report=report, by_name=_by_name, text=criterion_text, workload_text=workload_text
    )
