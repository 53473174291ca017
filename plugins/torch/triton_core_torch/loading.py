"""Loading PyTorch model files: TorchScript modules and ``torch.export`` archives, their
signatures, the settings PyTorch keeps per process, and the wrappers that call an export
program without re-running its input checks on every call.

Imported (with torch) only once a PyTorch model is completed or loaded.
"""

from __future__ import annotations

import logging
import threading
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import torch

from triton_core import (
    Status,
    TritonError,
)
from triton_core_torch.settings import TorchSettings
from triton_core_torch.signature import (
    EXPORT,
    OTHER,
    RETURNS_DICT,
    RETURNS_SEQUENCE,
    RETURNS_STRINGS,
    RETURNS_TENSOR,
    RETURNS_UNKNOWN,
    STRINGS,
    TENSOR,
    TORCHSCRIPT,
    Signature,
    TensorSpec,
)

logger = logging.getLogger(__name__)

DEFAULT_MODEL_FILENAME: Final = "model.pt"
EXPORT_MODEL_FILENAME: Final = "model.pt2"

#: config datatype -> torch dtype (TYPE_STRING has none: BYTES travel as List[str])
CONFIG_TO_TORCH: Final[dict[str, torch.dtype]] = {
    "TYPE_BOOL": torch.bool,
    "TYPE_UINT8": torch.uint8,
    "TYPE_UINT16": torch.uint16,
    "TYPE_UINT32": torch.uint32,
    "TYPE_UINT64": torch.uint64,
    "TYPE_INT8": torch.int8,
    "TYPE_INT16": torch.int16,
    "TYPE_INT32": torch.int32,
    "TYPE_INT64": torch.int64,
    "TYPE_FP16": torch.float16,
    "TYPE_FP32": torch.float32,
    "TYPE_FP64": torch.float64,
    "TYPE_BF16": torch.bfloat16,
}
TORCH_TO_CONFIG: Final[dict[torch.dtype, str]] = {v: k for k, v in CONFIG_TO_TORCH.items()}


# -- files ----------------------------------------------------------------------------------------


def resolve_model_file(model_path: Path, model: str) -> Path:
    """``model_path``, or ``model.pt2`` beside it when the default ``model.pt`` is missing."""
    if model_path.is_file():
        return model_path
    if model_path.name == DEFAULT_MODEL_FILENAME:
        exported = model_path.with_name(EXPORT_MODEL_FILENAME)
        if exported.is_file():
            return exported
        raise TritonError(
            Status.UNAVAILABLE,
            f"unable to find '{model_path}' (or '{EXPORT_MODEL_FILENAME}') for model '{model}'",
        )
    raise TritonError(Status.UNAVAILABLE, f"unable to find '{model_path}' for model '{model}'")


def is_exported_program(path: Path) -> bool:
    """True for a ``torch.export.save`` archive: a ``.pt2`` name, or its marker file inside."""
    if path.suffix == ".pt2":
        return True
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.rsplit("/", 1)[-1] == "archive_format" for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load_error(path: Path, model: str, exc: Exception) -> TritonError:
    return TritonError(
        Status.INVALID_ARG, f"PyTorch could not load '{path}' for model '{model}': {exc}"
    )


def load_torchscript(path: Path, model: str, device: torch.device | None) -> Any:
    """``torch.jit.load`` onto ``device`` (None: where the file says), in eval mode."""
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:
        raise load_error(path, model, exc) from exc
    module.eval()
    return module


#: torch.export's (de)serialisation keeps global state ("_CURRENT_DESERIALIZER is already
#: set" when two loads overlap): models loading on parallel load threads take turns.
EXPORT_LOCK: Final = threading.RLock()


def load_exported(path: Path, model: str) -> Any:
    """``torch.export.load``: an ``ExportedProgram``."""
    try:
        with EXPORT_LOCK:
            return torch.export.load(str(path))
    except Exception as exc:
        raise load_error(path, model, exc) from exc


# -- signatures -----------------------------------------------------------------------------------


def _script_spec(name: str, type_: Any) -> TensorSpec:
    kind = type_.kind()
    text = str(type_)
    if kind == "TensorType":
        return TensorSpec(name, TENSOR, "Tensor")
    if kind == "ListType" and type_.getElementType().kind() == "StringType":
        return TensorSpec(name, STRINGS, "List[str]")
    return TensorSpec(name, OTHER, text)


