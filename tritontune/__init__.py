"""tritontune: find the Triton model config with the highest throughput under a latency SLO."""

from importlib.metadata import PackageNotFoundError, version

try:
    # pyproject.toml's version, as installed (a wheel, or `pip install -e .`): one place to bump.
    __version__ = version("tritontune")
except PackageNotFoundError:  # pragma: no cover - a source tree imported without installing it
    __version__ = "0+unknown"
