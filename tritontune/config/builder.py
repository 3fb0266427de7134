"""From a variant to the config a server would load: validated, with no server.

What a trial loads is decided here, the way Triton would decide it: the variant applied to the
model's own config, checked against what the target server can do, against the ONNX graph's
inputs and outputs, and against the batch size each request carries. Needing no server, it is
unit-tested directly and lets a search reject a config before loading it.
"""

from __future__ import annotations

from collections.abc import Mapping

from tritontune.config.model_config import ModelConfig
from tritontune.config.onnx_model import onnx_io_problems, onnx_io_shapes
from tritontune.config.repository import ONNX_BACKEND, ModelSource
from tritontune.config.validate import TargetCapabilities, validate_config
from tritontune.config.variant import Precision, Variant, apply_variant
from tritontune.errors import ConfigError, InputError


class ConfigBuilder:
    """Builds validated configs of one model for one kind of server."""

    def __init__(
        self, source: ModelSource, capabilities: TargetCapabilities, *, batch_size: int = 1
    ) -> None:
        self.source = source
        self.capabilities = capabilities
        self.batch_size = batch_size
        self.precisions: dict[str, str | None] = {}
        """Precision variants that were prepared: None when accepted, else why not."""
        self._onnx_shapes = onnx_io_shapes(source.model_file) if source.backend == ONNX_BACKEND else None

    @property
    def batch_dim_dynamic(self) -> bool:
        """Whether the model file takes any batch size (an ONNX graph with a dynamic first dim)."""
        if self._onnx_shapes is None:
            return False
        return all(shape and shape[0] < 0 for shape in self._onnx_shapes.values())

    def allow_precisions(self, verdicts: Mapping[str, str | None]) -> None:
        """Record which precision variants exist (None: accepted; a text: why it was refused)."""
        self.precisions.update(verdicts)

    def build(self, variant: Variant) -> ModelConfig:
        """The tuned config for ``variant`` (the user's backend), validated for the server."""
        if variant.precision not in (None, Precision.FP32):
            precision = str(variant.precision)
            why = self.precisions.get(precision, "not prepared")
            if why is not None:
                raise ConfigError(f"precision {precision!r} of {self.source.name!r}: {why}")
        config = apply_variant(self.source.base_config, variant)
        validate_config(config, self.capabilities)
        if self._onnx_shapes is not None:
            problems = onnx_io_problems(config, self._onnx_shapes, self.source.model_file.name)
            if problems:
                raise ConfigError(f"config of {self.source.name!r}: " + "; ".join(problems))
        self._check_batch_size(config)
        return config

    def _check_batch_size(self, config: ModelConfig) -> None:
        batch, name = self.batch_size, self.source.name
        if config.max_batch_size == 0 and batch > 1:
            raise InputError(
                f"--batch-size {batch}: model {name!r} has max_batch_size 0 and takes no batch"
            )
        if config.max_batch_size and batch > config.max_batch_size:
            raise InputError(
                f"--batch-size {batch} exceeds max_batch_size {config.max_batch_size} of model {name!r}"
            )
