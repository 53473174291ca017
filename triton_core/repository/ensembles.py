"""Ensembles as the repository sees them: their config checks and their plans.

An ensemble (``platform: "ensemble"``) has no backend and no instances. Its
``ensemble_scheduling`` lists steps; ``input_map`` / ``output_map`` connect a step's tensors
(keys) to ensemble tensors (values). This module decides whether an ensemble can load and
what it runs; :mod:`triton_core.scheduling.ensemble` only runs the plan made here.

What is checked when:

* :func:`validate_ensemble_config` - when the config is read: the ensemble alone (fields set,
  every tensor written once, every input used, every output produced, no step waits on itself).
* :func:`ensemble_load_order` - before ensembles load: ensembles that reach themselves.
* :func:`build_plan` - when a version loads, with the composing models loaded: mapped tensors
  exist, datatypes and shapes agree, batch sizes fit, decoupled steps form a stream (below),
  and a response cache is asked for only where it can work.

Decoupled steps (Triton's rules): each response of a decoupled step starts a *branch* of the
request, a copy of the tensors so far plus that response's outputs, in which the following
steps run; a step may not mix tensors that come from different decoupled steps (or from one
and from before it). An ensemble with a decoupled step is itself decoupled.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from triton_core.backends.contract import BackendModel
from triton_core.errors import TritonError, invalid_arg, unsupported
from triton_core.protos.model_config_pb2 import DataType
from triton_core.types import RequestedOutput

if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

    from triton_core.backends.contract import InstanceSpec, ModelInstance
    from triton_core.protos.model_config_pb2 import ModelConfig, ModelEnsembling

ENSEMBLE_PLATFORM = "ensemble"

#: finds a composing model's complete config: ``lookup(name, version)``; raises TritonError
ConfigLookup = Callable[[str, int], "ModelConfig"]
#: the key a step's model is served under (``--model-namespacing``): ``key_of(name)``
KeyOf = Callable[[str], str]


@dataclass(frozen=True, slots=True)
class EnsembleMembers:
    """How an ensemble being loaded finds its composing models (the manager knows)."""

    config: ConfigLookup
    key_of: KeyOf


def is_ensemble(config: ModelConfig) -> bool:
    """Whether a config describes an ensemble (or wrongly asks for ensemble scheduling)."""
    return config.platform == ENSEMBLE_PLATFORM or config.HasField("ensemble_scheduling")


def step_models(config: ModelConfig) -> dict[str, set[int]]:
    """The models an ensemble's steps call, with the versions they ask for (-1: latest ready)."""
    models: dict[str, set[int]] = {}
    for step in config.ensemble_scheduling.step:
        models.setdefault(step.model_name, set()).add(step.model_version)
    return models


class EnsembleModel(BackendModel):
    """Stands in for the backend model of an ensemble version: it owns no instances."""

    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        raise unsupported(f"an ensemble has no instances (instance '{spec.name}' was asked for)")


# -- checks of the config alone (when it is read) -------------------------------------------------


def validate_ensemble_config(config: ModelConfig) -> None:
    """Reject an ensemble config that cannot work whatever its composing models are.

    Follows Triton's ``ValidateEnsembleSchedulingConfig``; messages name the ensemble, the
    step and the field.
    """
    name = config.name
    if config.platform != ENSEMBLE_PLATFORM:
        raise invalid_arg(
            f"ensemble scheduling cannot be set for model '{name}' whose platform is not "
            f"{ENSEMBLE_PLATFORM}"
        )
    if not config.HasField("ensemble_scheduling"):
        raise invalid_arg(f"ensemble scheduling must be set for ensemble '{name}'")
    for field_name, present in (
        ("instance_group", bool(config.instance_group)),
        ("model_warmup", bool(config.model_warmup)),
        ("optimization", config.HasField("optimization")),
        ("dynamic_batching", config.HasField("dynamic_batching")),
        ("sequence_batching", config.HasField("sequence_batching")),
    ):
        if present:
            raise invalid_arg(f"'{field_name}' should not be specified for ensemble '{name}'")
    if not config.input or not config.output:
        raise invalid_arg(f"ensemble '{name}' must specify 'input' and 'output' in its config")
    steps = config.ensemble_scheduling.step
    if not steps:
        raise invalid_arg(f"must specify 'step' for ensemble '{name}'")
    inputs = {tensor.name for tensor in config.input}
    producers = _check_steps(config, inputs)
    _check_data_flow(config, inputs, producers)