def torchscript_signature(module: Any, model: str) -> Signature:
    """Argument names and kinds of ``forward``, and the shape of what it returns."""
    try:
        schema = module.forward.schema
    except AttributeError as exc:
        raise TritonError(
            Status.INVALID_ARG, f"TorchScript model '{model}' has no forward method"
        ) from exc
    arguments = list(schema.arguments)
    if arguments and arguments[0].type.kind() == "ClassType":
        arguments = arguments[1:]  # self
    inputs = tuple(_script_spec(arg.name, arg.type) for arg in arguments)
    dict_input = len(arguments) == 1 and arguments[0].type.kind() == "DictType"
    if not dict_input:
        for arg in arguments[1:]:
            if arg.type.kind() == "DictType":
                raise TritonError(
                    Status.UNSUPPORTED,
                    f"TorchScript model '{model}': forward takes a Dict argument '{arg.name}' "
                    f"among others; only a single Dict[str, Tensor] argument, or Tensor and "
                    f"List[str] arguments, are supported",
                )
    returned = schema.returns[0].type if schema.returns else None
    returns, outputs = RETURNS_UNKNOWN, None
    if returned is not None:
        kind = returned.kind()
        if kind == "TensorType":
            returns, outputs = RETURNS_TENSOR, (TensorSpec("", TENSOR, "Tensor"),)
        elif kind == "TupleType":
            returns = RETURNS_SEQUENCE
            outputs = tuple(_script_spec("", element) for element in returned.elements())
        elif kind == "ListType":
            element = returned.getElementType().kind()
            returns = RETURNS_STRINGS if element == "StringType" else RETURNS_SEQUENCE
        elif kind == "DictType":
            returns = RETURNS_DICT
    return Signature(
        format=TORCHSCRIPT,
        inputs=inputs,
        dict_input=dict_input,
        returns=returns,
        outputs=outputs,
        returns_name=str(returned) if returned is not None else "",
    )


def _fake_spec(name: str, value: Any) -> TensorSpec:
    """A spec from a graph node's ``meta['val']`` (a FakeTensor with symbolic dims)."""
    if not isinstance(value, torch.Tensor):
        return TensorSpec(name, OTHER, type(value).__name__)
    config_type = TORCH_TO_CONFIG.get(value.dtype, "")
    shape = tuple(d if isinstance(d, int) else -1 for d in value.shape)
    if not config_type:
        return TensorSpec(name, OTHER, f"Tensor[{value.dtype}]", shape=shape)
    return TensorSpec(name, TENSOR, "Tensor", config_type, shape)


def _upper_bound(program: Any, dim: Any) -> int | None:
    """The largest value a symbolic dim may take in ``program``, or None if unbounded."""
    try:
        bound = program.range_constraints[dim.node.expr].upper
        return int(bound) if bound.is_finite else None
    except (AttributeError, KeyError, TypeError, ValueError, OverflowError):
        return None


