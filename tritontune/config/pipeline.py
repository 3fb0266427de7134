"""Pipelines: Triton ensembles read from a repository and checked as Triton would check them.

An ensemble (``platform: "ensemble"``, part of Triton's core rather than a backend) runs no code
of its own: its ``ensemble_scheduling`` steps route named *ensemble tensors* between composing
models. Tuning one means tuning those models, so tritontune first needs the graph: which model
each step runs, which tensors it reads and writes, and an order in which the steps can run.

Triton validates the graph only when it loads the ensemble, after every composing model has
loaded, and then reports the first problem in terms of its internal graph. :func:`load_pipeline`
runs the same checks up front, without a server, and names the file, the field, the model and the
tensor: each failure is one :class:`~tritontune.errors.ConfigError` line. The rules follow
Triton's core (``model_config_utils.cc``: the data flow; ``ensemble_utils.cc``: the tensor
mappings, data types, shapes and decoupled streams); where Triton is lenient or checks only at
run time (a shape with a variable dimension), so is this module.

Steps are numbered as Triton numbers them in its own messages: ``step[0]`` is the first step of
``ensemble_scheduling``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tritonclient.grpc import model_config_pb2

from tritontune.config.model_config import (
    ModelConfig,
    backend_of,
    config_to_text,
    parse_config_text,
    read_config,
)
from tritontune.config.repository import (
    ONNX_BACKEND,
    PYTHON_BACKEND,
    ModelSource,
    load_model_source,
)
from tritontune.config.variant import PIPELINE_KNOBS, Variant, describe_config
from tritontune.errors import ConfigError, InputError

ENSEMBLE_PLATFORM = "ensemble"
LATEST_VERSION = -1
"""A step's ``model_version`` for "the newest version Triton loaded" (proto: ``-1``)."""

_WILDCARD = -1


def is_pipeline(config: ModelConfig) -> bool:
    """True when ``config`` is a Triton ensemble (its platform, not its backend, says so)."""
    return bool(config.platform == ENSEMBLE_PLATFORM)


@dataclass(frozen=True)
class PipelineVariant(Variant):
    """A pipeline's config: one :class:`Variant` per composing model.

    An ensemble has no knobs of its own (no instances, no batcher: Triton refuses them on it),
    so the knobs this class inherits stay unset; it is a ``Variant`` so that everything that
    loads, measures and compares variants (the search loop, the playoff) takes a pipeline's as
    it is. A composing model it does not name keeps its own config.
    """

    models: tuple[tuple[str, Variant], ...] = ()
    """(composing model, its variant), in the pipeline's order."""

    def of(self, model: str) -> Variant:
        """The variant of composing model ``model`` (its own config when not named)."""
        return dict(self.models).get(model, Variant())

    def to_dict(self) -> dict:
        """The knobs set, per composing model (models left as they are omitted)."""
        return {model: variant.to_dict() for model, variant in self.models if variant.to_dict()}


def per_model(variant: Variant, owner: str, models: Iterable[str]) -> PipelineVariant:
    """``variant`` as one variant per model, for ``owner`` (a pipeline, a group of models) whose
    knobs are its models': a plain, empty ``Variant`` is every model's own config (the
    baseline); a plain variant that sets knobs is refused (which model would they be for?)."""
    if isinstance(variant, PipelineVariant):
        return variant
    if variant != Variant():
        raise ConfigError(f"{owner}: its knobs are its models' ({', '.join(models)}), set per model")
    return PipelineVariant()


@dataclass(frozen=True)
class PipelineStep:
    """One step of an ensemble: a composing model and how its tensors map to the ensemble's."""

    index: int
    """The step's position in ``ensemble_scheduling.step`` (0-based, as in Triton's messages);
    :attr:`Pipeline.steps` are in dependency order, so this is how a message finds the step."""
    model: str
    version: int
    """``model_version`` as written: -1 (:data:`LATEST_VERSION`) for the newest loaded version."""
    input_map: dict[str, str]
    """Model input name -> the ensemble tensor it reads (sorted by the input's name)."""
    output_map: dict[str, str]
    """Model output name -> the ensemble tensor it writes (sorted by the output's name)."""

    @property
    def reads(self) -> tuple[str, ...]:
        """The ensemble tensors this step reads (each once, in the input map's order)."""
        return tuple(dict.fromkeys(self.input_map.values()))

    @property
    def writes(self) -> tuple[str, ...]:
        """The ensemble tensors this step writes."""
        return tuple(self.output_map.values())

    @property
    def ref(self) -> str:
        """The step as Triton's messages number it: ``step[1]``."""
        return f"step[{self.index}]"

    @property
    def label(self) -> str:
        """How messages name the step: ``step[1] (model 'encoder')``."""
        return f"{self.ref} (model {self.model!r})"


