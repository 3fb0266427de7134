"""What a launcher reads off a started server, without one: the GPU count from its log."""

from tritontune.server.launcher import cuda_devices_in_log

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