def exported_signature(program: Any, model: str) -> Signature:
    """Names, datatypes and shapes of a program's user inputs and outputs."""
    from torch.export.graph_signature import InputKind, OutputKind, TensorArgument

    nodes = {node.name: node for node in program.graph.nodes}
    in_spec = program.call_spec.in_spec
    args_spec, kwargs_spec = _children(in_spec) if in_spec is not None else (None, None)
    if (args_spec is not None and any(not c.is_leaf() for c in _children(args_spec))) or (
        kwargs_spec is not None and kwargs_spec.num_children
    ):
        raise TritonError(
            Status.UNSUPPORTED,
            f"torch.export model '{model}': forward takes nested or keyword-only arguments; "
            f"only positional tensor arguments are supported",
        )
    names = _forward_arg_names(program)
    inputs = []
    user_inputs = [s for s in program.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    for i, spec in enumerate(user_inputs):
        name = names[i] if i < len(names) else getattr(spec.arg, "name", f"arg{i}")
        if isinstance(spec.arg, TensorArgument):
            inputs.append(_fake_spec(name, nodes[spec.arg.name].meta.get("val")))
        else:
            inputs.append(TensorSpec(name, OTHER, type(spec.arg).__name__))

    output_node = next(n for n in reversed(program.graph.nodes) if n.op == "output")
    returned = list(output_node.args[0])
    outputs = []
    for spec, node in zip(program.graph_signature.output_specs, returned, strict=True):
        if spec.kind != OutputKind.USER_OUTPUT:
            continue  # buffer mutations and the like
        value = node.meta.get("val") if hasattr(node, "meta") else node
        outputs.append(_fake_spec("", value))
    out_spec = program.call_spec.out_spec
    if out_spec is None or out_spec.is_leaf():
        returns = RETURNS_TENSOR
    elif any(not c.is_leaf() for c in _children(out_spec)):
        raise TritonError(
            Status.UNSUPPORTED,
            f"torch.export model '{model}' returns nested containers; only a tensor, a "
            f"tuple/list of tensors or a dict of tensors is supported",
        )
    elif out_spec.type is dict:
        returns = RETURNS_DICT
        outputs = [
            TensorSpec(str(k), o.kind, o.type_name, o.config_type, o.shape)
            for k, o in zip(out_spec.context, outputs, strict=True)
        ]
    else:
        returns = RETURNS_SEQUENCE

    max_batch = None
    for node_name in (s.arg.name for s in user_inputs if isinstance(s.arg, TensorArgument)):
        value = nodes[node_name].meta.get("val")
        if isinstance(value, torch.Tensor) and value.ndim and not isinstance(value.shape[0], int):
            bound = _upper_bound(program, value.shape[0])
            if bound is not None:
                max_batch = bound if max_batch is None else min(max_batch, bound)
    return Signature(
        format=EXPORT,
        inputs=tuple(inputs),
        returns=returns,
        outputs=tuple(outputs),
        max_batch=max_batch,
    )


def _children(spec: Any) -> list[Any]:
    """A pytree spec's child specs (``children()`` in newer torch, a field before)."""
    children = getattr(spec, "children", None)
    return list(children()) if callable(children) else list(spec.children_specs)


def _forward_arg_names(program: Any) -> list[str]:
    """The original forward's argument names, where the program records them."""
    try:
        names = program.module_call_graph[0].signature.forward_arg_names
        if names:
            return list(names)
    except (AttributeError, IndexError):
        pass
    from torch.export.graph_signature import InputKind

    return [
        getattr(spec.arg, "name", "")
        for spec in program.graph_signature.input_specs
        if spec.kind == InputKind.USER_INPUT
    ]


def read_signature(path: Path, model: str) -> Signature:
    """Load a model file on the CPU just to read its signature (for auto-complete)."""
    if is_exported_program(path):
        with EXPORT_LOCK:
            return exported_signature(load_exported(path, model), model)
    return torchscript_signature(load_torchscript(path, model, torch.device("cpu")), model)


# -- process-wide settings ----------------------------------------------------------------------

_global_lock = threading.Lock()


def apply_process_settings(settings: TorchSettings, model: str, exported: bool) -> None:
    """Apply the settings PyTorch keeps per process (the last model to load one wins)."""
    with _global_lock:
        if settings.inter_op_threads is not None:
            current = torch.get_num_interop_threads()
            if current != settings.inter_op_threads:
                try:
                    torch.set_num_interop_threads(settings.inter_op_threads)
                except RuntimeError:
                    # PyTorch fixes the inter-op pool once it has started (or been set).
                    logger.warning(
                        "model '%s': INTER_OP_THREAD_COUNT %d not applied: the process-wide "
                        "inter-op pool already has %d threads",
                        model,
                        settings.inter_op_threads,
                        current,
                    )
        if settings.deterministic is not None:
            torch.use_deterministic_algorithms(settings.deterministic)
        if settings.cudnn is not None:
            torch.backends.cudnn.enabled = settings.cudnn
        if exported:
            return
        switches = (
            ("ENABLE_TENSOR_FUSER", settings.tensor_fuser, "_jit_set_texpr_fuser_enabled"),
            ("ENABLE_JIT_PROFILING", settings.jit_profiling, "_jit_set_profiling_mode"),
            ("ENABLE_JIT_EXECUTOR", settings.jit_executor, "_jit_set_profiling_executor"),
        )
        for key, value, setter in switches:
            if value is None:
                continue
            function = getattr(torch._C, setter, None)
            if function is None:
                logger.warning(
                    "model '%s': parameter '%s' is not supported by torch %s; ignored",
                    model,
                    key,
                    torch.__version__,
                )
            else:
                function(value)


@dataclass(slots=True)
class Loaded:
    """A model file loaded for one device: what to call and what it looks like."""

    #: ``forward`` of a ScriptModule, or the program's module (which checks input shapes)
    forward: Callable[..., Any]
    signature: Signature
    #: the object that owns the weights (kept alive with the instance)
    owner: Any


# -- export programs -----------------------------------------------------------------------------


def move_program(program: Any, device: torch.device, model: str) -> Any:
    """The program with its weights, buffers, constants and device arguments on ``device``."""
    try:
        from torch.export.passes import move_to_device_pass
    except ImportError:  # older torch: move the module's state afterwards instead
        return _ModuleOnDevice(program, device)
    try:
        return move_to_device_pass(program, device)
    except Exception as exc:
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': could not move the torch.export program to {device}: {exc}",
        ) from exc