@dataclass(frozen=True)
class Pipeline:
    """Models served together behind one entry model that clients call.

    Two kinds: an **ensemble** (its steps route tensors between composing models; it has no
    knobs of its own), built by :func:`load_pipeline`, so it always describes a graph Triton
    would accept (as far as its configs tell; see the module's docstring); and a **BLS model**
    (Business Logic Scripting: a Python model whose code calls the composing models), built by
    :func:`load_bls_pipeline`: no steps, and knobs of its own (its instances, its batcher).
    """

    entry: ModelSource
    """The model clients call: the ensemble, or the BLS model (its directory, version, config)."""
    steps: tuple[PipelineStep, ...]
    """An ensemble's steps in dependency order: a step comes after every step that writes a
    tensor it reads (of the steps that could go next, the one written first in the config
    does). Empty for a BLS model (its calls are in its code)."""
    models: tuple[ModelSource, ...]
    """The composing models, one per model and version, in the order their first step runs
    (a BLS model's: as named); a pinned ``model_version`` is the source's
    :attr:`~ModelSource.version`."""
    bls: bool = False
    """The entry is a BLS model: tuned with its composing models (:attr:`tuned_models`)."""

    @property
    def ensemble(self) -> ModelSource:
        """An ensemble pipeline's ensemble (its :attr:`entry`)."""
        return self.entry

    @property
    def name(self) -> str:
        return self.entry.name

    @property
    def config(self) -> ModelConfig:
        return self.entry.base_config

    @property
    def tuned_models(self) -> tuple[str, ...]:
        """Every model whose config is searched: a BLS model and then its composing models; an
        ensemble's composing models (the ensemble has no knobs)."""
        return ((self.name,) if self.bls else ()) + self.composing_models

    def source(self, model: str) -> ModelSource:
        """The source of a tuned model (the entry, or a composing model)."""
        return next(s for s in (self.entry, *self.models) if s.name == model)

    @property
    def inputs(self) -> tuple[str, ...]:
        """The ensemble's input tensors, as its config declares them."""
        return tuple(tensor.name for tensor in self.config.input)

    @property
    def outputs(self) -> tuple[str, ...]:
        """The ensemble's output tensors, as its config declares them."""
        return tuple(tensor.name for tensor in self.config.output)

    @property
    def composing_models(self) -> tuple[str, ...]:
        """The composing models' names, each once, in dependency order."""
        if not self.steps:
            return tuple(dict.fromkeys(source.name for source in self.models))
        return tuple(dict.fromkeys(step.model for step in self.steps))

    def source_of(self, step: PipelineStep) -> ModelSource:
        """The model source (and version) ``step`` runs."""
        sources = [s for s in self.models if s.name == step.model]
        if step.version == LATEST_VERSION:
            # A pinned version is one Triton loads, so the newest loaded is the largest.
            return max(sources, key=lambda s: int(s.version))
        return next(s for s in sources if s.version == str(step.version))

    def producer_of(self, tensor: str) -> PipelineStep | None:
        """The step that writes ``tensor``; None for an ensemble input (the client writes it).

        Raises KeyError when no step and no ensemble input has that name.
        """
        for step in self.steps:
            if tensor in step.writes:
                return step
        if tensor in self.inputs:
            return None
        raise KeyError(tensor)

    def consumers_of(self, tensor: str) -> tuple[PipelineStep, ...]:
        """The steps that read ``tensor``, in dependency order (empty for a tensor only the
        client reads, an ensemble output). Raises KeyError for a tensor the pipeline lacks."""
        self.producer_of(tensor)
        return tuple(step for step in self.steps if tensor in step.reads)


