"""The torch side of the backend: load model files, read their signatures, run them.

Imported by :mod:`triton_core_torch.backend` only when the first PyTorch model is completed
or loaded, so that a server without PyTorch models never imports torch.

Execution follows Triton's PyTorch backend: inputs are wrapped as tensors without a copy
(``torch.from_numpy``), a batch of requests runs as one ``forward`` under
``torch.inference_mode()``, outputs come back as numpy views of the output tensors and are
split per request without a copy.
"""

from __future__ import annotations

import logging
import threading
import warnings
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Final, cast

import numpy as np
import torch

from triton_core import (
    DEVICE_DATATYPES,
    BackendModel,
    BatchPlan,
    DataType,
    DeviceBuffer,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    RaggedBatching,
    Status,
    Tensor,
    TritonError,
    count_instances,
    has_device_tensors,
    output_reshapes,
    request_on_device,
    request_to_host,
    wire_types,
)
from triton_core_torch.settings import TorchSettings, parse_settings
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
    Binding,
    Signature,
    TensorSpec,
    check_config,
)

logger = logging.getLogger(__name__)

DEFAULT_MODEL_FILENAME: Final = "model.pt"
EXPORT_MODEL_FILENAME: Final = "model.pt2"

# The frontends hand the backend read-only numpy views of request bodies. torch.from_numpy
# wraps them without a copy but warns that the tensor is not writable; models read their
# inputs and never write them (Triton's backend wraps request buffers the same way), so this
# one warning is silenced instead of paying for a copy of every input.
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning
)

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

#: how the input checks of a torch.export program's module word their failures
_GUARD_FAILURES: Final = ("Guard failed", "Expected input at")


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


def _load_error(path: Path, model: str, exc: Exception) -> TritonError:
    return TritonError(
        Status.INVALID_ARG, f"PyTorch could not load '{path}' for model '{model}': {exc}"
    )


def load_torchscript(path: Path, model: str, device: torch.device | None) -> Any:
    """``torch.jit.load`` onto ``device`` (None: where the file says), in eval mode."""
    try:
        module = torch.jit.load(str(path), map_location=device)
    except Exception as exc:
        raise _load_error(path, model, exc) from exc
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
        raise _load_error(path, model, exc) from exc


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


# -- the model ------------------------------------------------------------------------------------


@dataclass(slots=True)
class Loaded:
    """A model file loaded for one device: what to call and what it looks like."""

    #: ``forward`` of a ScriptModule, or the program's module (which checks input shapes)
    forward: Callable[..., Any]
    signature: Signature
    #: the object that owns the weights (kept alive with the instance)
    owner: Any


