"""Mixed traffic on the real server: priority levels and admission control doing their jobs.

The example model is driven past its capacity by a heavy low-priority class (batch 64 requests,
open loop, more samples per second than one CPU instance computes) while a light interactive
class runs beside it. The assertions compare one config with another under the same load, with
wide margins (a saturated queue's wait is hundreds of milliseconds; an interactive request that
overtakes it waits for one execution), so a busy machine can't flip them. The last test does the
same on the real MiniLM model, where the fix is one endpoint per class.
"""

from dataclasses import replace
from pathlib import Path

import pytest

from tests.conftest import RealModel
from tritontune.config.repository import load_model_source
from tritontune.config.variant import QueuePolicy, Variant
from tritontune.measure.loadgen import QUEUE_FULL_ERROR, QUEUE_TIMEOUT_ERROR
from tritontune.measure.measurement import MeasureSettings
from tritontune.measure.traffic import parse_traffic
from tritontune.serving.session import TuningSession

pytestmark = pytest.mark.integration

FAST = MeasureSettings(warmup_s=1.0, window_s=1.0, stable_windows=3)
#: Total req/s: 40 interactive (batch 1) + 960 batch requests of 64 samples (~61k samples/s,
#: above what one instance of the example model computes on this machine kind).
TOTAL_RATE = 1000.0

TRAFFIC = parse_traffic(
    {
        "classes": [
            {"name": "interactive", "rate": 40, "priority": 1, "slo_p99": "50ms"},
            {
                "name": "batch",
                "rate": 960,
                "batch_size": 64,
                "priority": 2,
                "timeout": "300ms",
                "may_shed": True,
            },
        ]
    },
    where="test workload",
)


@pytest.fixture(scope="module")
def session(example_repository: Path):
    with TuningSession(load_model_source(example_repository, "mlp"), settings=FAST) as s:
        yield s


def test_a_high_priority_class_keeps_its_p99_while_a_low_priority_class_saturates(session):
    base = Variant(max_queue_delay_us=1000, instance_count=1)
    session.load(TRAFFIC.scheduled(base, priorities=False))
    fifo = session.measure_traffic(TRAFFIC, TOTAL_RATE)
    session.load(TRAFFIC.scheduled(base, priorities=True))
    prioritized = session.measure_traffic(TRAFFIC, TOTAL_RATE)
    for _ in range(2):  # a miss is measured again, as the capacity search does (confirm): on a
        # busy machine the server can be starved of CPU for a whole window, priorities or not
        if {v.name: v for v in prioritized.verdicts(TRAFFIC)}["interactive"].met:
            break
        prioritized = session.measure_traffic(TRAFFIC, TOTAL_RATE)

    for measurement in (fifo, prioritized):  # the batch class really saturated the model
        batch = measurement.figures("batch")
        assert batch.errors.get(QUEUE_TIMEOUT_ERROR, 0) > 0, batch.errors
        assert batch.request_rate < 0.9 * batch.offered_rate
    fifo_p99 = fifo.figures("interactive").latency.p99
    prioritized_p99 = prioritized.figures("interactive").latency.p99
    # In one queue, interactive requests wait behind the batch backlog (up to its 300 ms timeout).
    assert fifo_p99 > 0.1, f"interactive p99 without priorities: {fifo_p99 * 1e3:.1f} ms"
    # Served first, they wait for the execution in progress only.
    assert prioritized_p99 < 0.5 * fifo_p99
    assert prioritized.figures("interactive").errors == {}
    verdicts = {v.name: v for v in prioritized.verdicts(TRAFFIC)}
    assert verdicts["interactive"].met, verdicts["interactive"].reason
    assert not {v.name: v for v in fifo.verdicts(TRAFFIC)}["interactive"].met


def test_admission_control_rejects_past_the_bound_instead_of_queueing(session):
    base = Variant(max_queue_delay_us=1000, instance_count=1)
    bounded = Variant(
        max_queue_delay_us=1000,
        instance_count=1,
        priority_levels=2,
        default_priority_level=2,
        priority_queue_policies=((2, QueuePolicy(max_queue_size=4)),),
    )
    no_timeout = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "rate": 40, "priority": 1, "slo_p99": "50ms"},
                {"name": "batch", "rate": 960, "batch_size": 64, "priority": 2, "may_shed": True},
            ]
        },
        where="test workload",
    )
    # Without the bound the backlog grows for the whole span, and the measurement waits for the
    # requests still in flight once it ends: ~25 s here (with priority levels Triton 2.51 forms
    # batches on demand only, and drained that backlog at ~12 req/s). A 5 s client timeout ends
    # that wait; the measured windows' latencies stay under it (p99 ~2.5 s).
    short = replace(FAST, request_timeout_s=5.0)
    session.load(no_timeout.scheduled(base, priorities=True))
    unbounded = session.measure_traffic(no_timeout, TOTAL_RATE, short).figures("batch")
    session.load(bounded)
    admitted = session.measure_traffic(no_timeout, TOTAL_RATE, short).figures("batch")

    assert unbounded.errors.get(QUEUE_FULL_ERROR, 0) == 0
    assert admitted.rejected > 0.1 * admitted.offered_rate * 3  # many refused at the door
    assert admitted.errors.get(QUEUE_TIMEOUT_ERROR, 0) == 0
    assert "Exceeds maximum queue size" in admitted.error_examples[QUEUE_FULL_ERROR]
    # What was admitted waited behind at most 4 queued requests; without the bound the backlog
    # (and the wait) grew for the whole span.
    assert admitted.latency.p99 < 0.5 * unbounded.latency.p99
    assert admitted.latency.p99 < 0.5


