from google.protobuf.json_format import ParseDict
from tritonclient.grpc import service_pb2

from tritontune.server.client import (
    ModelStatsSnapshot,
    one_line,
    snapshot_from_json,
    snapshot_from_statistics,
)


def test_one_line_drops_the_python_traceback():
    message = "load failed: ValueError: bad value\nAt:\n  /x/model.py(32): initialize\n"
    assert one_line(message) == "load failed: ValueError: bad value"
    assert one_line("a  b\n c At: /x.py(1): f") == "a b c"


def test_snapshot_difference():
    later = ModelStatsSnapshot(success_count=10, inference_count=40, execution_count=5, queue_ns=900)
    earlier = ModelStatsSnapshot(success_count=4, inference_count=16, execution_count=2, queue_ns=300)
    delta = later - earlier
    assert (delta.success_count, delta.inference_count, delta.execution_count) == (6, 24, 3)
    assert delta.queue_ns == 600


def test_batch_stats_by_size_are_read_and_differenced():
    def reply(count_1: int, count_4: int) -> dict:
        def duration(count: int, ns: int) -> dict:
            return {"count": count, "ns": ns}

        return {
            "model_stats": [
                {
                    "batch_stats": [
                        {
                            "batch_size": 1,
                            "compute_input": duration(count_1, 10 * count_1),
                            "compute_infer": duration(count_1, 1000 * count_1),
                            "compute_output": duration(count_1, 5 * count_1),
                        },
                        {
                            "batch_size": 4,
                            "compute_input": duration(count_4, 20 * count_4),
                            "compute_infer": duration(count_4, 3000 * count_4),
                            "compute_output": duration(count_4, 0),
                        },
                    ]
                }
            ]
        }

    earlier = snapshot_from_json(reply(3, 2))
    later = snapshot_from_json(reply(3, 7))
    assert [(b.batch_size, b.executions) for b in earlier.batches] == [(1, 3), (4, 2)]
    delta = later - earlier
    # batch 1 ran no more executions in between: it is left out of the difference
    assert [(b.batch_size, b.executions, b.compute_ns) for b in delta.batches] == [(4, 5, 15100)]
    assert delta.batches[0].mean_s == 3020e-9


def test_the_grpc_statistics_read_as_the_http_ones():
    """Two versions of a model, uint64 counters (strings in JSON) and fields left at zero: the
    gRPC reply and the HTTP API's JSON of the same figures give one snapshot."""

    def duration(count: int, ns: int) -> dict:
        return {"count": str(count), "ns": str(ns)}

    version = {
        "inference_count": "12",
        "execution_count": "5",
        "inference_stats": {"success": duration(12, 9000), "queue": duration(12, 700),
                            "compute_infer": duration(5, 4000), "cache_hit": duration(0, 0)},
        "batch_stats": [{"batch_size": "2", "compute_input": duration(3, 30),
                         "compute_infer": duration(3, 3000), "compute_output": duration(3, 3)}],
    }  # fmt: skip
    document = {"model_stats": [version, {**version, "version": "2"}]}
    reply = ParseDict(document, service_pb2.ModelStatisticsResponse())
    snapshot = snapshot_from_statistics(reply)
    assert snapshot == snapshot_from_json(document)
    assert (snapshot.success_count, snapshot.inference_count, snapshot.queue_ns) == (24, 24, 1400)
    assert snapshot.fail_count == 0 and snapshot.compute_output_ns == 0
    assert [(b.batch_size, b.executions, b.compute_ns) for b in snapshot.batches] == [(2, 6, 6066)]