class PyTorchModel(BackendModel):
    """One loaded version of a PyTorch model; everything request-independent is done here."""

    def __init__(self, context: ModelContext, default_cpu_instance_count: int = 1) -> None:
        config = context.config
        self.name = context.name
        self.config = config
        self.model_file = resolve_model_file(context.model_path, self.name)
        self.exported = is_exported_program(self.model_file)
        self.max_batch_size = config.max_batch_size
        self.instance_count = count_instances(config, default_cpu_instance_count)
        self.settings = parse_settings(
            config, self.name, exported=self.exported, instances=self.instance_count
        )
        apply_process_settings(self.settings, self.name, self.exported)

        self.output_datatypes = wire_types(self.name, "output", config.output)
        self.input_datatypes = wire_types(self.name, "input", config.input)
        ragged = RaggedBatching.of(config)
        if ragged is not None:
            self.input_datatypes.update(ragged.target_types)
        self.output_dtypes: dict[str, torch.dtype | None] = {
            t.name: CONFIG_TO_TORCH.get(DataType.Name(t.data_type)) for t in config.output
        }
        self.output_reshapes = output_reshapes(config)
        self.plan = BatchPlan(
            self.name, self.output_datatypes, batching=self.max_batch_size > 0, ragged=ragged
        )
        self.binding: Binding | None = None
        self._shared: dict[str, Loaded] = {}
        self._lock = threading.Lock()
        self._program: Any = None

    def device_for(self, spec: InstanceSpec) -> torch.device | None:
        """``cuda:<id>`` for GPU instances, the CPU for CPU ones, None (as saved) for MODEL."""
        kind = spec.kind.upper()
        if kind == "CPU":
            return torch.device("cpu")
        if kind == "MODEL":
            return None
        if not torch.cuda.is_available():
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{self.name}' instance '{spec.name}' (KIND_GPU, device "
                f"{spec.device_id}): this torch {torch.__version__} "
                + ("is a CPU-only build" if torch.version.cuda is None else "sees no CUDA device")
                + "; install a CUDA build of torch or use KIND_CPU",
            )
        if spec.device_id >= torch.cuda.device_count():
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{self.name}' instance '{spec.name}': GPU "
                f"{spec.device_id} does not exist (torch sees {torch.cuda.device_count()})",
            )
        return torch.device("cuda", spec.device_id)

    def load(self, device: torch.device | None) -> Loaded:
        """Load the file for ``device`` (shared between instances with weight sharing)."""
        key = str(device)
        with self._lock:
            if self.settings.weight_sharing and key in self._shared:
                return self._shared[key]
            loaded = self._load(device)
            if self.settings.weight_sharing:
                self._shared[key] = loaded
            return loaded

    def _load(self, device: torch.device | None) -> Loaded:
        if not self.exported:
            # As Triton's backend: TorchScript weights are loaded as inference tensors.
            with torch.inference_mode(self.settings.inference_mode):
                module = load_torchscript(self.model_file, self.name, device)
            return Loaded(module.forward, torchscript_signature(module, self.name), module)
        with EXPORT_LOCK:
            if self._program is None:
                self._program = load_exported(self.model_file, self.name)
            program = self._program
            signature = exported_signature(program, self.name)
            if device is not None and device.type != "cpu":
                program = _move_program(program, device, self.name)
            try:
                module = program.module()
            except Exception as exc:
                raise _load_error(self.model_file, self.name, exc) from exc
        return Loaded(_CheckedOnce(module, program), signature, module)

    def create_instance(self, spec: InstanceSpec) -> PyTorchInstance:
        """Load the module for the instance's device; the first load is checked."""
        device = self.device_for(spec)
        loaded = self.load(device)
        if self.binding is None:
            self.binding = check_config(self.config, loaded.signature, self.name, complete=True)
            logger.info(
                "model '%s': %s %s, inputs bound by %s",
                self.name,
                loaded.signature.format,
                loaded.signature.forward_text(),
                self.binding.convention,
            )
        return PyTorchInstance(self, loaded, device, spec)

    def finalize(self) -> None:
        """Drop the shared modules and the program."""
        self._shared.clear()
        self._program = None


def _move_program(program: Any, device: torch.device, model: str) -> Any:
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


class _CheckedOnce:
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


# -- the instance ---------------------------------------------------------------------------------


def _from_numpy(array: np.ndarray) -> torch.Tensor:
    """A tensor sharing the array's memory (copying only what torch cannot view)."""
    try:
        return torch.from_numpy(array)
    except (TypeError, ValueError):  # negative strides, non-native byte order
        return torch.from_numpy(np.ascontiguousarray(array, dtype=array.dtype.newbyteorder("=")))


def _input_converter(
    model: str, name: str, wire: str, device: torch.device | None
) -> Callable[[np.ndarray], Any]:
    """numpy array -> what ``forward`` takes for one input, picked once at load."""
    if wire == "BYTES":

        def strings(array: np.ndarray) -> list[str]:
            try:
                return [
                    item.decode("utf-8") if isinstance(item, bytes | bytearray) else str(item)
                    for item in array.ravel().tolist()
                ]
            except UnicodeDecodeError as exc:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"model '{model}': BYTES input '{name}' holds an element that is not UTF-8 "
                    f"({exc.reason}); a TorchScript List[str] takes UTF-8 text only",
                ) from None

        return strings
    if device is None or device.type == "cpu":
        if wire == "BF16":
            return lambda array: _from_numpy(array).view(torch.bfloat16)
        return _from_numpy
    # One host-to-device copy per input per batch (the batch is concatenated on the host).
    if wire == "BF16":
        return lambda array: _from_numpy(array).view(torch.bfloat16).to(device)
    return lambda array: _from_numpy(array).to(device)