def load_pipeline(repository: Path, name: str) -> Pipeline:
    """Read ensemble ``name`` and its composing models from ``repository`` and validate the graph.

    Nested ensembles (a step whose model is itself an ensemble) are refused, not expanded: tuning
    is per composing model, and an inner ensemble's steps can be written into the outer one.
    Raises :class:`ConfigError` (or, for a model directory that can't be read at all, the
    :class:`~tritontune.errors.InputError` of :func:`load_model_source`) with one line naming the
    file and field; the first problem found is the one reported.
    """
    repository = Path(repository)
    _check_version_directory(repository / name)
    ensemble = load_model_source(repository, name)
    path = ensemble.directory / "config.pbtxt"
    config = ensemble.base_config
    if ensemble.config_derived or not is_pipeline(config):
        found = "a derived ONNX config" if ensemble.config_derived else repr(backend_of(config))
        raise ConfigError(
            f"{path}: platform: model {name!r} is not an ensemble ({found}; an ensemble has "
            f'platform: "{ENSEMBLE_PLATFORM}")'
        )
    _check_ensemble_fields(config, path)

    steps = [_read_step(i, step) for i, step in enumerate(config.ensemble_scheduling.step)]
    sources: dict[int, ModelSource] = {}
    for step in steps:
        sources[step.index] = _composing_source(repository, path, step)
        _check_mapped_names(path, step, sources[step.index].base_config)
        _check_batch_size(path, config, step, sources[step.index].base_config)

    graph = _Graph(path, config, steps, sources)
    order = graph.order()
    graph.check_unused()
    graph.check_agreement()
    graph.check_decoupled(order)

    models: dict[tuple[str, str], ModelSource] = {}
    for step in order:
        source = sources[step.index]
        models.setdefault((source.name, source.version), source)
    return Pipeline(entry=ensemble, steps=tuple(order), models=tuple(models.values()))


def load_bls_pipeline(repository: Path, name: str, composing: Iterable[str]) -> Pipeline:
    """Read BLS model ``name`` and the models its code calls (``composing``: Triton's configs
    do not say which, so the user does) from ``repository``.

    A BLS model is a Python-backend model; each composing model must be in the repository, be
    another model, and be named once. An ensemble is refused here (its steps say what it runs).
    """
    repository = Path(repository)
    entry = load_model_source(repository, name)
    where = f"{entry.directory / 'config.pbtxt'}"
    if is_pipeline(entry.base_config):
        raise InputError(
            f"--composing: {name!r} is an ensemble; its composing models come from its "
            "ensemble_scheduling steps (drop --composing)"
        )
    if entry.backend != PYTHON_BACKEND:
        raise InputError(
            f"{where}: backend: --composing is for a BLS model (a Python-backend model calling "
            f"others); {name!r} uses {entry.backend!r}"
        )
    names = list(composing)
    if not names:
        raise InputError(f"--composing: name the models {name!r} calls")
    models = []
    for model in names:
        if model == name:
            raise InputError(f"--composing {model}: that is the BLS model itself")
        if names.count(model) > 1:
            raise InputError(f"--composing {model}: named twice")
        if Path(model).name != model or not (repository / model).is_dir():
            present = sorted(p.name for p in repository.iterdir() if p.is_dir())
            raise InputError(
                f"--composing {model}: no such model in {repository} (models there: "
                f"{', '.join(present)})"
            )
        source = load_model_source(repository, model)
        if is_pipeline(source.base_config):
            raise InputError(
                f"--composing {model}: an ensemble; name the models it runs instead (tuning is "
                "per model)"
            )
        models.append(source)
    return Pipeline(entry=entry, steps=(), models=tuple(models), bls=True)


def _check_version_directory(directory: Path) -> None:
    """An ensemble has no model file, yet Triton loads it only from a version directory (an
    empty ``1/``): said so here, where the generic message would ask for a model file."""
    config_path = directory / "config.pbtxt"
    if not config_path.is_file():
        return
    if any(p.is_dir() and p.name.isdigit() for p in directory.iterdir()):
        return
    if is_pipeline(read_config(config_path)):
        raise InputError(
            f"{directory}: no version directory; Triton loads an ensemble only from one, even "
            f"empty (create {directory / '1'})"
        )


