from tritontune.server.client import ModelStatsSnapshot, one_line


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
