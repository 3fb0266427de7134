"""The workload file (tritontune.measure.traffic): reading a valid interactive + batch file by
share and by rate, each class's objective, request and bounds, and every mistake refused as one
InputError line naming the file, the class and the field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tritontune.errors import InputError
from tritontune.measure.arrivals import Arrival
from tritontune.measure.loadgen import LoadSpec
from tritontune.measure.request_shape import RequestShape
from tritontune.measure.traffic import (
    ClassObjective,
    ServedFloor,
    Traffic,
    TrafficClass,
    parse_traffic,
    read_traffic,
)

SHARES = """
classes:
  - name: interactive
    share: 3
    batch_size: 1
    priority: 1
    slo_p99: 20ms
  - name: batch
    share: 7
    batch_size: 8
    priority: 2
    timeout: 2s
    completion_p99: 5s
    may_shed: true
"""

RATES = """
classes:
  - name: interactive
    rate: 40/s
    slo_p99: 20ms
  - name: batch
    rate: 2400/min
  - name: bulk
    rate: 20
"""


def write(tmp_path: Path, text: str, name: str = "workload.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def refused(tmp_path: Path, text: str) -> str:
    """The one-line message of the InputError reading ``text`` as a workload file raises."""
    path = write(tmp_path, text)
    with pytest.raises(InputError) as caught:
        read_traffic(path)
    message = str(caught.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


def with_batch(**fields: object) -> str:
    """A valid interactive class, then a class named batch with ``fields`` (YAML text values)."""
    lines = ["classes:", "  - name: interactive", "    share: 1", "    slo_p99: 20ms"]
    lines.append("  - name: batch")
    lines += [f"    {key}: {value}" for key, value in fields.items()]
    return "\n".join(lines) + "\n"


# --- a valid file ----------------------------------------------------------------------------


def test_shares_are_normalized_into_fractions_and_rates(tmp_path):
    traffic = read_traffic(write(tmp_path, SHARES))
    assert [c.name for c in traffic.classes] == ["interactive", "batch"]
    assert traffic.by_rate is False
    assert traffic.fractions() == pytest.approx({"interactive": 0.3, "batch": 0.7})
    assert traffic.rates(200) == pytest.approx({"interactive": 60.0, "batch": 140.0})
    assert traffic.nominal_rate is None


def test_source_is_the_file_read(tmp_path):
    path = write(tmp_path, SHARES)
    assert read_traffic(path).source == path
    assert parse_traffic({"classes": [{"name": "a", "share": 1}]}, where="x").source is None


def test_rates_accept_per_second_per_minute_and_plain_numbers(tmp_path):
    traffic = read_traffic(write(tmp_path, RATES))
    assert traffic.by_rate is True
    assert [c.weight for c in traffic.classes] == pytest.approx([40.0, 40.0, 20.0])
    assert traffic.nominal_rate == pytest.approx(100.0)
    assert traffic.fractions() == pytest.approx({"interactive": 0.4, "batch": 0.4, "bulk": 0.2})
    # scaled together: at twice the file's total, each class at twice its own rate
    assert traffic.rates(200) == pytest.approx({"interactive": 80.0, "batch": 80.0, "bulk": 40.0})


def test_rate_text_may_carry_spaces_and_decimals():
    traffic = parse_traffic(
        {"classes": [{"name": "a", "rate": " 12.5 / s "}, {"name": "b", "rate": "90/min"}]},
        where="w.yaml",
    )
    assert [c.weight for c in traffic.classes] == pytest.approx([12.5, 1.5])


def test_slo_makes_a_class_interactive_and_otherwise_best_effort(tmp_path):
    traffic = read_traffic(write(tmp_path, SHARES))
    interactive, batch = traffic.get("interactive"), traffic.get("batch")
    assert interactive.objective == ClassObjective.LATENCY
    assert interactive.slo_p99_s == pytest.approx(0.020)
    assert interactive.latency_bound_s == pytest.approx(0.020)
    assert batch.objective == ClassObjective.THROUGHPUT
    assert batch.slo_p99_s is None
    assert batch.latency_bound_s == pytest.approx(5.0)


def test_best_effort_without_completion_bound_has_no_latency_bound(tmp_path):
    traffic = read_traffic(write(tmp_path, RATES))
    assert traffic.get("batch").objective == ClassObjective.THROUGHPUT
    assert traffic.get("batch").latency_bound_s is None
    assert traffic.get("batch").may_shed is False


def test_priority_timeout_and_batch_size_make_the_class_request(tmp_path):
    traffic = read_traffic(write(tmp_path, SHARES), dynamic_dim=32, seed=5)
    interactive, batch = traffic.get("interactive"), traffic.get("batch")
    assert isinstance(batch.request, RequestShape)
    assert batch.request.batch_size == 8
    assert batch.request.priority == 2
    assert batch.request.timeout_us == 2_000_000
    assert batch.request.dynamic_dim == 32
    assert batch.may_shed is True
    assert interactive.request.batch_size == 1
    assert interactive.request.priority == 1
    assert interactive.request.timeout_us == 0
    # each class has its own seed, so the classes don't send the same synthetic tensors
    assert interactive.request.seed != batch.request.seed


def test_defaults_batch_one_no_priority_no_timeout():
    traffic = parse_traffic({"classes": [{"name": "only", "share": 1}]}, where="w.yaml")
    request = traffic.get("only").request
    assert (request.batch_size, request.priority, request.timeout_us, request.input_data) == (
        1,
        0,
        0,
        None,
    )
    assert traffic.priority_levels == 0


def test_priority_levels_is_the_highest_level_named(tmp_path):
    assert read_traffic(write(tmp_path, SHARES)).priority_levels == 2


def test_get_unknown_class_raises_key_error(tmp_path):
    with pytest.raises(KeyError):
        read_traffic(write(tmp_path, SHARES)).get("nope")


def test_relative_input_data_is_read_from_the_files_directory(tmp_path, monkeypatch):
    folder = tmp_path / "workloads"
    folder.mkdir()
    (folder / "inputs.json").write_text('{"data": []}', encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)  # not resolved against the working directory
    path = write(folder, "classes:\n  - name: a\n    share: 1\n    input_data: inputs.json\n")
    traffic = read_traffic(path)
    assert traffic.get("a").request.input_data == folder / "inputs.json"


def test_absolute_input_data_is_kept(tmp_path):
    data = tmp_path / "data" / "inputs.json"
    data.parent.mkdir()
    data.write_text("{}", encoding="utf-8")
    path = write(tmp_path / "data", f"classes:\n  - name: a\n    share: 1\n    input_data: {data}\n")
    assert read_traffic(path).get("a").request.input_data == data


def test_missing_input_data_is_refused(tmp_path):
    message = refused(tmp_path, with_batch(share=1, input_data="missing.json"))
    assert "classes[1] (batch)" in message
    assert "input_data" in message
    assert "missing.json" in message


def test_to_dict_keeps_the_files_terms(tmp_path):
    out = read_traffic(write(tmp_path, SHARES)).to_dict()
    interactive, batch = out["classes"]
    assert interactive == {
        "name": "interactive",
        "share": 3.0,
        "batch_size": 1,
        "objective": "latency",
        "may_shed": False,
        "priority": 1,
        "slo_p99_ms": pytest.approx(20.0),
    }
    assert batch == {
        "name": "batch",
        "share": 7.0,
        "batch_size": 8,
        "objective": "throughput",
        "may_shed": True,
        "priority": 2,
        "timeout_us": 2_000_000,
        "completion_p99_ms": pytest.approx(5000.0),
    }


def test_to_dict_by_rate_names_rates(tmp_path):
    out = read_traffic(write(tmp_path, RATES)).to_dict()
    assert [c.get("rate") for c in out["classes"]] == pytest.approx([40.0, 40.0, 20.0])
    assert all("share" not in c for c in out["classes"])


def test_describe_names_each_class_its_objective_and_share(tmp_path):
    text = read_traffic(write(tmp_path, SHARES)).describe()
    assert text == (
        "interactive, batch 1, priority 1, p99 <= 20ms (30%); "
        "batch, batch 8, priority 2, best effort, p99 <= 5s, queue timeout 2s, may be shed (70%)"
    )


def test_describe_a_plain_best_effort_class():
    traffic_class = TrafficClass("bulk", 1.0, RequestShape(batch_size=4))
    assert traffic_class.describe() == "bulk, batch 4, best effort"


def test_traffic_built_directly_fractions():
    traffic = Traffic(
        (TrafficClass("a", 1.0, RequestShape()), TrafficClass("b", 3.0, RequestShape())), by_rate=True
    )
    assert traffic.fractions() == pytest.approx({"a": 0.25, "b": 0.75})
    assert traffic.nominal_rate == pytest.approx(4.0)


# --- mistakes: one line naming the file, the class and the field -----------------------------


def test_unknown_top_level_key(tmp_path):
    message = refused(tmp_path, SHARES + "extra: 1\n")
    assert "'extra'" in message


def test_unknown_class_field(tmp_path):
    message = refused(tmp_path, with_batch(share=1, slo=5))
    assert "classes[1] (batch)" in message
    assert "'slo'" in message


def test_missing_name(tmp_path):
    text = "classes:\n  - name: interactive\n    share: 1\n  - share: 1\n"
    message = refused(tmp_path, text)
    assert "classes[1]" in message
    assert "name" in message


def test_bad_name(tmp_path):
    text = "classes:\n  - name: interactive\n    share: 1\n  - name: two words\n    share: 1\n"
    message = refused(tmp_path, text)
    assert "classes[1]" in message
    assert "name" in message


def test_duplicate_name(tmp_path):
    text = "classes:\n  - name: batch\n    share: 1\n  - name: batch\n    share: 1\n"
    message = refused(tmp_path, text)
    assert "'batch'" in message
    assert "name" in message


def test_both_share_and_rate(tmp_path):
    message = refused(tmp_path, with_batch(share=1, rate="4/s"))
    assert "classes[1] (batch)" in message
    assert "share" in message and "rate" in message


def test_neither_share_nor_rate(tmp_path):
    message = refused(tmp_path, with_batch(batch_size=8))
    assert "classes[1] (batch)" in message
    assert "share" in message and "rate" in message


def test_a_mix_of_share_and_rate_classes(tmp_path):
    message = refused(tmp_path, with_batch(rate="4/s"))
    assert "share" in message and "rate" in message
    assert "mix" in message


@pytest.mark.parametrize("share", ["0", "-1", ".nan", ".inf", '"0.5"', "true"])
def test_share_must_be_a_positive_finite_number(tmp_path, share):
    message = refused(tmp_path, with_batch(share=share))
    assert "classes[1] (batch): share" in message


@pytest.mark.parametrize("rate", ['"40/h"', '"fast/s"', '"0/s"', '"-5/s"', '"inf/s"', "0", "-3"])
def test_bad_rate_text(tmp_path, rate):
    text = f"classes:\n  - name: interactive\n    rate: 1\n  - name: batch\n    rate: {rate}\n"
    message = refused(tmp_path, text)
    assert "classes[1] (batch): rate" in message


def test_slo_without_a_unit(tmp_path):
    message = refused(tmp_path, with_batch(share=1, slo_p99=50))
    assert "classes[1] (batch): slo_p99" in message
    assert "no unit" in message


def test_slo_in_m_is_ambiguous(tmp_path):
    message = refused(tmp_path, with_batch(share=1, slo_p99="50m"))
    assert "classes[1] (batch): slo_p99" in message
    assert "ambiguous" in message


def test_zero_slo_is_refused(tmp_path):
    message = refused(tmp_path, with_batch(share=1, slo_p99="0ms"))
    assert "classes[1] (batch): slo_p99" in message


def test_negative_timeout_is_refused(tmp_path):
    message = refused(tmp_path, with_batch(share=1, timeout="-2s"))
    assert "classes[1] (batch): timeout" in message


def test_both_slo_and_completion_bound(tmp_path):
    message = refused(tmp_path, with_batch(share=1, slo_p99="20ms", completion_p99="5s"))
    assert "classes[1] (batch)" in message
    assert "slo_p99" in message and "completion_p99" in message


@pytest.mark.parametrize("value", ['"yes"', "1"])
def test_may_shed_must_be_a_bool(tmp_path, value):
    message = refused(tmp_path, with_batch(share=1, may_shed=value))
    assert "classes[1] (batch): may_shed" in message


@pytest.mark.parametrize("value", ["0", "2.5", "true"])
def test_batch_size_must_be_a_whole_number_from_one(tmp_path, value):
    message = refused(tmp_path, with_batch(share=1, batch_size=value))
    assert "classes[1] (batch): batch_size" in message


def test_negative_priority(tmp_path):
    message = refused(tmp_path, with_batch(share=1, priority=-1))
    assert "classes[1] (batch): priority" in message


def test_empty_classes_list(tmp_path):
    message = refused(tmp_path, "classes: []\n")
    assert "classes" in message


def test_no_classes_key(tmp_path):
    message = refused(tmp_path, "workload: x\n")
    assert "classes" in message


def test_class_not_a_mapping(tmp_path):
    message = refused(tmp_path, "classes:\n  - name: a\n    share: 1\n  - just text\n")
    assert "classes[1]" in message


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "classes:\n  - name: a\n    share: [1\n")
    with pytest.raises(InputError) as caught:
        read_traffic(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}:")
    assert "not valid YAML" in message


def test_missing_file(tmp_path):
    with pytest.raises(InputError) as caught:
        read_traffic(tmp_path / "absent.yaml")
    assert "absent.yaml" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "floor"),
    [("50%", ServedFloor(share=0.5)), ("100 %", ServedFloor(share=1.0)),
     ("200/s", ServedFloor(infer_per_s=200.0)), ("12000/min", ServedFloor(infer_per_s=200.0))],
)  # fmt: skip
def test_min_served_is_a_share_of_arrivals_or_inferences_per_second(tmp_path, text, floor):
    traffic = read_traffic(write(tmp_path, with_batch(share=1, may_shed="true", min_served=f'"{text}"')))
    batch = traffic.get("batch")
    assert batch.min_served == floor
    assert "min served" in batch.describe()
    # written back as a workload file says it, and read back the same
    again = parse_traffic(traffic.to_file(), where="again")
    assert again.get("batch").min_served == floor
    assert Traffic.from_dict(traffic.to_dict(), where="study").get("batch").min_served == floor


@pytest.mark.parametrize("text", ['"0%"', '"150%"', '"half"', "0.5", '"-3/s"', '"x%"'])
def test_bad_min_served(tmp_path, text):
    message = refused(tmp_path, with_batch(share=1, min_served=text))
    assert "classes[1] (batch): min_served" in message


def test_a_class_may_arrive_in_bursts(tmp_path):
    traffic = read_traffic(write(tmp_path, with_batch(share=1, arrival="gamma", arrival_cv=2)))
    batch = traffic.get("batch")
    assert batch.arrival == Arrival.GAMMA and batch.arrival_cv == 2.0
    assert batch.load(50.0) == LoadSpec.rate(50.0, Arrival.GAMMA, 2.0)
    assert "gamma arrivals (cv 2)" in batch.describe()
    assert traffic.get("interactive").load(5.0) == LoadSpec.rate(5.0)  # Poisson by default
    again = parse_traffic(traffic.to_file(), where="again").get("batch")
    assert (again.arrival, again.arrival_cv) == (Arrival.GAMMA, 2.0)
    stored = Traffic.from_dict(traffic.to_dict(), where="study").get("batch")
    assert (stored.arrival, stored.arrival_cv) == (Arrival.GAMMA, 2.0)


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"arrival": "bursty"}, "arrival: expected one of poisson, constant, gamma"),
     ({"arrival": "gamma"}, "arrival: gamma needs arrival_cv"),
     ({"arrival": "gamma", "arrival_cv": 0}, "arrival_cv: expected a positive number"),
     ({"arrival_cv": 2}, "arrival_cv: only with `arrival: gamma`")],
)  # fmt: skip
def test_bad_arrivals(tmp_path, fields, message):
    assert message in refused(tmp_path, with_batch(share=1, **fields))


# --- replayed traces -------------------------------------------------------------------------

GATEWAY_LOG = """\
time,class
2026-11-24T10:00:00.000Z,interactive
2026-11-24T10:00:00.100Z,batch
2026-11-24T10:00:00.200Z,interactive
2026-11-24T10:00:01.000Z,batch
2026-11-24T10:00:02.000Z,interactive
"""


def traced(tmp_path: Path, **batch_fields: object) -> Traffic:
    """Both classes replayed from one gateway log (interactive: 3 arrivals in 2 s, batch: 2 in
    0.9 s), with ``batch_fields`` added to the batch class."""
    (tmp_path / "gateway.csv").write_text(GATEWAY_LOG, encoding="utf-8")
    lines = ["classes:"]
    for name, fields in (("interactive", {"slo_p99": "20ms"}), ("batch", batch_fields)):
        lines += [f"  - name: {name}", "    arrival: trace", "    trace: gateway.csv"]
        lines += [f"    {key}: {value}" for key, value in fields.items()]
    return read_traffic(write(tmp_path, "\n".join(lines) + "\n"))


def test_a_trace_class_replays_its_own_lines_at_the_traces_rate(tmp_path):
    traffic = traced(tmp_path)
    interactive, batch = traffic.get("interactive"), traffic.get("batch")
    assert interactive.trace is not None and batch.trace is not None
    assert (interactive.trace.arrivals, batch.trace.arrivals) == (3, 2)
    # without a share or rate, each class has its trace's own rate, and the file is by rate
    assert traffic.by_rate
    assert interactive.weight == pytest.approx(2 / 2.0) and batch.weight == pytest.approx(1 / 0.9)
    assert traffic.nominal_rate == pytest.approx(1.0 + 1 / 0.9)
    load = interactive.load(4.0)
    assert load.arrival == Arrival.TRACE and load.trace == interactive.trace
    assert "x4" in load.label()  # 4 req/s plays the 1 req/s trace four times faster
    assert "trace arrivals (gateway.csv: 3 arrivals" in interactive.describe()


def test_a_trace_class_takes_a_share_only_beside_other_shares(tmp_path):
    """A trace class without share or rate counts as one by rate: beside a share, a mix."""
    with pytest.raises(InputError, match="not a mix"):
        traced(tmp_path, share=3)


def test_a_traced_workload_round_trips_through_a_study_and_an_export(tmp_path):
    traffic = traced(tmp_path, rate="5/s")
    assert traffic.get("batch").weight == 5.0
    stored = Traffic.from_dict(traffic.to_dict(), where="study").get("batch")
    assert stored.trace == traffic.get("batch").trace and stored.weight == 5.0
    # an export copies the trace beside its workload file and names the copy
    exported = tmp_path / "export"
    exported.mkdir()
    (exported / "trace.csv").write_text(GATEWAY_LOG, encoding="utf-8")
    file = traffic.to_file(traces={"batch": "trace.csv", "interactive": "trace.csv"})
    assert file["classes"][1]["trace"] == "trace.csv"
    again = parse_traffic(file, where="export", base_dir=exported).get("batch")
    assert again.trace is not None and again.trace.source == exported / "trace.csv"
    assert again.trace.unit_gaps == traffic.get("batch").trace.unit_gaps


@pytest.mark.parametrize(
    ("fields", "message"),
    [({"arrival": "trace"}, "arrival: trace needs `trace:`"),
     ({"trace": "gateway.csv"}, "trace: only with `arrival: trace`"),
     ({"arrival": "trace", "trace": "absent.csv"}, "trace: "),
     ({"arrival": "trace", "trace": "gateway.csv", "arrival_cv": 2}, "arrival_cv: only with")],
)  # fmt: skip
def test_bad_trace_classes(tmp_path, fields, message):
    (tmp_path / "gateway.csv").write_text(GATEWAY_LOG, encoding="utf-8")
    assert message in refused(tmp_path, with_batch(share=1, **fields))


def test_a_trace_with_too_few_arrivals_of_the_class_names_it(tmp_path):
    (tmp_path / "gateway.csv").write_text("1.0,interactive\n2.0,other\n", encoding="utf-8")
    message = refused(tmp_path, with_batch(share=1, arrival="trace", trace="gateway.csv"))
    assert "classes[1] (batch): trace" in message and "0 arrival(s) of class 'batch'" in message