def _check_ensemble_fields(config: ModelConfig, path: Path) -> None:
    """What Triton refuses on the ensemble itself: it has no instances or backend options."""
    if not config.HasField("ensemble_scheduling") or not config.ensemble_scheduling.step:
        raise ConfigError(
            f"{path}: ensemble_scheduling: ensemble {config.name!r} has no steps "
            "(each step names a model and maps its inputs and outputs)"
        )
    refused = {
        "instance_group": ("instances", bool(config.instance_group)),
        "optimization": ("optimization settings", config.HasField("optimization")),
        "model_warmup": ("warmup", bool(config.model_warmup)),
    }
    for field, (what, present) in refused.items():
        if present:
            raise ConfigError(
                f"{path}: {field}: an ensemble has no {what} of its own (Triton refuses it); "
                "set it on the composing models"
            )


def _read_step(index: int, step: Any) -> PipelineStep:
    return PipelineStep(
        index=index,
        model=step.model_name,
        version=int(step.model_version),
        # Protobuf maps have no order: sorted, so orders and messages are the same every run.
        input_map=dict(sorted(step.input_map.items())),
        output_map=dict(sorted(step.output_map.items())),
    )


def _step_field(step: PipelineStep, field: str) -> str:
    return f"ensemble_scheduling.{step.ref}.{field}"


def _field(path: Path, step: PipelineStep, field: str) -> str:
    """The start of a message about one field of a step: the file, then the field."""
    return f"{path}: {_step_field(step, field)}"


def _composing_source(repository: Path, path: Path, step: PipelineStep) -> ModelSource:
    """The step's model, at the version it runs; refuses what Triton would not find."""
    where = _field(path, step, "model_name")
    if not step.model:
        raise ConfigError(f"{where}: not set (the step must name a model of the repository)")
    for field in ("input_map", "output_map"):
        if not getattr(step, field):
            raise ConfigError(
                f"{_field(path, step, field)}: empty (Triton needs every step to map at least "
                f"one {'input' if field == 'input_map' else 'output'} of model {step.model!r})"
            )
    if Path(step.model).name != step.model or not (repository / step.model).is_dir():
        present = sorted(p.name for p in repository.iterdir() if p.is_dir())
        raise ConfigError(
            f"{where}: model {step.model!r} is not in {repository} (models there: {', '.join(present)})"
        )
    source = load_model_source(repository, step.model)
    if is_pipeline(source.base_config):
        raise ConfigError(
            f"{where}: model {step.model!r} is itself an ensemble; nested ensembles are not "
            "supported (write its steps into this ensemble)"
        )
    loaded = _loaded_versions(source)
    version = loaded[0] if step.version == LATEST_VERSION and loaded else str(step.version)
    if version not in loaded:
        hint = (
            "; an unset model_version is 0: write model_version: -1 for the newest version"
            if step.version == 0
            else ""
        )
        raise ConfigError(
            f"{_field(path, step, 'model_version')}: model {step.model!r} has no version "
            f"{step.version} that Triton loads (its version_policy loads: "
            f"{', '.join(loaded) or 'none'}){hint}"
        )
    if version == source.version:
        return source
    source = dataclasses.replace(source, version=version)
    if source.backend == ONNX_BACKEND and not source.model_file.is_file():
        raise InputError(f"{source.model_file}: model file not found")
    return source


def _loaded_versions(source: ModelSource) -> list[str]:
    """The version directories Triton loads under the model's ``version_policy`` (newest first);
    by default only the newest one."""
    present = sorted(
        (p.name for p in source.directory.iterdir() if p.is_dir() and p.name.isdigit()),
        key=int,
        reverse=True,
    )
    policy = source.base_config.version_policy
    choice = policy.WhichOneof("policy_choice")
    if choice == "all":
        return present
    if choice == "specific":
        wanted = {str(v) for v in policy.specific.versions}
        return [v for v in present if v in wanted]
    count = policy.latest.num_versions if choice == "latest" else 1
    return present[: max(count, 1)]


def _names(tensors: Iterable[Any]) -> str:
    return ", ".join(t.name for t in tensors) or "none"


