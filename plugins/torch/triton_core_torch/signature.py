"""What a model file says about its inputs and outputs, and how config tensors bind to them.

Pure Python (no torch import). :mod:`triton_core_torch.loading` reads a
:class:`Signature` from a TorchScript module (argument names and types only) or a
``torch.export`` program (names, datatypes and shapes); this module binds the config's
tensors to it with Triton's PyTorch backend conventions, checks them, and auto-completes
configs of ``torch.export`` programs.

Input naming conventions, tried in this order (as Triton's backend does):

1. forward argument names: every config input is an argument of ``forward``;
2. ``<name>__<index>``: every config input ends in ``__`` and an argument index;
3. config order: the i-th config input is the i-th argument (a warning is logged).

A ``forward`` taking a single ``Dict[str, Tensor]`` gets the inputs as a dict keyed by the
config names. Outputs are bound by name when the model returns a dict, else by
``<name>__<index>``, else by config order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from triton_core import (
    DataType,
    Status,
    TritonError,
    complete_batching,
    config_shape,
    dims_error,
    fill_tensor,
    fill_unset,
    format_shape,
)

if TYPE_CHECKING:
    from triton_core import Backend, ModelConfig

logger = logging.getLogger(__name__)

TORCHSCRIPT: Final = "TorchScript"
EXPORT: Final = "torch.export"

#: kinds of a model input or output
TENSOR: Final = "tensor"
STRINGS: Final = "strings"  # TorchScript List[str]: Triton's BYTES
OTHER: Final = "other"

#: how a model returns its outputs
RETURNS_TENSOR: Final = "tensor"
RETURNS_SEQUENCE: Final = "sequence"  # a tuple or list of tensors (or List[str] in a tuple)
RETURNS_DICT: Final = "dict"
RETURNS_STRINGS: Final = "strings"  # a single List[str]
RETURNS_UNKNOWN: Final = "unknown"  # decided at run time (TorchScript ``Any``)

_STRING_TYPE: Final = "TYPE_STRING"
#: ends the message for a program exported without a variable batch dim
_BATCH_DIM_HINT: Final = "export it with a dynamic batch dim"


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """One model input or output, as much as the file tells about it."""

    #: forward argument name, dict key, or "" for an unnamed positional output
    name: str
    #: :data:`TENSOR`, :data:`STRINGS` or :data:`OTHER`
    kind: str = TENSOR
    #: the type as PyTorch spells it, for messages (``Tensor``, ``List[str]`` ...)
    type_name: str = "Tensor"
    #: ``TYPE_FP32`` ...; "" where the file does not say (TorchScript)
    config_type: str = ""
    #: dims with -1 for dynamic ones; None where the file does not say (TorchScript)
    shape: tuple[int, ...] | None = None

    def describe(self) -> str:
        if self.config_type and self.shape is not None:
            return f"{self.config_type} {format_shape(self.shape)}"
        return self.type_name


@dataclass(frozen=True, slots=True)
class Signature:
    """The inputs and outputs of a loaded model file."""

    #: :data:`TORCHSCRIPT` or :data:`EXPORT`
    format: str
    #: forward's arguments in order (``self`` left out)
    inputs: tuple[TensorSpec, ...]
    #: forward takes a single ``Dict[str, Tensor]`` keyed by input name
    dict_input: bool = False
    #: one of the ``RETURNS_*`` constants
    returns: str = RETURNS_UNKNOWN
    #: the outputs in order (dict outputs: named by key); None where the count is unknown
    outputs: tuple[TensorSpec, ...] | None = None
    #: the return type as PyTorch spells it, for messages
    returns_name: str = ""
    #: largest batch the program accepts (its batch dim's upper bound), None if unbounded
    max_batch: int | None = None

    def forward_text(self) -> str:
        """``forward(x: Tensor, y: Tensor) -> Tensor``, for messages."""
        args = ", ".join(f"{spec.name}: {spec.describe()}" for spec in self.inputs)
        if self.dict_input:
            args = f"{self.inputs[0].name}: Dict[str, Tensor]" if self.inputs else "Dict"
        returns = self.returns_name
        if not returns and self.outputs is not None:
            items = [f"{o.name}: {o.describe()}" if o.name else o.describe() for o in self.outputs]
            returns = items[0] if self.returns == RETURNS_TENSOR else f"({', '.join(items)})"
        return f"forward({args})" + (f" -> {returns}" if returns else "")


@dataclass(frozen=True, slots=True)
class Binding:
    """Where each config tensor goes in, or comes out of, ``forward``."""

    #: "forward argument names", "<name>__<index>", "config order" or "dict"
    convention: str
    #: config input names in forward-argument order (a dict input: its keys)
    arguments: tuple[str, ...]
    #: config output name -> index in the returned tuple/list, or key of the returned dict
    outputs: dict[str, int | str]


def named_index(name: str) -> int | None:
    """The index in a ``<name>__<index>`` name (Triton splits at the first ``__``)."""
    _, sep, rest = name.partition("__")
    return int(rest) if sep and rest.isdigit() else None


# -- binding --------------------------------------------------------------------------------------


def bind_inputs(model: str, names: Sequence[str], signature: Signature) -> tuple[str, list[str]]:
    """The naming convention and the config input names in forward-argument order."""
    if signature.dict_input:
        return "dict", list(names)
    args = [spec.name for spec in signature.inputs]
    forward = signature.forward_text()
    listed = ", ".join(names) or "none"
    if len(names) != len(args):
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to load model '{model}': the config lists {len(names)} input(s) "
            f"({listed}) but the model's {forward} takes {len(args)}",
        )
    if all(name in args for name in names):
        return "forward argument names", sorted(names, key=args.index)
    indices = [named_index(name) for name in names]
    if all(index is not None for index in indices):
        convention = "<name>__<index>"
    else:
        logger.warning(
            "model '%s': config inputs (%s) are neither all forward arguments nor all "
            "<name>__<index>; binding them to %s in config order",
            model,
            listed,
            forward,
        )
        convention = "config order"
        indices = list(range(len(names)))
    ordered: list[str | None] = [None] * len(args)
    for name, index in zip(names, indices, strict=True):
        assert index is not None
        if index >= len(args):
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{model}': config input '{name}' refers to argument "
                f"{index} but the model's {forward} takes {len(args)}",
            )
        if ordered[index] is not None:
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{model}': config inputs '{ordered[index]}' and "
                f"'{name}' both refer to argument {index} ('{args[index]}') of the model's "
                f"{forward}",
            )
        ordered[index] = name
    return convention, [name for name in ordered if name is not None]


def bind_outputs(model: str, names: Sequence[str], signature: Signature) -> dict[str, int | str]:
    """Config output name -> tuple index or dict key of the model's result."""
    forward = signature.forward_text()
    if signature.returns == RETURNS_DICT:
        if signature.outputs is not None:
            keys = [spec.name for spec in signature.outputs]
            for name in names:
                if name not in keys:
                    raise TritonError(
                        Status.INVALID_ARG,
                        f"unable to load model '{model}': the config lists output '{name}' "
                        f"but the model returns a dict with keys {', '.join(keys)} "
                        f"({forward})",
                    )
        return {name: name for name in names}
    indices = [named_index(name) for name in names]
    if not all(index is not None for index in indices):
        indices = list(range(len(names)))
    count = None
    if signature.returns in (RETURNS_TENSOR, RETURNS_STRINGS):
        count = 1
    elif signature.outputs is not None:
        count = len(signature.outputs)
    bound: dict[str, int | str] = {}
    for name, index in zip(names, indices, strict=True):
        assert index is not None
        if count is not None and index >= count:
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{model}': config output '{name}' refers to output "
                f"{index} but the model returns {count} output(s) ({forward})",
            )
        bound[name] = index
    return bound