def _check_steps(config: ModelConfig, inputs: set[str]) -> dict[str, int]:
    """Every step's fields are set; returns the step that writes each ensemble tensor."""
    name = config.name
    producers: dict[str, int] = {}
    for index, step in enumerate(config.ensemble_scheduling.step):
        where = f"step {index} of ensemble '{name}'"
        for field_name in ("model_name", "input_map", "output_map"):
            if not getattr(step, field_name):
                raise invalid_arg(f"must specify '{field_name}' in {where}")
        if step.model_version < -1:
            raise invalid_arg(
                f"'model_version' {step.model_version} in {where} must be -1 (latest) or a "
                "version number"
            )
        for output_name, tensor in step.output_map.items():
            if tensor in inputs:
                raise invalid_arg(
                    f"ensemble tensor '{tensor}' is an ensemble input, so output "
                    f"'{output_name}' of model '{step.model_name}' cannot be mapped to it in "
                    f"'output_map' of {where}"
                )
            if tensor in producers:
                raise invalid_arg(
                    f"ensemble tensor '{tensor}' can appear in an 'output_map' only once for "
                    f"ensemble '{name}': steps {producers[tensor]} and {index} both write it"
                )
            producers[tensor] = index
    return producers


def _check_data_flow(config: ModelConfig, inputs: set[str], producers: dict[str, int]) -> None:
    name = config.name
    steps = config.ensemble_scheduling.step
    read = {tensor for step in steps for tensor in step.input_map.values()}
    for ensemble_input in config.input:
        if ensemble_input.name not in read:
            raise invalid_arg(
                f"ensemble input '{ensemble_input.name}' for ensemble '{name}' is not used: "
                "no step's 'input_map' reads it"
            )
    for index, step in enumerate(steps):
        for input_name, tensor in step.input_map.items():
            if tensor not in inputs and tensor not in producers:
                raise invalid_arg(
                    f"in ensemble '{name}', step {index} (model '{step.model_name}') maps input "
                    f"'{input_name}' to ensemble tensor '{tensor}', which is neither an ensemble "
                    "input nor in any step's 'output_map'"
                )
    never = _steps_that_never_run(config, inputs)
    if never:
        models = ", ".join(f"{i} ('{steps[i].model_name}')" for i in never)
        raise invalid_arg(
            f"in ensemble '{name}', step(s) {models} can never run: their 'input_map' and "
            "'output_map' form a cycle"
        )
    outputs = {tensor.name for tensor in config.output}
    for output in config.output:
        if output.name not in producers:
            raise invalid_arg(
                f"ensemble output '{output.name}' for ensemble '{name}' is not written: no "
                "step's 'output_map' maps to it"
            )
    for tensor, index in producers.items():
        if tensor not in read and tensor not in outputs:
            raise invalid_arg(
                f"ensemble tensor '{tensor}' is unused in ensemble '{name}': step {index} "
                f"(model '{steps[index].model_name}') writes it but no step reads it and it "
                "is not an ensemble output"
            )


def _steps_that_never_run(config: ModelConfig, inputs: set[str]) -> list[int]:
    steps = config.ensemble_scheduling.step
    available = set(inputs)
    pending = list(range(len(steps)))
    progress = True
    while pending and progress:
        progress = False
        for index in list(pending):
            if all(tensor in available for tensor in steps[index].input_map.values()):
                available.update(steps[index].output_map.values())
                pending.remove(index)
                progress = True
    return pending


# -- ensembles that use ensembles (before loading) ------------------------------------------------


def ensemble_load_order(
    dependencies: Mapping[str, Iterable[str]],
) -> tuple[list[str], dict[str, TritonError]]:
    """Order ensembles so each loads after the ensembles it uses.

    ``dependencies`` maps every ensemble to the models its steps call (models that are not
    ensembles are ignored here). Returns the load order of the ensembles on no cycle, and an
    error for each ensemble on a cycle ("circular dependency between ensembles").
    """
    order: list[str] = []
    errors: dict[str, TritonError] = {}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in done or name in errors:
            return
        if name in path:
            cycle = [*path[path.index(name) :], name]
            error = invalid_arg(f"circular dependency between ensembles: {' -> '.join(cycle)}")
            for member in cycle:
                errors.setdefault(member, error)
            return
        path.append(name)
        for used in sorted(dependencies[name]):
            if used in dependencies:
                visit(used, path)
        path.pop()
        if name not in errors:
            done.add(name)
            order.append(name)

    for name in sorted(dependencies):
        visit(name, [])
    # an ensemble that uses one on a cycle is left in the order: its load fails on that member
    return order, errors


# -- the plan of a loaded version (checks against the composing models) ---------------------------


@dataclass(frozen=True, slots=True)
class EnsembleStep:
    """One step, resolved at load."""

    index: int
    model_name: str
    #: the key the step's requests name: the model, or its key under --model-namespacing
    model_key: str
    model_version: int
    #: (composing model's input, ensemble tensor) pairs
    inputs: tuple[tuple[str, str], ...]
    #: (composing model's output, ensemble tensor) pairs
    outputs: tuple[tuple[str, str], ...]
    #: how many distinct ensemble tensors the step waits for
    needs: int
    #: the outputs the step asks its model for: only the mapped ones
    requested: tuple[RequestedOutput, ...]
    #: the step's model is decoupled: each of its responses starts a branch of the request
    decoupled: bool = False