def test_two_endpoints_each_serve_their_class_and_the_shared_model_comes_back(session):
    traffic = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "share": 0.3, "slo_p99": "200ms"},
                {"name": "batch", "share": 0.7, "batch_size": 8},
            ]
        },
        where="test workload",
    )
    configs = session.load_endpoints(
        {
            "interactive": Variant(dynamic_batching=False, instance_count=1),
            "batch": Variant(max_queue_delay_us=5000, instance_count=1),
        }
    )
    assert not configs.configs["mlp_interactive"].HasField("dynamic_batching")
    assert session.server.client.is_model_ready(
        "mlp_interactive"
    ) and session.server.client.is_model_ready("mlp_batch")
    assert not session.server.client.is_model_ready("mlp")
    # half-second windows: routing is under test, and a 200 ms p99 leaves the MLP ~40x room;
    # 40 replies of each class, not 100 (at 30 req/s interactive's 100 took 3.3 s a level)
    quick = replace(FAST, warmup_s=0.5, window_s=0.5, min_window_requests=40)
    measured = session.measure_traffic(traffic, 100, quick)
    assert set(measured.server) == {"mlp_interactive", "mlp_batch"}
    # Each endpoint got its class only: one sample per request there, eight here.
    interactive, batch = measured.server["mlp_interactive"], measured.server["mlp_batch"]
    assert interactive.requests > 0 and interactive.avg_batch_size == pytest.approx(1.0)
    assert batch.requests > 0 and batch.avg_batch_size >= 8
    assert measured.meets(traffic), measured.verdicts(traffic)

    session.load(Variant(max_queue_delay_us=1000))
    assert session.server.client.is_model_ready("mlp")
    assert not session.server.client.is_model_ready("mlp_batch")
    shared = session.measure_traffic(traffic, 100, quick)
    assert set(shared.server) == {"mlp"}


def test_on_the_real_model_an_interactive_endpoint_keeps_the_tail_a_shared_model_loses(
    real_model: RealModel,
):
    """Issue 24's stall fix, on the real model: one shared MiniLM (one instance of 2 threads,
    priority levels, the batch level bounded) lets interactive requests wait behind batch-8
    executions, which are never preempted, and behind an instance Triton leaves idle (p99
    181-532 ms here at 8-9 req/s in all); one endpoint per class, one thread each, keeps it at one
    interactive execution (66-74 ms) while the batch class asks for more than its endpoint
    serves. The two are measured under the same load in the same server, and a miss is measured
    once more, as the capacity search does with a level that missed."""
    inputs = str(real_model.inputs)
    traffic = parse_traffic(
        {
            "classes": [
                {"name": "interactive", "rate": 3, "priority": 1, "slo_p99": "100ms",
                 "input_data": inputs},
                {"name": "batch", "rate": 6, "batch_size": 8, "priority": 2, "timeout": "2s",
                 "may_shed": True, "input_data": inputs},
            ]
        },
        where="test workload",
    )  # fmt: skip
    one_thread = {"intra_op_thread_count": "1", "inter_op_thread_count": "1"}
    batching = Variant(max_batch_size=8, max_queue_delay_us=2000, instance_count=1)
    settings = MeasureSettings(
        warmup_s=1.0, window_s=2.0, stable_windows=3, max_windows=4, extra_windows=1,
        min_window_requests=15,
    )  # fmt: skip
    source = load_model_source(real_model.repository, real_model.name)
    with TuningSession(source, settings=settings) as session:
        for _attempt in range(2):
            shared_variant = replace(batching, backend_parameters={"intra_op_thread_count": "2"})
            session.load(traffic.scheduled(shared_variant, priorities=True, admission=16))
            shared = session.measure_traffic(traffic, 9.0).figures("interactive")
            session.load_endpoints(
                {
                    "interactive": replace(batching, backend_parameters=one_thread),
                    "batch": replace(
                        batching,
                        backend_parameters=one_thread,
                        max_queue_size=16,
                        queue_timeout_us=2_000_000,
                        timeout_action="reject",
                    ),
                }  # fmt: skip
            )
            measured = session.measure_traffic(traffic, 9.0)
            interactive, batch = measured.figures("interactive"), measured.figures("batch")
            # A miss of either bound below is measured once more (a CI run saw one interactive
            # request of 19 at 162 ms, the rest at most 119 ms).
            if interactive.latency.p99 < min(0.6 * shared.latency.p99, 0.15):
                break
    # The batch class asked for more than its endpoint served (it sheds 10-40 % here, depending
    # on what else the machine does: the bound is what must hold, not a typical figure).
    assert batch.request_rate < 0.9 * batch.offered_rate, batch
    assert interactive.request_rate > 0.9 * interactive.offered_rate, interactive
    assert interactive.latency.count >= 15 and shared.latency.count >= 15
    assert interactive.latency.p99 < 0.6 * shared.latency.p99, (interactive, shared)
    assert interactive.latency.p99 < 0.15, interactive