def bind(config: ModelConfig, signature: Signature, model: str) -> Binding:
    """Bind a config's inputs and outputs to a model signature (raises INVALID_ARG if not)."""
    # batch inputs (batch_input) are model inputs the server fills in
    targets = [name for spec in config.batch_input for name in spec.target_name]
    names = [t.name for t in config.input] + targets
    convention, arguments = bind_inputs(model, names, signature)
    outputs = bind_outputs(model, [t.name for t in config.output], signature)
    return Binding(convention, tuple(arguments), outputs)


# -- checks ---------------------------------------------------------------------------------------


def _check_tensor(
    model: str, kind: str, tensor: Any, spec: TensorSpec, where: str, config: ModelConfig,
    *, complete: bool,
) -> None:  # fmt: skip
    configured = DataType.Name(tensor.data_type)
    strings = configured == _STRING_TYPE
    if spec.kind == OTHER:
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to load model '{model}': {kind} '{tensor.name}' is bound to {where} of "
            f"type {spec.type_name}; the PyTorch backend passes Tensor (and List[str] for "
            f"TYPE_STRING) only",
        )
    if tensor.data_type != 0 and strings != (spec.kind == STRINGS):
        hint = (
            "PyTorch tensors cannot hold strings: make the argument a List[str]"
            if strings
            else "a List[str] takes TYPE_STRING"
        )
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to load model '{model}': {kind} '{tensor.name}' is {configured} in the "
            f"config but {where} is {spec.type_name} in the model ({hint})",
        )
    if spec.kind == STRINGS and complete:
        dims = config_shape(tensor)
        if len(dims) + (1 if config.max_batch_size > 0 else 0) > 1:
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{model}': {kind} '{tensor.name}' is a List[str], which "
                f"is one-dimensional, but the config gives it dims {format_shape(dims)} (with "
                f"batching use dims: [1] and reshape: {{ shape: [] }})",
            )
    mismatch = spec.config_type and configured != spec.config_type
    if mismatch and (complete or tensor.data_type != 0):
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to load model '{model}': {kind} '{tensor.name}' has data_type "
            f"{configured} in the config but {spec.config_type} in the model ({where})",
        )
    if spec.shape is not None and (complete or tensor.dims or tensor.HasField("reshape")):
        error = dims_error(
            model, kind, tensor, spec.shape, config.max_batch_size, hint=_BATCH_DIM_HINT
        )
        if error:
            raise TritonError(Status.INVALID_ARG, error)


