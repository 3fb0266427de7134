"""The load options: which engine sends the load, and how many processes."""

import pytest

from tritontune.errors import InputError
from tritontune.measure.load_settings import LoadSettings, parse_load_settings
from tritontune.measure.loadgen import LoadEngine


def test_the_default_is_one_asyncio_process():
    assert parse_load_settings("asyncio", "1") == LoadSettings() == LoadSettings(LoadEngine.ASYNCIO, 1)
    assert LoadSettings().describe() == "asyncio, 1 load process"


def test_counts_auto_and_perf_analyzer():
    assert parse_load_settings("asyncio", "3").processes == 3
    auto = parse_load_settings("asyncio", "AUTO")
    assert auto.processes is None and auto.describe() == "asyncio, auto load processes"
    pa = parse_load_settings("perf-analyzer", "1")
    assert pa.engine == LoadEngine.PERF_ANALYZER and pa.describe() == "perf_analyzer"


@pytest.mark.parametrize(
    ("load_engine", "processes", "message"),
    [
        ("locust", "1", "--load-engine: 'locust' is not one of asyncio, perf_analyzer"),
        ("asyncio", "0", "--load-processes: expected a count of 1 or more, or auto; got '0'"),
        ("asyncio", "two", "--load-processes: expected a count of 1 or more, or auto; got 'two'"),
        ("perf_analyzer", "2", "perf_analyzer is one process of its own"),
    ],
)
def test_bad_values_say_which_option_and_what_it_expects(load_engine, processes, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_load_settings(load_engine, processes)