def _check_mapped_names(path: Path, step: PipelineStep, model: ModelConfig) -> None:
    """Every mapped name is a tensor of the model, and every required input is mapped."""
    for what, mapped, tensors in (
        ("input", step.input_map, model.input),
        ("output", step.output_map, model.output),
    ):
        names = {t.name for t in tensors}
        for key in mapped:
            if key not in names:
                raise ConfigError(
                    f"{_field(path, step, f'{what}_map')}: {key!r} is not an {what} of model "
                    f"{step.model!r} (its {what}s: {_names(tensors)})"
                )
    for tensor in model.input:
        if tensor.name not in step.input_map and not tensor.optional:
            raise ConfigError(
                f"{_field(path, step, 'input_map')}: input {tensor.name!r} of model "
                f"{step.model!r} is not mapped (map it to an ensemble tensor, or mark it "
                "optional in the model's config)"
            )


def _check_batch_size(path: Path, config: ModelConfig, step: PipelineStep, model: ModelConfig) -> None:
    """A batching model under a batching ensemble must take the ensemble's largest batch; a
    model that doesn't batch (max_batch_size 0) is fine if the shapes agree."""
    if model.max_batch_size and model.max_batch_size < config.max_batch_size:
        raise ConfigError(
            f"{path}: max_batch_size: {config.max_batch_size} is above the max_batch_size "
            f"{model.max_batch_size} of model {step.model!r} ({step.ref}); "
            "the ensemble's may be at most its composing models'"
        )


@dataclass(frozen=True)
class _Use:
    """One declaration of an ensemble tensor: where it is written or read, with its type and
    shape as that place declares them."""

    field: str
    """The config field a message about it points at (with the file)."""
    where: str
    data_type: int
    dims: tuple[int, ...]
    batching: bool

    @property
    def type_name(self) -> str:
        return str(model_config_pb2.DataType.Name(self.data_type))

    @property
    def full_dims(self) -> tuple[int, ...]:
        """The shape with the batch dimension a batching model adds implicitly."""
        return ((_WILDCARD,) if self.batching else ()) + self.dims

    def shape_text(self) -> str:
        return "[" + ", ".join(str(d) for d in self.full_dims) + "]"


def _dims_agree(a: tuple[int, ...], b: tuple[int, ...]) -> bool:
    return len(a) == len(b) and all(x == y or _WILDCARD in (x, y) for x, y in zip(a, b, strict=True))


def _ensemble_dims(tensor: Any) -> tuple[int, ...]:
    # Triton reads an ensemble input's or output's shape from its reshape when it has one.
    return tuple(tensor.reshape.shape) if tensor.HasField("reshape") else tuple(tensor.dims)