def _device_tensor(buffer: DeviceBuffer, device: torch.device | None) -> torch.Tensor:
    """A CUDA tensor over ``buffer``'s bytes, without a copy (its CUDA array interface).

    Torch refuses read-only interfaces; models read their inputs and never write them, as
    with the read-only host views above, so inputs are wrapped as writable too.
    """
    return torch.as_tensor(replace(buffer, readonly=False), device=device)


class ForwardOutputs:
    """Reads the config's outputs out of what ``forward`` returned, as numpy arrays: by
    position or key, checked against the config's datatypes, reshaped, on the host."""

    def __init__(self, model: PyTorchModel, keys: dict[str, int | str], gpu: bool) -> None:
        self._model_name = model.name
        self._output_keys = keys
        self._dtypes = model.output_dtypes
        self._output_reshapes = model.output_reshapes
        self._gpu = gpu
        bytes_outputs = [n for n, d in model.output_datatypes.items() if d == "BYTES"]
        # A model returning a bare List[str] as its only output (Triton allows it).
        self._single_strings = len(model.plan.outputs) == 1 and len(bytes_outputs) == 1

    def read(self, result: Any, names: list[str]) -> list[np.ndarray]:
        """The requested outputs of a forward's result, as numpy arrays."""
        arrays = []
        for name, value in zip(names, self.values(result, names), strict=True):
            array = self._to_numpy(name, value)
            reshape = self._output_reshapes.get(name)
            arrays.append(array if reshape is None else reshape(array))
        return arrays

    def values(self, result: Any, names: list[str]) -> list[Any]:
        """The requested outputs of a forward's result, as it returned them."""
        if isinstance(result, torch.Tensor):
            values: Any = (result,)
        elif isinstance(result, tuple | list):
            strings = self._single_strings and (not result or isinstance(result[0], str))
            values = (result,) if strings else result
        elif isinstance(result, dict):
            values = result
        else:
            raise TritonError(
                Status.INTERNAL,
                f"model '{self._model_name}' returned {type(result).__name__}; expected a "
                f"Tensor, a tuple/list of Tensors, a dict of Tensors or a List[str]",
            )
        picked = []
        for name in names:
            key = self._output_keys[name]
            try:
                picked.append(values[key])
            except (KeyError, IndexError, TypeError):
                raise TritonError(
                    Status.INTERNAL, self._missing_output(name, key, values)
                ) from None
        return picked

    def _missing_output(self, name: str, key: int | str, values: Any) -> str:
        if isinstance(values, dict):
            got = f"a dict with keys {', '.join(map(str, values)) or 'none'}"
            if isinstance(key, int):
                got += " (dict outputs are bound by name: name config outputs after the keys)"
        else:
            got = f"{len(values)} output(s)"
        return (
            f"model '{self._model_name}': config output '{name}' refers to "
            f"{'key' if isinstance(key, str) else 'output'} {key!r} but the model returned {got}"
        )

    def check_dtype(self, name: str, value: torch.Tensor) -> None:
        expected = self._dtypes[name]
        if value.dtype != expected:
            model_type = TORCH_TO_CONFIG.get(value.dtype, str(value.dtype))
            config_type = "TYPE_STRING" if expected is None else TORCH_TO_CONFIG[expected]
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{self._model_name}': configuration expects datatype "
                f"{config_type} for output '{name}', model provides {model_type}",
            )

    def _to_numpy(self, name: str, value: Any) -> np.ndarray:
        if isinstance(value, torch.Tensor):
            self.check_dtype(name, value)
            expected = self._dtypes[name]
            if self._gpu and value.device.type != "cpu":
                value = value.cpu()  # one device-to-host copy per output per batch
            if value.requires_grad:
                value = value.detach()
            if expected is torch.bfloat16:
                # numpy has no bfloat16: the server carries BF16 as uint16 bit patterns.
                return value.view(torch.int16).numpy().view(np.uint16)
            return value.numpy()
        if isinstance(value, list) and self._dtypes[name] is None:
            array = np.empty(len(value), dtype=object)
            array[:] = [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in value]
            return array
        raise TritonError(
            Status.INTERNAL,
            f"model '{self._model_name}': output '{name}' is a {type(value).__name__}; "
            f"expected a Tensor" + (" or a List[str]" if self._dtypes[name] is None else ""),
        )


