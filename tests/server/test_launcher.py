"""What a launcher reads off a started server, without one: the GPU count from its log; how
SIGTERM unwinds."""

import asyncio
import os
import signal
import time

import pytest

from tritontune.server.launcher import _terminate_as_interrupt, cuda_devices_in_log

# Start-up lines of tritonserver 2.51 on a host with two GPUs whose DCGM did not start.
LOG = """\
I1126 14:20:01 pinned_memory_manager.cc:277] "Pinned memory pool is created at '0x7f'"
I1126 14:20:01 cuda_memory_manager.cc:107] "CUDA memory pool is created on device 0 with size 67108864"
I1126 14:20:01 cuda_memory_manager.cc:107] "CUDA memory pool is created on device 1 with size 67108864"
W1126 14:20:01 metrics.cc:811] "DCGM unable to start: DCGM initialization error"
I1126 14:20:03 cuda_memory_manager.cc:107] "CUDA memory pool is created on device 1 with size 67108864"
"""


def test_the_log_counts_each_device_cuda_set_up_once():
    assert cuda_devices_in_log(LOG) == 2


def test_a_cpu_only_log_counts_none():
    assert cuda_devices_in_log('I1126 1 server.cc:677] "CUDA memory pool disabled"\n') == 0


def test_sigterm_in_an_event_loop_interrupts_even_where_a_callback_swallows_exceptions():
    """gRPC runs its callbacks in a wrapper that swallows what they raise: a SIGTERM that raised
    where it landed was lost there, and a measurement ran on (a CI run hung). SIGTERM does what
    Ctrl-C does: inside ``asyncio.run`` the runner cancels the main task."""
    swallowed: list[BaseException] = []

    def swallowing_callback() -> None:
        try:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs here, inside the callback
        except BaseException as exc:  # noqa: BLE001 - what gRPC's wrapper does
            swallowed.append(exc)

    async def measurement() -> None:
        asyncio.get_running_loop().call_soon(swallowing_callback)
        await asyncio.sleep(3)

    before = signal.getsignal(signal.SIGTERM)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:
        _terminate_as_interrupt()
        started = time.monotonic()
        with pytest.raises(KeyboardInterrupt):
            asyncio.run(measurement())
    finally:
        signal.signal(signal.SIGTERM, before)
    assert swallowed == []
    assert time.monotonic() - started < 2.5