class _Graph:
    """The ensemble tensors and the steps between them, checked rule by rule."""

    def __init__(
        self,
        path: Path,
        config: ModelConfig,
        steps: list[PipelineStep],
        sources: dict[int, ModelSource],
    ) -> None:
        self.path = path
        self.steps = steps
        self.decoupled = {
            step.index
            for step in steps
            if sources[step.index].base_config.model_transaction_policy.decoupled
        }
        batching = config.max_batch_size > 0
        self.inputs = {t.name: t for t in config.input}
        self.outputs = {t.name: t for t in config.output}
        self.producers: dict[str, tuple[PipelineStep | None, _Use]] = {}
        self.consumers: dict[str, list[_Use]] = {}

        for name, tensor in self.inputs.items():
            use = _Use(
                f"input {name!r}",
                f"ensemble input {name!r}",
                tensor.data_type,
                _ensemble_dims(tensor),
                batching,
            )
            self.producers[name] = (None, use)
        for name, tensor in self.outputs.items():
            use = _Use(
                f"output {name!r}",
                f"ensemble output {name!r}",
                tensor.data_type,
                _ensemble_dims(tensor),
                batching,
            )
            self.consumers.setdefault(name, []).append(use)

        for step in steps:
            model = sources[step.index].base_config
            step_batching = model.max_batch_size > 0
            declared_inputs = {t.name: t for t in model.input}
            declared_outputs = {t.name: t for t in model.output}
            for key, tensor_name in step.output_map.items():
                self._add_producer(step, key, tensor_name)
                decl = declared_outputs[key]
                use = _Use(
                    _step_field(step, "output_map"),
                    f"model {step.model!r} output {key!r} ({step.ref})",
                    decl.data_type,
                    tuple(decl.dims),
                    step_batching,
                )
                self.producers[tensor_name] = (step, use)
            for key, tensor_name in step.input_map.items():
                decl = declared_inputs[key]
                use = _Use(
                    _step_field(step, "input_map"),
                    f"model {step.model!r} input {key!r} ({step.ref})",
                    decl.data_type,
                    tuple(decl.dims),
                    step_batching,
                )
                self.consumers.setdefault(tensor_name, []).append(use)

    def _add_producer(self, step: PipelineStep, key: str, tensor: str) -> None:
        """One producer per tensor: the client (an ensemble input) or one step's output."""
        if tensor not in self.producers:
            return
        earlier, use = self.producers[tensor]
        where = _field(self.path, step, "output_map")
        if earlier is None:
            raise ConfigError(
                f"{where}: tensor {tensor!r} is an ensemble input; model {step.model!r} output "
                f"{key!r} cannot write it too (map the output to a tensor of its own)"
            )
        if earlier is step:
            others = [k for k, v in step.output_map.items() if v == tensor]
            raise ConfigError(
                f"{where}: outputs {', '.join(repr(k) for k in others)} of model {step.model!r} "
                f"both write tensor {tensor!r} (a tensor has one producer)"
            )
        raise ConfigError(
            f"{where}: tensor {tensor!r} is already written by {earlier.label}; a tensor has "
            "one producer (map this output to a tensor of its own)"
        )

    def order(self) -> list[PipelineStep]:
        """The steps in an order they can run in; refuses a tensor nothing writes, and cycles."""
        for step in self.steps:
            for key, tensor in step.input_map.items():
                if tensor not in self.producers:
                    raise ConfigError(
                        f"{_field(self.path, step, 'input_map')}: tensor {tensor!r} (model "
                        f"{step.model!r} input {key!r}) is neither an ensemble input nor written "
                        f"by a step (ensemble inputs: {', '.join(self.inputs) or 'none'})"
                    )
        for name in self.outputs:
            if name not in self.producers:
                raise ConfigError(
                    f"{self.path}: output {name!r}: no step writes this ensemble output (map a "
                    "step's output to it in an output_map)"
                )

        ready = set(self.inputs)
        order: list[PipelineStep] = []
        waiting = list(self.steps)
        while waiting:
            runnable = next((s for s in waiting if set(s.reads) <= ready), None)
            if runnable is None:
                raise ConfigError(self._cycle_message(waiting, ready))
            waiting.remove(runnable)
            order.append(runnable)
            ready.update(runnable.writes)
        return order

    def _cycle_message(self, waiting: list[PipelineStep], ready: set[str]) -> str:
        """Name one cycle among the steps that can never run (each waits on another of them)."""
        trail: list[tuple[PipelineStep, str]] = []  # (a step, the tensor it waits on)
        step = waiting[0]
        while all(step is not s for s, _ in trail):
            tensor = next(t for t in step.reads if t not in ready)
            trail.append((step, tensor))
            producer = self.producers[tensor][0]
            assert producer is not None  # every unready tensor is written by a waiting step
            step = producer
        start = next(i for i, (s, _) in enumerate(trail) if s is step)
        cycle = list(reversed(trail[start:]))  # producer -> consumer
        first = min(range(len(cycle)), key=lambda i: cycle[i - 1][0].index)
        cycle = cycle[first:] + cycle[:first]  # told from the first step of the config
        # Each (s, t) in the reversed trail: s waits on t, written by the entry before it.
        parts = [cycle[-1][0].label]
        for s, t in cycle:
            parts += [repr(t), s.label]
        return (
            f"{self.path}: ensemble_scheduling: the steps form a cycle, so none of them can run: "
            + " -> ".join(parts)
        )

    def check_unused(self) -> None:
        """Triton refuses ensemble tensors nothing reads: an unread input or step output."""
        read = {tensor for step in self.steps for tensor in step.reads}
        for name in self.inputs:
            if name not in read and name not in self.outputs:
                raise ConfigError(
                    f"{self.path}: input {name!r}: no step reads this ensemble input "
                    "(Triton refuses unused ensemble tensors)"
                )
        for step in self.steps:
            for key, tensor in step.output_map.items():
                if tensor not in read and tensor not in self.outputs:
                    raise ConfigError(
                        f"{_field(self.path, step, 'output_map')}: tensor {tensor!r} (model "
                        f"{step.model!r} output {key!r}) is read by no step and is not an "
                        "ensemble output (Triton refuses unused tensors; drop it from output_map)"
                    )

    def check_agreement(self) -> None:
        """Each reader of a tensor agrees with its producer on data type and shape.

        Shapes agree when they have as many dimensions and each pair is equal or -1; as in
        Triton, they are compared once as declared and once with the implicit batch dimension of
        a batching model, so a non-batching model's ``[-1, 16]`` matches a batching ``[16]``.
        """
        for tensor, uses in self.consumers.items():
            _, made = self.producers[tensor]
            for use in uses:
                if use.data_type != made.data_type:
                    raise ConfigError(
                        f"{self.path}: {use.field}: tensor {tensor!r} is {made.type_name} "
                        f"({made.where}) but {use.where} is {use.type_name}"
                    )
                if not _dims_agree(use.dims, made.dims) and not _dims_agree(
                    use.full_dims, made.full_dims
                ):
                    raise ConfigError(
                        f"{self.path}: {use.field}: tensor {tensor!r} has shape "
                        f"{made.shape_text()} ({made.where}) but {use.where} has shape "
                        f"{use.shape_text()}"
                    )

    def check_decoupled(self, order: list[PipelineStep]) -> None:
        """A step's inputs, and the ensemble's outputs, come from one stream of responses.

        A decoupled model may answer one request with any number of responses, each starting a
        new stream through the steps after it. Triton refuses to join two streams: a step (or the
        ensemble's outputs) reading tensors that descend from different decoupled models, or from
        one and from the ensemble's inputs.
        """
        origin = dict.fromkeys(self.inputs, "the ensemble's inputs")
        for step in order:
            source = self._one_origin(
                {tensor: origin[tensor] for tensor in step.reads},
                f"{_field(self.path, step, 'input_map')}: the inputs of model {step.model!r}",
            )
            if step.index in self.decoupled:
                source = f"decoupled model {step.model!r} ({step.ref})"
            origin.update(dict.fromkeys(step.writes, source))
        self._one_origin(
            {tensor: origin[tensor] for tensor in self.outputs},
            f"{self.path}: output: the ensemble's outputs",
        )

    @staticmethod
    def _one_origin(origins: dict[str, str], reader: str) -> str:
        """The one stream ``origins`` (tensor -> stream) come from; refuses two."""
        distinct = list(dict.fromkeys(origins.values()))
        if len(distinct) > 1:
            first = {o: t for t, o in reversed(origins.items())}
            described = " and ".join(f"{first[o]!r} from {o}" for o in distinct[:2])
            raise ConfigError(
                f"{reader} come from different decoupled streams ({described}); "
                "Triton refuses to join them"
            )
        return distinct[0] if distinct else "the ensemble's inputs"