def check_config(
    config: ModelConfig, signature: Signature, model: str, *, complete: bool
) -> Binding:
    """Bind the config to the model and check each tensor's kind, datatype and dims.

    ``complete=False`` (auto-complete) lets listed tensors leave ``data_type`` or ``dims``
    unset, to be filled from the model.
    """
    binding = bind(config, signature, model)
    bound = signature.max_batch
    if complete and bound is not None and config.max_batch_size > bound:
        raise TritonError(
            Status.INVALID_ARG,
            f"unable to load model '{model}': max_batch_size {config.max_batch_size} in the "
            f"config exceeds the largest batch the program accepts ({bound}, the upper bound "
            f"of its batch dim)",
        )
    arguments = list(binding.arguments)
    for tensor in config.input:
        if signature.dict_input:
            spec = TensorSpec(tensor.name)
            where = f"key '{tensor.name}' of the Dict[str, Tensor] argument"
        else:
            index = arguments.index(tensor.name)
            spec = signature.inputs[index]
            where = f"forward argument {index} ('{spec.name}')"
        _check_tensor(model, "input", tensor, spec, where, config, complete=complete)
    outputs = signature.outputs
    for tensor in config.output:
        key = binding.outputs[tensor.name]
        spec = None
        if signature.returns == RETURNS_STRINGS:
            spec = TensorSpec("", STRINGS, "List[str]")
        elif isinstance(key, int) and outputs is not None and key < len(outputs):
            spec = outputs[key]
        elif isinstance(key, str) and outputs is not None:
            spec = next((o for o in outputs if o.name == key), None)
        if spec is not None:
            where = f"output {key!r}" if isinstance(key, str) else f"output {key}"
            _check_tensor(model, "output", tensor, spec, where, config, complete=complete)
    return binding


# -- auto-complete (torch.export programs) --------------------------------------------------------


def output_names(signature: Signature) -> list[str]:
    """Config names for a program's outputs: dict keys, else ``OUTPUT__<i>``."""
    assert signature.outputs is not None
    if signature.returns == RETURNS_DICT:
        return [spec.name for spec in signature.outputs]
    return [f"OUTPUT__{i}" for i in range(len(signature.outputs))]


def complete_config(
    config: ModelConfig, signature: Signature, model: str, backend: Backend
) -> None:
    """Fill inputs, outputs, max_batch_size and dynamic batching from a program's signature.

    As for ONNX models: a section is filled only when the config leaves it empty, and
    max_batch_size/dynamic batching are considered only then; listed tensors are checked,
    and their unset ``data_type``/``dims`` are filled in.
    """
    assert signature.outputs is not None
    has_inputs = len(config.input) > 0
    has_outputs = len(config.output) > 0
    if not (has_inputs and has_outputs):
        forward = signature.forward_text()
        complete_batching(
            config,
            model,
            {spec.name: spec for spec in signature.inputs},
            dict(zip(output_names(signature), signature.outputs, strict=True)),
            backend,
            max_batch=signature.max_batch,
            why=f"not every input and output has a dynamic first dim: {forward}",
        )
    max_batch_size = config.max_batch_size
    if not has_inputs:
        for spec in signature.inputs:
            fill_tensor(config.input.add(), spec, max_batch_size)
    if not has_outputs:
        for name, spec in zip(output_names(signature), signature.outputs, strict=True):
            fill_tensor(config.output.add(), spec, max_batch_size, name=name)
    binding = check_config(config, signature, model, complete=False)
    # Listed tensors without a datatype or dims get them from the model.
    arguments = list(binding.arguments)
    for tensor in config.input:
        fill_unset(tensor, signature.inputs[arguments.index(tensor.name)], max_batch_size)
    for tensor in config.output:
        key = binding.outputs[tensor.name]
        if isinstance(key, int):
            spec = signature.outputs[key]
        else:
            spec = next(o for o in signature.outputs if o.name == key)
        fill_unset(tensor, spec, max_batch_size)