class CheckedOnce:
    """Calls a program's module, running its input checks once per distinct input shapes.

    ``program.module()`` checks every call's inputs, in forward pre-hooks and in the guard
    function its generated ``forward`` calls (together about 25 us, more than a small
    model's forward), and passes inputs and outputs through their pytree specs. Serving
    sees few distinct shapes (one per batch size), so a combination of shapes and dtypes
    that passed the checks once goes straight to the program's own graph
    (:func:`lifted_graph`), or to the module's ``forward`` where the program needs more.
    """

    __slots__ = ("_checked", "_forward", "_module")

    #: bound on remembered combinations (a model with free dims sees many)
    LIMIT: Final = 4096

    def __init__(self, module: Any, program: Any = None) -> None:
        self._module = module
        lifted = lifted_graph(program) if program is not None else None
        self._forward = lifted or module.forward
        self._checked: set[tuple[Any, ...]] = set()

    def __call__(self, *args: Any) -> Any:
        key = tuple((arg.shape, arg.dtype) for arg in args)
        if key in self._checked:
            return self._forward(*args)
        result = self._module(*args)  # with the checks: raises on inputs the guards refuse
        if len(self._checked) < self.LIMIT:
            self._checked.add(key)
        return result


def lifted_graph(program: Any) -> Callable[..., Any] | None:
    """``program``'s graph as a function of its user inputs, or None where it needs module().

    An ExportedProgram's graph takes its weights, buffers and constants first and the user
    inputs last, and returns the user outputs flat; ``module()`` wraps the same graph.
    Programs that write buffers or inputs back, thread effect tokens, or take anything but
    positional tensors keep module()'s handling.
    """
    import torch.utils._pytree as pytree
    from torch.export.graph_signature import InputKind, OutputKind

    signature = getattr(program, "graph_signature", None)
    if signature is None:  # not an ExportedProgram (e.g. one moved by _ModuleOnDevice)
        return None
    specs = list(signature.input_specs)
    first_user = len(specs) - sum(spec.kind == InputKind.USER_INPUT for spec in specs)
    if any(spec.kind != InputKind.USER_INPUT for spec in specs[first_user:]):
        return None
    if any(spec.kind != OutputKind.USER_OUTPUT for spec in signature.output_specs):
        return None
    call_spec = program.call_spec
    if call_spec.in_spec != pytree.tree_flatten((tuple(range(len(specs) - first_user)), {}))[1]:
        return None
    state, constants = program.state_dict, program.constants
    leading = []
    for spec in specs[:first_user]:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER) and spec.target in state:
            leading.append(state[spec.target])
        elif spec.kind in (InputKind.BUFFER, InputKind.CONSTANT_TENSOR, InputKind.CUSTOM_OBJ):
            if spec.target not in constants:
                return None
            leading.append(constants[spec.target])
        else:  # effect tokens and kinds this torch adds later
            return None
    graph = program.graph_module.forward
    out_spec = call_spec.out_spec
    if out_spec.is_leaf():

        def single(*args: Any) -> Any:
            return graph(*leading, *args)[0]

        return single

    def structured(*args: Any) -> Any:
        return pytree.tree_unflatten(list(graph(*leading, *args)), out_spec)

    return structured


class _ModuleOnDevice:
    """Stands in for a program whose ``module()`` is moved with ``.to(device)``."""

    def __init__(self, program: Any, device: torch.device) -> None:
        self._program = program
        self._device = device

    def module(self) -> Any:
        return self._program.module().to(self._device)