@dataclass(frozen=True, slots=True)
class EnsemblePlan:
    """The DAG of a loaded ensemble version, ready to run requests without more checks."""

    steps: tuple[EnsembleStep, ...]
    #: ensemble tensor -> indices of the steps that read it
    consumers: Mapping[str, tuple[int, ...]]
    input_names: tuple[str, ...]
    output_names: tuple[str, ...]
    #: a step is decoupled, so the ensemble is too (it streams its responses)
    decoupled: bool = False


@dataclass(slots=True)
class _TensorSource:
    """Where an ensemble tensor's datatype and shape were first inferred from (for messages)."""

    datatype: int
    dims: tuple[int, ...]
    full_dims: tuple[int, ...]
    origin: str


def _source(origin: str, batching: bool, datatype: int, dims: Sequence[int]) -> _TensorSource:
    dims = tuple(dims)
    return _TensorSource(datatype, dims, ((-1,) if batching else ()) + dims, origin)


def _dims_match(left: Sequence[int], right: Sequence[int]) -> bool:
    return len(left) == len(right) and all(
        a == b or a == -1 or b == -1 for a, b in zip(left, right, strict=True)
    )


def _format_dims(dims: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _check_consistent(ensemble: str, tensor: str, known: _TensorSource, new: _TensorSource) -> None:
    """Triton's ``ValidateTensorConsistency``: same datatype, shapes equal up to -1 (compared
    with and without the batch dimension, so batching and non-batching models can mix)."""
    if known.datatype != new.datatype:
        raise invalid_arg(
            f"in ensemble '{ensemble}', ensemble tensor '{tensor}' has inconsistent "
            f"'data_type': {DataType.Name(known.datatype)} from {known.origin}, but "
            f"{DataType.Name(new.datatype)} from {new.origin}"
        )
    if not _dims_match(known.dims, new.dims) and not _dims_match(known.full_dims, new.full_dims):
        raise invalid_arg(
            f"in ensemble '{ensemble}', ensemble tensor '{tensor}' has inconsistent 'dims': "
            f"{_format_dims(known.full_dims)} from {known.origin}, but "
            f"{_format_dims(new.full_dims)} from {new.origin}"
        )


def build_plan(config: ModelConfig, lookup: ConfigLookup, key_of: KeyOf = str) -> EnsemblePlan:
    """Resolve and check an ensemble's steps against its composing models' configs.

    Called when an ensemble version loads (its composing models are loaded by then). Raises
    :class:`TritonError` naming the ensemble, the step's model and the tensor or field.
    """
    name = config.name
    batching = config.max_batch_size > 0
    tensors: dict[str, _TensorSource] = {}
    for kind, declared in (("input", config.input), ("output", config.output)):
        for tensor_config in declared:
            reshaped = tensor_config.HasField("reshape")
            dims = tensor_config.reshape.shape if reshaped else tensor_config.dims
            where = f"ensemble '{name}' {kind} '{tensor_config.name}'"
            source = _source(where, batching, tensor_config.data_type, dims)
            tensors.setdefault(tensor_config.name, source)
    steps = []
    consumers: dict[str, list[int]] = {}
    for index, step in enumerate(config.ensemble_scheduling.step):
        where = f"in ensemble '{name}', step {index} (model '{step.model_name}')"
        try:
            member = lookup(step.model_name, step.model_version)
        except TritonError as error:
            raise TritonError(
                error.status,
                f"{where} 'model_name' names a model that is not available: {error.message}",
            ) from None
        _check_member(config, index, step.model_name, member)
        _check_mapping(name, index, step, member, tensors)
        decoupled = member.model_transaction_policy.decoupled
        read = tuple(dict.fromkeys(step.input_map.values()))
        for tensor in read:
            consumers.setdefault(tensor, []).append(index)
        outputs = tuple(sorted(step.output_map.items()))
        steps.append(
            EnsembleStep(
                index,
                step.model_name,
                key_of(step.model_name),
                step.model_version,
                tuple(sorted(step.input_map.items())),
                outputs,
                len(read),
                tuple(RequestedOutput(output) for output, _ in outputs),
                decoupled,
            )
        )
    decoupled_ensemble = _check_decoupled_flow(config, steps)
    _check_cache(config, lookup, decoupled_ensemble)
    return EnsemblePlan(
        tuple(steps),
        {tensor: tuple(indices) for tensor, indices in consumers.items()},
        tuple(tensor.name for tensor in config.input),
        tuple(tensor.name for tensor in config.output),
        decoupled_ensemble,
    )


def _check_decoupled_flow(config: ModelConfig, steps: Sequence[EnsembleStep]) -> bool:
    """Triton's decoupled-workflow check: every step (and the ensemble's outputs) reads
    tensors of one origin: the ensemble's inputs or one decoupled step's branch.

    Returns whether any step is decoupled. Steps are visited in data-flow order (the config
    check already made sure that every step can run).
    """
    name = config.name
    origin = dict.fromkeys((tensor.name for tensor in config.input), 0)
    labels = 0
    pending = list(steps)
    while pending:
        ready = [step for step in pending if all(t in origin for _, t in step.inputs)]
        for step in ready:
            pending.remove(step)
            label = _one_origin(name, step.model_name, [origin[t] for _, t in step.inputs])
            if step.decoupled:
                labels += 1
                label = labels
            for _, tensor in step.outputs:
                origin[tensor] = label
    _one_origin(name, name, [origin[tensor.name] for tensor in config.output])
    return labels > 0


def _one_origin(ensemble: str, model: str, labels: list[int]) -> int:
    if len(set(labels)) > 1:
        raise invalid_arg(
            f"in ensemble {ensemble}, step of model '{model}' receives inputs originated from "
            "different decoupled models"
        )
    return labels[0] if labels else 0


def _check_cache(config: ModelConfig, lookup: ConfigLookup, decoupled: bool) -> None:
    """``response_cache`` on an ensemble caches its final response at the top level; Triton
    supports that only where every composing model could be cached too."""
    if not config.response_cache.enable:
        return
    name = config.name
    if decoupled:
        raise invalid_arg(
            f"Response Cache does not currently support model {name} with 'decoupled' "
            "transaction policy. Please disable the response cache."
        )
    for index, step in enumerate(config.ensemble_scheduling.step):
        member = lookup(step.model_name, step.model_version)
        if member.HasField("sequence_batching"):
            raise invalid_arg(
                f"ensemble '{name}' enables 'response_cache', but step {index} (model "
                f"'{step.model_name}') uses 'sequence_batching', whose responses depend on "
                "earlier requests and cannot be cached; disable the ensemble's response cache"
            )


def _check_member(config: ModelConfig, index: int, model: str, member: ModelConfig) -> None:
    name = config.name
    if 0 < member.max_batch_size < config.max_batch_size:
        raise invalid_arg(
            f"ensemble '{name}' allows maximum batch size {config.max_batch_size} "
            f"('max_batch_size'), but it contains model '{model}' (step {index}) which only "
            f"allows maximum batch size to be {member.max_batch_size}"
        )


def _check_mapping(
    name: str,
    index: int,
    step: ModelEnsembling.Step,
    member: ModelConfig,
    tensors: dict[str, _TensorSource],
) -> None:
    """Triton's ``ValidateTensorMapping`` for one step: names exist, types and shapes agree."""
    model = step.model_name
    where = f"in ensemble '{name}', step {index} (model '{model}')"
    batching = member.max_batch_size > 0
    for field_name, declared, mapping in (
        ("input_map", member.input, step.input_map),
        ("output_map", member.output, step.output_map),
    ):
        kind = "input" if field_name == "input_map" else "output"
        by_name = {tensor.name: tensor for tensor in declared}
        for tensor_name in sorted(mapping):
            if tensor_name not in by_name:
                raise invalid_arg(
                    f"{where} '{field_name}' maps {kind} '{tensor_name}', which model '{model}' "
                    f"does not have (its {kind}s: {', '.join(by_name) or 'none'})"
                )
        for tensor_name, ensemble_tensor in sorted(mapping.items()):
            spec = by_name[tensor_name]
            origin = f"model '{model}' {kind} '{tensor_name}' (step {index} '{field_name}')"
            source = _source(origin, batching, spec.data_type, spec.dims)
            known = tensors.get(ensemble_tensor)
            if known is None:
                tensors[ensemble_tensor] = source
            else:
                _check_consistent(name, ensemble_tensor, known, source)
    for spec in member.input:
        if spec.name not in step.input_map and not spec.optional:
            raise invalid_arg(
                f"{where}: input '{spec.name}' of model '{model}' is not mapped to any ensemble "
                "tensor in 'input_map'"
            )


def plan_ensemble(config: ModelConfig, members: EnsembleMembers) -> EnsemblePlan:
    """The plan of an ensemble version that loads, checked against its composing models."""
    plan = build_plan(config, members.config, members.key_of)
    # Triton fills this in for an ensemble: decoupled exactly when a step is, so clients
    # (and the model configuration API) see that it streams
    config.model_transaction_policy.decoupled = plan.decoupled
    return plan
