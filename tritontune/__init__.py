"""tritontune: find the Triton model config with the highest throughput under a latency SLO."""

__version__ = "0.1.0"