_MODEL_HEADER = "# model: "
"""Starts each model's part of a pipeline's configs kept as one text (a pbtxt comment)."""


def describe_configs(configs: Mapping[str, ModelConfig]) -> dict:
    """The tuned knobs of one model's config (:func:`describe_config`), or of a pipeline's
    composing models, each under its name in ``knobs["pipeline"]``."""
    if len(configs) == 1:
        return describe_config(next(iter(configs.values())))
    return {PIPELINE_KNOBS: {model: describe_config(config) for model, config in configs.items()}}


def configs_to_text(configs: Mapping[str, ModelConfig]) -> str:
    """One model's config.pbtxt text, or a pipeline's: each model's after a ``# model: NAME``
    line (read back by :func:`configs_from_text`)."""
    if len(configs) == 1:
        return config_to_text(next(iter(configs.values())))
    return "".join(f"{_MODEL_HEADER}{model}\n{config_to_text(c)}" for model, c in configs.items())


def configs_from_text(text: str, *, source: str) -> dict[str, ModelConfig]:
    """The configs :func:`configs_to_text` wrote, by model name (one model's under its own)."""
    parts: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        if line.startswith(_MODEL_HEADER):
            current = parts.setdefault(line[len(_MODEL_HEADER) :].strip(), [])
        elif current is not None:
            current.append(line)
    if not parts:
        config = parse_config_text(text, source=source)
        return {config.name: config}
    return {
        model: parse_config_text("\n".join(lines), source=f"{source} (model {model!r})")
        for model, lines in parts.items()
    }