class PyTorchInstance(ModelInstance):
    """One module on one device; ``execute`` runs a whole batch as one ``forward``."""

    def __init__(
        self,
        model: PyTorchModel,
        loaded: Loaded,
        device: torch.device | None,
        spec: InstanceSpec,
    ) -> None:
        assert model.binding is not None
        binding = model.binding
        self.spec = spec
        self.device = device
        self._loaded: Loaded | None = loaded
        self._forward = loaded.forward
        self._model_name = model.name
        self._settings = model.settings
        self._torchscript = not model.exported
        self._plan = model.plan
        #: the outputs a request asks for (the general path; the single-tensor one knows)
        self._output_names: Callable[[InferenceRequest], list[str]] = model.plan.select
        self._dict_input = loaded.signature.dict_input
        self._arguments = binding.arguments
        self._output_keys = binding.outputs
        self._all_outputs = model.plan.outputs
        self._wire = model.output_datatypes
        self._dtypes = model.output_dtypes
        self._output_reshapes = model.output_reshapes
        self._converters = {
            name: _input_converter(model.name, name, wire, device)
            for name, wire in model.input_datatypes.items()
        }
        self._gpu = device is not None and device.type == "cuda"
        forward_outputs = ForwardOutputs(model, binding.outputs, self._gpu)
        #: the requested outputs of a forward's result, as numpy arrays
        self._outputs = forward_outputs.read
        self._forward_outputs = forward_outputs
        # CUDA shared-memory tensors are wrapped where they are (see _execute_on_device) for
        # tensors that pass straight through: no reshape of outputs, no ragged join
        self.accepts_device_tensors = (
            self._gpu and not model.output_reshapes and model.plan.ragged is None
        )
        self._stream: Any = torch.cuda.Stream(device) if self._gpu else None
        self._grad_mode: Callable[[], Any] = (
            torch.inference_mode if self._settings.inference_mode else torch.no_grad
        )
        self._thread: int | None = None
        #: the worker thread whose grad mode thread_started() set for good (None: per call)
        self._mode_thread: int | None = None
        self._mode_guard: Any = None
        self._single = self._single_tensor_plan(model)

    def _single_tensor_plan(self, model: PyTorchModel) -> tuple[Any, ...] | None:
        """(input, converter, output, wire type, torch dtype) for one-in, one-out CPU models.

        Such a model's batch of one (the common case at low load) takes a shorter path; any
        model, request or result outside it takes the general one.
        """
        if self._gpu or self._dict_input or len(self._arguments) != 1:
            return None
        if len(self._all_outputs) != 1:
            return None
        (input_name,) = self._arguments
        (output,) = self._all_outputs
        wire_in, wire_out = model.input_datatypes[input_name], self._wire[output]
        if "BYTES" in (wire_in, wire_out) or wire_out == "BF16":
            return None
        if self._output_keys[output] != 0 or output in self._output_reshapes:
            return None
        return input_name, self._converters[input_name], output, wire_out, self._dtypes[output]

    def thread_started(self) -> None:
        """On the instance's own worker thread: per-thread state, and the grad mode, once.

        Entering and leaving ``inference_mode`` around every forward costs more than a
        small model's forward itself; on a thread that runs only this instance the mode is
        entered once and stays (its guard lives as long as the instance).
        """
        self._enter_thread()
        if self._settings.inference_mode:
            guard = torch._C._InferenceMode(True)  # what torch.inference_mode() enters
            guard.__enter__()
            self._mode_guard = guard
        else:
            torch._C._set_grad_enabled(False)
        self._mode_thread = threading.get_ident()

    def _enter_thread(self) -> None:
        """Per-thread PyTorch state, set on the worker thread before its first forward.

        The intra-op thread count, the TorchScript executor switch, the current CUDA device
        and stream are all per calling thread in PyTorch, so each instance sets its own.
        """
        self._thread = threading.get_ident()
        # A thread's first parallel call copies the process-wide count into its OpenMP
        # state, overwriting what set_num_threads gave it before: trigger that copy first.
        torch.get_num_threads()
        torch.set_num_threads(self._settings.intra_op_threads)
        if self._torchscript:
            torch._C._set_graph_executor_optimize(self._settings.optimized_execution)
        if self._gpu:
            assert self.device is not None
            torch.cuda.set_device(self.device)
            torch.cuda.set_stream(self._stream)

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """Run the batch as one ``forward`` (models with max_batch_size > 0)."""
        thread = threading.get_ident()
        if self._thread != thread:
            self._enter_thread()
        if self._plan.ragged is not None:  # ragged inputs join, batch outputs scatter
            return self._plan.execute(requests, self._run_outputs)
        if self.accepts_device_tensors and len(requests) == 1 and has_device_tensors(requests[0]):
            return [self._execute_on_device(requests[0])]
        if len(requests) == 1 and self._single is not None and self._mode_thread == thread:
            response = self._execute_single(requests[0], self._single)
            if response is not None:
                return [response]
        try:
            if len(requests) == 1:
                request = requests[0]
                names = self._output_names(request)
                result = self._run({n: t.data for n, t in request.inputs.items()})
                arrays = self._outputs(result, names)
                return [InferenceResponse(outputs=self._plan.tensors(names, arrays))]
            return self._plan.execute(requests, self._run_outputs)
        finally:
            if self._gpu and self._settings.cache_cleaning:
                torch.cuda.empty_cache()

    def _execute_on_device(self, request: InferenceRequest) -> InferenceResponse:
        """One request whose tensors are (partly) in CUDA shared memory: inputs wrapped as
        CUDA tensors without a copy, outputs copied device to device into their regions."""
        if not request_on_device(request, self.spec.device_id):
            request_to_host(request)  # another GPU's memory: through the host, as before
            return self.execute([request])[0]
        names = self._output_names(request)
        converters = {
            name: self._from_device
            for name, tensor in request.inputs.items()
            if isinstance(tensor.data, DeviceBuffer)
        }
        result = self._run({n: t.data for n, t in request.inputs.items()}, converters)
        targets = request.device_outputs or {}
        outputs = []
        for name, value in zip(names, self._forward_outputs.values(result, names), strict=True):
            target = targets.get(name) if self._wire[name] in DEVICE_DATATYPES else None
            if target is None or not isinstance(value, torch.Tensor):
                (data,) = self._outputs(result, [name])
            else:
                data = cast(np.ndarray, self._write_into(name, value, target))
            outputs.append(Tensor(name, self._wire[name], data))
        if self._stream is not None:
            self._stream.synchronize()  # written before the client is told
        return InferenceResponse(outputs=outputs)

    def _from_device(self, buffer: DeviceBuffer) -> torch.Tensor:
        return _device_tensor(buffer, self.device)

    def _write_into(self, name: str, value: torch.Tensor, target: DeviceBuffer) -> DeviceBuffer:
        """Output ``value`` copied into the client's region (``target``), on the device."""
        self._forward_outputs.check_dtype(name, value)
        placed = target.laid_out(name, self._wire[name], tuple(value.shape))
        if placed.size:
            _device_tensor(placed, self.device).copy_(value)
        return placed

    def _execute_single(
        self, request: InferenceRequest, plan: tuple[Any, ...]
    ) -> InferenceResponse | None:
        """A batch of one through a one-in, one-out CPU model, on the instance's own thread.

        None, before anything ran, for a request the general path must word an error for.
        """
        input_name, convert, output, wire, dtype = plan
        inputs = request.inputs
        names = request.output_names()
        tensor = inputs.get(input_name)
        if tensor is None or len(inputs) != 1 or (names is not None and names != [output]):
            return None
        try:
            result = self._forward(convert(tensor.data))
        except TritonError:
            raise
        except Exception as exc:
            raise self._forward_error(exc) from exc
        if type(result) is torch.Tensor and result.dtype is dtype and not result.requires_grad:
            return InferenceResponse(outputs=[Tensor(output, wire, result.numpy())])
        outputs = self._plan.tensors([output], self._outputs(result, [output]))
        return InferenceResponse(outputs=outputs)

    def finalize(self) -> None:
        """Drop the module, which frees its memory (and the GPU's cached blocks)."""
        self._loaded = None
        self._forward = _unloaded(self._model_name)
        if self._gpu:
            torch.cuda.empty_cache()

    # -- helpers ----------------------------------------------------------------------------

    def _run_outputs(self, arrays: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        """One ``forward`` of the inputs; the outputs ``names`` of its result."""
        return self._outputs(self._run(arrays), names)

    def _run(
        self, arrays: dict[str, np.ndarray], special: dict[str, Callable[..., Any]] | None = None
    ) -> Any:
        """Convert the inputs and call ``forward``; errors become TritonErrors.

        ``special``: converters used instead of the model's for some inputs (device buffers).
        """
        converters = self._converters
        if special:
            converters = {**converters, **special}
        try:
            args = [converters[name](arrays[name]) for name in self._arguments]
        except KeyError as exc:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{self._model_name}' needs input '{exc.args[0]}': forward takes every "
                f"input (got {', '.join(arrays) or 'none'})",
            ) from None
        try:
            if self._mode_thread == threading.get_ident():
                return self._call_forward(args)
            with self._grad_mode():  # a thread other than the instance's own (tests, tools)
                return self._call_forward(args)
        except TritonError:
            raise
        except Exception as exc:
            raise self._forward_error(exc) from exc

    def _forward_error(self, exc: Exception) -> TritonError:
        """What a client is told when ``forward`` raised."""
        message = _client_message(exc)
        if not self._torchscript and message.startswith(_GUARD_FAILURES):
            # The program's input checks rejected the request's shapes: a client error.
            return TritonError(
                Status.INVALID_ARG,
                f"model '{self._model_name}' rejected the input shapes: {message}",
            )
        return TritonError(
            Status.INTERNAL, f"PyTorch execute failure in model '{self._model_name}': {message}"
        )

    def _call_forward(self, args: list[Any]) -> Any:
        if self._dict_input:
            return self._forward(dict(zip(self._arguments, args, strict=True)))
        return self._forward(*args)


def _unloaded(model: str) -> Callable[..., Any]:
    def forward(*args: Any) -> Any:
        raise TritonError(Status.UNAVAILABLE, f"model '{model}' is unloaded")

    return forward


def _client_message(exc: Exception, limit: int = 2000) -> str:
    """What a client is told about an exception from ``forward``.

    TorchScript errors carry the model's source and traceback, with server paths: clients get
    their last line (``builtins.RuntimeError: ...``), the log (``--log-verbose 1``) the rest.
    """
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, torch.jit.Error) and "\n" in text:
        logger.debug("TorchScript error: %s", text)
        text = text.rsplit("\n", 1)[-1].strip()
    return text if len(text) <= limit else text[:limit] + " ..."
