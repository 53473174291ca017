"""The ONNX Runtime backend: auto-complete, load, one session per instance, batched execute.

Behaviour follows Triton's onnxruntime backend (triton-inference-server/onnxruntime_backend):
the same config ``parameters`` keys, the same ``optimization { graph { level } }`` mapping and
the same auto-complete rules, with CPU thread defaults that do not oversubscribe the host.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import onnxruntime as ort

from triton_core import (
    CONFIG_TO_WIRE,
    Backend,
    BackendModel,
    DataType,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    ModelInstanceGroup,
    ModelSequenceBatching,
    Status,
    Tensor,
    TritonError,
    execute_concatenated,
)

if TYPE_CHECKING:
    from triton_core import ModelConfig

PLATFORM: Final = "onnxruntime_onnx"
DEFAULT_MODEL_FILENAME: Final = "model.onnx"
#: backend option (``--backend-config=onnxruntime,default-max-batch-size=N``)
DEFAULT_MAX_BATCH_SIZE_OPTION: Final = "default-max-batch-size"
DEFAULT_MAX_BATCH_SIZE: Final = 4

CUDA_PROVIDER: Final = "CUDAExecutionProvider"
CPU_PROVIDER: Final = "CPUExecutionProvider"

#: ONNX element type string, as onnxruntime reports it -> config datatype
ORT_TO_CONFIG: Final[dict[str, str]] = {
    "tensor(bool)": "TYPE_BOOL",
    "tensor(uint8)": "TYPE_UINT8",
    "tensor(uint16)": "TYPE_UINT16",
    "tensor(uint32)": "TYPE_UINT32",
    "tensor(uint64)": "TYPE_UINT64",
    "tensor(int8)": "TYPE_INT8",
    "tensor(int16)": "TYPE_INT16",
    "tensor(int32)": "TYPE_INT32",
    "tensor(int64)": "TYPE_INT64",
    "tensor(float16)": "TYPE_FP16",
    "tensor(float)": "TYPE_FP32",
    "tensor(double)": "TYPE_FP64",
    "tensor(string)": "TYPE_STRING",
    "tensor(bfloat16)": "TYPE_BF16",
}

# onnx.TensorProto.BFLOAT16; a constant so that the runtime does not need the onnx package.
_ONNX_BFLOAT16: Final = 16

#: ``optimization { graph { level } }`` -> ORT level, as Triton maps it (anything else: all)
GRAPH_LEVELS: Final[dict[int, ort.GraphOptimizationLevel]] = {
    -1: ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    1: ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    2: ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}

_KIND_GPU: Final = ModelInstanceGroup.KIND_GPU
_CORRID: Final = ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


# -- model signature ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One input or output of an ONNX model, as onnxruntime reports it."""

    name: str
    #: ``TYPE_FP32`` ..., or "" for a type Triton has no datatype for (sequences, maps)
    config_type: str
    #: onnxruntime's type string, e.g. ``tensor(float)``
    ort_type: str
    #: -1 marks a variable (symbolic or unknown) dimension
    shape: tuple[int, ...]

    def batchable(self) -> bool:
        return len(self.shape) > 0 and self.shape[0] == -1


@dataclass(frozen=True, slots=True)
class Signature:
    inputs: dict[str, TensorInfo]
    outputs: dict[str, TensorInfo]
    #: initializers a request may override; they count as optional inputs
    overridable: dict[str, TensorInfo]


def _tensor_info(arg: Any) -> TensorInfo:
    shape = tuple(d if isinstance(d, int) and d >= 0 else -1 for d in (arg.shape or ()))
    return TensorInfo(arg.name, ORT_TO_CONFIG.get(arg.type, ""), arg.type, shape)


def read_signature(session: ort.InferenceSession) -> Signature:
    """The inputs, outputs and overridable initializers of a session."""
    return Signature(
        inputs={a.name: _tensor_info(a) for a in session.get_inputs()},
        outputs={a.name: _tensor_info(a) for a in session.get_outputs()},
        overridable={a.name: _tensor_info(a) for a in session.get_overridable_initializers()},
    )


def resolve_model_file(model_path: Path) -> Path:
    """``model_path`` itself, or ``<model_path>/model.onnx`` when it is a folder."""
    return model_path / DEFAULT_MODEL_FILENAME if model_path.is_dir() else model_path


def _open_for_inspection(model_file: Path, model_name: str) -> ort.InferenceSession:
    """A cheap CPU session (one thread, no graph optimization) to read the signature."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return _create_session(model_file, model_name, options, [CPU_PROVIDER])


def _create_session(
    model_file: Path,
    model_name: str,
    options: ort.SessionOptions,
    providers: Sequence[str | tuple[str, dict[str, str]]],
) -> ort.InferenceSession:
    if not model_file.is_file():
        raise TritonError(
            Status.UNAVAILABLE, f"unable to find '{model_file}' for model '{model_name}'"
        )
    try:
        return ort.InferenceSession(os.fspath(model_file), options, providers=list(providers))
    except Exception as exc:
        raise TritonError(
            Status.INVALID_ARG,
            f"onnxruntime could not load '{model_file}' for model '{model_name}': {exc}",
        ) from exc


# -- config checks --------------------------------------------------------------------------------


def _type_name(data_type: int) -> str:
    return DataType.Name(data_type)


def _fmt(shape: Iterable[int]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _config_shape(tensor: Any) -> tuple[int, ...]:
    """The shape the model sees for a config tensor (without batch): reshape wins over dims."""
    if tensor.HasField("reshape"):
        return tuple(tensor.reshape.shape)
    return tuple(tensor.dims)


def _dims_error(
    model: str, kind: str, tensor: Any, info: TensorInfo, max_batch_size: int
) -> str | None:
    """Why a config tensor's dims do not fit the model's shape, or None when they do."""
    dims = _config_shape(tensor)
    shape = info.shape
    what = "reshape" if tensor.HasField("reshape") else "dims"
    full = (-1, *dims) if max_batch_size > 0 else dims
    if max_batch_size > 0:
        if not info.batchable():
            return (
                f"model '{model}': {kind} '{tensor.name}' has shape {_fmt(shape)} in the model, "
                f"without the variable first (batch) dimension that max_batch_size "
                f"{max_batch_size} in the config needs"
            )
        shape = shape[1:]
    # A fixed model dim must be matched exactly; a variable one accepts any config dim.
    if len(dims) != len(shape) or any(m != -1 and d != m for d, m in zip(dims, shape, strict=True)):
        return (
            f"model '{model}': {kind} '{tensor.name}' has {what} {_fmt(dims)} in the config "
            f"(max_batch_size {max_batch_size}, full shape {_fmt(full)}) but shape "
            f"{_fmt(info.shape)} in the model"
        )
    return None


def _claimed_inputs(config: ModelConfig) -> set[str]:
    """Model inputs that the server feeds from config sections other than ``input``."""
    names: set[str] = set()
    for batch_input in config.batch_input:
        names.update(batch_input.target_name)
    if config.HasField("sequence_batching"):
        names.update(control.name for control in config.sequence_batching.control_input)
        names.update(state.input_name for state in config.sequence_batching.state)
    return names


def _state_outputs(config: ModelConfig) -> dict[str, int]:
    """Implicit-state outputs (``sequence_batching.state``) by name, with their data_type."""
    if not config.HasField("sequence_batching"):
        return {}
    return {state.output_name: state.data_type for state in config.sequence_batching.state}


def _sequence_input_types(config: ModelConfig) -> dict[str, int]:
    """data_type of the CORRID control and state inputs the sequence batcher adds."""
    if not config.HasField("sequence_batching"):
        return {}
    batching = config.sequence_batching
    types = {state.input_name: state.data_type for state in batching.state}
    for control_input in batching.control_input:
        for control in control_input.control:
            if control.kind == _CORRID:
                types[control_input.name] = control.data_type
    return types


def check_config(config: ModelConfig, signature: Signature, model: str, *, complete: bool) -> None:
    """Check the config's inputs and outputs against the model's; raise INVALID_ARG if not.

    ``complete=False`` (auto-complete) lets listed tensors leave ``data_type`` or ``dims``
    unset, to be filled from the model; ``complete=True`` (load) also requires every
    required model input to be fed by the config.
    """
    known_inputs = {**signature.overridable, **signature.inputs}
    sections = (
        ("input", config.input, known_inputs, signature.inputs),
        ("output", config.output, signature.outputs, signature.outputs),
    )
    for kind, tensors, model_tensors, listed_in_error in sections:
        for tensor in tensors:
            info = model_tensors.get(tensor.name)
            if info is None:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"model '{model}': the config lists {kind} '{tensor.name}' but the model "
                    f"has no such {kind} (model {kind}s: {', '.join(listed_in_error) or 'none'})",
                )
            if not info.config_type:
                raise TritonError(
                    Status.UNSUPPORTED,
                    f"model '{model}': {kind} '{tensor.name}' has type {info.ort_type}, which "
                    f"has no Triton datatype",
                )
            configured = _type_name(tensor.data_type)
            if configured != info.config_type and (complete or tensor.data_type != 0):
                raise TritonError(
                    Status.INVALID_ARG,
                    f"model '{model}': {kind} '{tensor.name}' has data_type {configured} in the "
                    f"config but {info.config_type} in the model",
                )
            if complete or tensor.dims or tensor.HasField("reshape"):
                error = _dims_error(model, kind, tensor, info, config.max_batch_size)
                if error:
                    raise TritonError(Status.INVALID_ARG, error)
    if complete:
        fed = {tensor.name for tensor in config.input} | _claimed_inputs(config)
        missing = [name for name in signature.inputs if name not in fed]
        if missing:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': the model has input(s) {', '.join(missing)} that the config "
                f"does not list (config inputs: "
                f"{', '.join(t.name for t in config.input) or 'none'})",
            )


# -- the backend -----------------------------------------------------------------------------------


class OnnxRuntimeBackend(Backend):
    """Serves ``.onnx`` models with ONNX Runtime (CPU, or CUDA with ``onnxruntime-gpu``)."""

    name = "onnxruntime"
    platforms = (PLATFORM,)
    default_model_filename = DEFAULT_MODEL_FILENAME
    default_cpu_instance_count = 2

    def default_max_batch_size(self) -> int:
        """The ``default-max-batch-size`` backend option (Triton's default: 4)."""
        raw = self.options.get(DEFAULT_MAX_BATCH_SIZE_OPTION, str(DEFAULT_MAX_BATCH_SIZE))
        try:
            return max(int(raw), 0)
        except ValueError:
            raise TritonError(
                Status.INVALID_ARG,
                f"backend option {DEFAULT_MAX_BATCH_SIZE_OPTION}={raw!r} of backend "
                f"'{self.name}' is not an integer",
            ) from None

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:
        """Fill platform, inputs, outputs, max_batch_size and dynamic batching from the model.

        Like Triton: a section (``input`` or ``output``) is filled only when the config leaves
        it empty, and max_batch_size/dynamic batching are considered only then; tensors the
        config lists are checked against the model, and their unset ``data_type``/``dims``
        are filled in.
        """
        model = config.name or model_path.parent.parent.name
        if not config.platform:
            config.platform = PLATFORM
        session = _open_for_inspection(resolve_model_file(model_path), model)
        signature = read_signature(session)
        del session  # the signature is all we need; free the model's memory now

        has_inputs = len(config.input) > 0 or len(config.batch_input) > 0
        has_outputs = len(config.output) > 0
        if not (has_inputs and has_outputs):
            self._complete_batching(config, signature, model)
        check_config(config, signature, model, complete=False)

        strip = 1 if config.max_batch_size > 0 else 0
        if not has_inputs:
            claimed = _claimed_inputs(config)
            for info in signature.inputs.values():
                if info.name not in claimed:
                    _fill(config.input.add(), info, strip, config.max_batch_size)
        if not has_outputs:
            internal = _state_outputs(config)  # implicit state stays out of 'output'
            for info in signature.outputs.values():
                if info.name not in internal:
                    _fill(config.output.add(), info, strip, config.max_batch_size)
        # Listed tensors without a datatype or dims get them from the model.
        model_tensors = {**signature.overridable, **signature.inputs, **signature.outputs}
        for tensor in [*config.input, *config.output]:
            info = model_tensors[tensor.name]
            if tensor.data_type == 0:
                tensor.data_type = DataType.Value(info.config_type)
            if not tensor.dims and not tensor.HasField("reshape"):
                _fill_dims(tensor, info, strip, config.max_batch_size)

    def _complete_batching(self, config: ModelConfig, signature: Signature, model: str) -> None:
        tensors = [*signature.inputs.values(), *signature.outputs.values()]
        can_batch = bool(tensors) and all(info.batchable() for info in tensors)
        if not can_batch:
            if config.max_batch_size != 0:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"autofill failed for model '{model}': model does not support batching "
                    f"while non-zero max_batch_size is specified",
                )
            return
        if config.max_batch_size == 0 and not _listed_without_batch(config, signature):
            config.max_batch_size = self.default_max_batch_size()
        if config.max_batch_size > 1 and config.WhichOneof("scheduling_choice") is None:
            config.dynamic_batching.SetInParent()

    def load_model(self, context: ModelContext) -> OnnxRuntimeModel:
        """Check the model file and parse the session settings; sessions come per instance."""
        return OnnxRuntimeModel(context, self.default_cpu_instance_count)


def _listed_without_batch(config: ModelConfig, signature: Signature) -> bool:
    """True when a listed tensor spells out the model's full shape (so max_batch_size is 0)."""
    model_tensors = {**signature.overridable, **signature.inputs, **signature.outputs}
    for tensor in [*config.input, *config.output]:
        info = model_tensors.get(tensor.name)
        explicit = info is not None and (tensor.dims or tensor.HasField("reshape"))
        if explicit and len(_config_shape(tensor)) == len(info.shape):
            return True
    return False


def _fill(tensor: Any, info: TensorInfo, strip: int, max_batch_size: int) -> None:
    tensor.name = info.name
    if not info.config_type:
        raise TritonError(
            Status.UNSUPPORTED,
            f"tensor '{info.name}' has type {info.ort_type}, which has no Triton datatype",
        )
    tensor.data_type = DataType.Value(info.config_type)
    _fill_dims(tensor, info, strip, max_batch_size)


def _fill_dims(tensor: Any, info: TensorInfo, strip: int, max_batch_size: int) -> None:
    dims = info.shape[strip:]
    if dims:
        tensor.dims.extend(dims)
    else:
        # Config dims may not be empty: a per-item scalar is dims [1] reshaped to [] (Triton).
        tensor.dims.append(1)
        if max_batch_size > 0:
            tensor.reshape.SetInParent()


# -- session settings --------------------------------------------------------------------------


def _available_cpus() -> int:
    # The CPUs this process may run on (cgroups/affinity), not the host's count.
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def count_instances(config: ModelConfig, default_cpu_count: int) -> int:
    """Total instances of a model over its instance groups (per listed GPU for KIND_GPU)."""
    total = 0
    for group in config.instance_group:
        gpu = group.kind == _KIND_GPU
        count = group.count if group.count > 0 else (1 if gpu else default_cpu_count)
        if gpu:
            count *= max(1, len(group.gpus))
        total += count
    return total or default_cpu_count


@dataclass(frozen=True, slots=True)
class SessionSettings:
    """What a model's config asks of every session, parsed and checked once at load."""

    intra_op_threads: int
    inter_op_threads: int
    #: False when the config set ``intra_op_thread_count`` itself
    default_threads: bool
    execution_mode: ort.ExecutionMode
    graph_level: ort.GraphOptimizationLevel
    enable_mem_arena: bool | None
    enable_mem_pattern: bool | None
    #: ``session.*`` parameters, passed to ORT as session config entries
    session_entries: dict[str, str]
    #: ``memory.enable_memory_arena_shrinkage`` (a run option), or None
    arena_shrinkage: str | None
    #: CUDA provider options for GPU instances
    cuda_options: dict[str, str]

    def session_options(self) -> ort.SessionOptions:
        """A fresh ``SessionOptions`` (ORT cannot share one between sessions safely)."""
        options = ort.SessionOptions()
        options.intra_op_num_threads = self.intra_op_threads
        options.inter_op_num_threads = self.inter_op_threads
        options.execution_mode = self.execution_mode
        options.graph_optimization_level = self.graph_level
        if self.enable_mem_arena is not None:
            options.enable_cpu_mem_arena = self.enable_mem_arena
        if self.enable_mem_pattern is not None:
            options.enable_mem_pattern = self.enable_mem_pattern
        if self.default_threads:
            # Spinning threads burn the cores other instances need; sleep when idle instead.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        for key, value in self.session_entries.items():
            options.add_session_config_entry(key, value)
        return options

    def run_options(self) -> ort.RunOptions | None:
        if self.arena_shrinkage is None:
            return None
        options = ort.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", self.arena_shrinkage)
        return options


#: deprecated top-level CUDA parameters that Triton still reads, with their value spellings
_CUDA_PARAMETERS: Final[dict[str, dict[str, str]]] = {
    "cudnn_conv_algo_search": {"0": "EXHAUSTIVE", "1": "HEURISTIC", "2": "DEFAULT"},
    "gpu_mem_limit": {},
    "arena_extend_strategy": {"0": "kNextPowerOfTwo", "1": "kSameAsRequested"},
    "do_copy_in_default_stream": {},
}


def parse_session_settings(config: ModelConfig, model: str, instances: int) -> SessionSettings:
    """Read the ORT settings from a config's ``parameters`` and ``optimization``."""
    params = {key: value.string_value for key, value in config.parameters.items()}

    def integer(key: str, default: int, allowed: Iterable[int] | None = None) -> int:
        raw = params.get(key)
        if raw is None:
            return default
        try:
            value = int(raw.strip())
        except ValueError:
            value = -1
        if value < 0 or (allowed is not None and value not in allowed):
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': parameter '{key}' is '{raw}', expected "
                + (" or ".join(map(str, allowed)) if allowed else "an integer >= 0"),
            )
        return value

    def boolean(key: str) -> bool | None:
        raw = params.get(key)
        if raw is None:
            return None
        lowered = raw.strip().lower()
        if lowered in _TRUE or lowered in _FALSE:
            return lowered in _TRUE
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': parameter '{key}' is '{raw}', expected 1/0 or true/false",
        )

    default_threads = "intra_op_thread_count" not in params
    intra = (
        max(1, _available_cpus() // max(1, instances))
        if default_threads
        else integer("intra_op_thread_count", 0)
    )
    mode = integer("execution_mode", 0, allowed=(0, 1))
    level = config.optimization.graph.level if config.HasField("optimization") else 0

    cuda_options: dict[str, str] = {}
    for key, spellings in _CUDA_PARAMETERS.items():
        if key in params:
            value = params[key].strip()
            cuda_options[key] = spellings.get(value, value)
    for accelerator in config.optimization.execution_accelerators.gpu_execution_accelerator:
        if accelerator.name != "cuda":
            raise TritonError(
                Status.UNSUPPORTED,
                f"model '{model}': gpu_execution_accelerator '{accelerator.name}' is not "
                f"supported by the triton-core onnxruntime backend (only 'cuda')",
            )
        cuda_options.update(accelerator.parameters)
    for accelerator in config.optimization.execution_accelerators.cpu_execution_accelerator:
        raise TritonError(
            Status.UNSUPPORTED,
            f"model '{model}': cpu_execution_accelerator '{accelerator.name}' is not "
            f"supported by the triton-core onnxruntime backend",
        )

    return SessionSettings(
        intra_op_threads=intra,
        # Sequential execution ignores inter-op threads; with parallel execution the config
        # decides, else one thread, so that instances do not oversubscribe the CPU.
        inter_op_threads=integer("inter_op_thread_count", 1),
        default_threads=default_threads,
        execution_mode=(
            ort.ExecutionMode.ORT_PARALLEL if mode == 1 else ort.ExecutionMode.ORT_SEQUENTIAL
        ),
        graph_level=GRAPH_LEVELS.get(level, ort.GraphOptimizationLevel.ORT_ENABLE_ALL),
        enable_mem_arena=boolean("enable_mem_arena"),
        enable_mem_pattern=boolean("enable_mem_pattern"),
        session_entries={k: v for k, v in params.items() if k.startswith("session.")},
        arena_shrinkage=params.get("memory.enable_memory_arena_shrinkage"),
        cuda_options=cuda_options,
    )


# -- the model -------------------------------------------------------------------------------------


def _strings_for_ort(array: np.ndarray, model: str, name: str) -> np.ndarray:
    """BYTES values as ORT's Python API needs them: an object array of ``str``.

    ORT turns ``bytes`` elements into their repr (``"b'a'"``) and misreads ``|S`` arrays,
    so elements are decoded as UTF-8 (strings ORT keeps as UTF-8 bytes inside).
    """
    if array.dtype.kind == "U":
        return array
    try:
        items = [
            item.decode("utf-8") if isinstance(item, bytes | bytearray) else item
            for item in array.ravel().tolist()
        ]
    except UnicodeDecodeError as exc:
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': BYTES input '{name}' holds an element that is not UTF-8 "
            f"({exc.reason}); onnxruntime string tensors take UTF-8 text only",
        ) from None
    result = np.empty(len(items), dtype=object)
    result[:] = items
    return result.reshape(array.shape)


def _bf16_for_ort(array: np.ndarray) -> ort.OrtValue:
    """uint16 BF16 bit patterns wrapped, without a copy, as an ORT bfloat16 tensor."""
    return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
        np.ascontiguousarray(array, dtype=np.uint16), _ONNX_BFLOAT16
    )


def _feed_value(value: np.ndarray | ort.OrtValue) -> ort.OrtValue:
    return (
        value
        if isinstance(value, ort.OrtValue)
        else ort.OrtValue.ortvalue_from_numpy(np.ascontiguousarray(value))
    )


def _from_ortvalue(value: ort.OrtValue) -> np.ndarray:
    """A numpy array for an ORT output; BF16 becomes a uint16 view of ORT's buffer."""
    if value.data_type() != "tensor(bfloat16)":
        return value.numpy()
    if value.device_name().lower() != "cpu":
        raise RuntimeError(f"bfloat16 output on device {value.device_name()}, expected cpu")
    shape = tuple(value.shape())
    if 0 in shape:
        return np.empty(shape, dtype=np.uint16)
    buffer = (ctypes.c_char * value.tensor_size_in_bytes()).from_address(value.data_ptr())
    buffer._owner = value  # type: ignore[attr-defined]  # keeps ORT's memory alive
    return np.frombuffer(buffer, dtype=np.uint16).reshape(shape)


def _reshaper(shape: tuple[int, ...], batched: bool) -> Callable[[np.ndarray], np.ndarray] | None:
    """A function viewing an array as ``[batch] + shape`` (or ``shape``), or None if ambiguous."""
    if list(shape).count(-1) > 1:
        return None  # numpy cannot infer two dims; leave such tensors as they come

    if batched:

        def reshape(array: np.ndarray) -> np.ndarray:
            target = (array.shape[0], *shape)
            return array if array.shape == target else array.reshape(target)

    else:

        def reshape(array: np.ndarray) -> np.ndarray:
            return array if array.shape == shape else array.reshape(shape)

    return reshape


class OnnxRuntimeModel(BackendModel):
    """One loaded version of an ONNX model; everything request-independent is computed here."""

    def __init__(self, context: ModelContext, default_cpu_instance_count: int = 2) -> None:
        config = context.config
        self.name = context.name
        self.config = config
        self.model_file = resolve_model_file(context.model_path)
        if not self.model_file.is_file():
            raise TritonError(
                Status.UNAVAILABLE, f"unable to find '{self.model_file}' for model '{self.name}'"
            )
        self.max_batch_size = config.max_batch_size
        self.instance_count = count_instances(config, default_cpu_instance_count)
        self.settings = parse_session_settings(config, self.name, self.instance_count)

        self.input_names: tuple[str, ...] = tuple(t.name for t in config.input)
        self.output_datatypes: dict[str, str] = {
            t.name: self._wire_type(t, "output") for t in config.output
        }
        # Implicit-state outputs are produced too: the sequence batcher reads them back.
        for name, data_type in _state_outputs(config).items():
            self.output_datatypes.setdefault(name, CONFIG_TO_WIRE[_type_name(data_type)])
        self.output_names: tuple[str, ...] = tuple(self.output_datatypes)
        input_datatypes = {t.name: self._wire_type(t, "input") for t in config.input}
        for name, data_type in _sequence_input_types(config).items():
            input_datatypes[name] = CONFIG_TO_WIRE[_type_name(data_type)]
        self.bytes_inputs = frozenset(n for n, d in input_datatypes.items() if d == "BYTES")
        self.bf16_inputs = frozenset(n for n, d in input_datatypes.items() if d == "BF16")
        self.bf16_outputs = frozenset(n for n, d in self.output_datatypes.items() if d == "BF16")
        if self.bytes_inputs and self.bf16_outputs:
            raise TritonError(
                Status.UNSUPPORTED,
                f"model '{self.name}': onnxruntime's Python API cannot run a model with BYTES "
                f"inputs ({', '.join(sorted(self.bytes_inputs))}) and BF16 outputs "
                f"({', '.join(sorted(self.bf16_outputs))}): string tensors cannot be OrtValues",
            )
        batched = self.max_batch_size > 0
        self.input_reshapes = {
            t.name: fn
            for t in config.input
            if t.HasField("reshape") and (fn := _reshaper(tuple(t.reshape.shape), batched))
        }
        self.output_reshapes = {
            t.name: fn
            for t in config.output
            if t.HasField("reshape") and (fn := _reshaper(tuple(t.dims), batched))
        }
        self._checked = False

    def _wire_type(self, tensor: Any, kind: str) -> str:
        wire = CONFIG_TO_WIRE.get(_type_name(tensor.data_type))
        if wire is None:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{self.name}': {kind} '{tensor.name}' has data_type "
                f"{_type_name(tensor.data_type)}",
            )
        return wire

    def session_providers(self, spec: InstanceSpec) -> list[str | tuple[str, dict[str, str]]]:
        """Execution providers for an instance: CUDA on its device for GPU, else CPU only."""
        kind = spec.kind.upper()
        available = ort.get_available_providers()
        if kind == "GPU" or (kind in ("MODEL", "AUTO") and CUDA_PROVIDER in available):
            if CUDA_PROVIDER not in available:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"unable to load model '{self.name}' instance '{spec.name}' (KIND_GPU, "
                    f"device {spec.device_id}): the onnxruntime CUDA execution provider is not "
                    f"available (available: {', '.join(available)}); install "
                    f"triton-core-onnx[gpu] or use KIND_CPU",
                )
            cuda = {**self.settings.cuda_options, "device_id": str(spec.device_id)}
            # CPU stays as the fallback for the few ops that have no CUDA kernel.
            return [(CUDA_PROVIDER, cuda), CPU_PROVIDER]
        return [CPU_PROVIDER]

    def create_instance(self, spec: InstanceSpec) -> OnnxRuntimeInstance:
        """Create one ``InferenceSession``; the first one is checked against the config."""
        providers = self.session_providers(spec)
        session = _create_session(
            self.model_file, self.name, self.settings.session_options(), providers
        )
        if providers[0] != CPU_PROVIDER and CUDA_PROVIDER not in session.get_providers():
            # ORT falls back to CPU silently when the CUDA libraries fail to load.
            raise TritonError(
                Status.UNAVAILABLE,
                f"unable to load model '{self.name}' instance '{spec.name}': onnxruntime could "
                f"not start the CUDA execution provider on device {spec.device_id} (session "
                f"providers: {', '.join(session.get_providers())})",
            )
        # A failing provider must fail the request, not move this instance to the CPU.
        session.disable_fallback()
        if not self._checked:
            check_config(self.config, read_signature(session), self.name, complete=True)
            self._checked = True
        return OnnxRuntimeInstance(self, session, spec)


# -- the instance ----------------------------------------------------------------------------------


class OnnxRuntimeInstance(ModelInstance):
    """One ``InferenceSession``; ``execute`` runs a whole batch of requests as one ``run``."""

    def __init__(
        self, model: OnnxRuntimeModel, session: ort.InferenceSession, spec: InstanceSpec
    ) -> None:
        self.spec = spec
        self._session: ort.InferenceSession | None = session
        self._model_name = model.name
        self._batching = model.max_batch_size > 0
        self._all_outputs = list(model.output_names)
        self._known_outputs = frozenset(model.output_names)
        self._wire = model.output_datatypes
        self._bytes_inputs = model.bytes_inputs
        self._bf16_inputs = model.bf16_inputs
        self._bf16_outputs = model.bf16_outputs
        self._input_reshapes = model.input_reshapes
        self._output_reshapes = model.output_reshapes
        # Inputs that need more than passing the array through (BYTES, BF16, reshape).
        self._special_inputs = (
            model.bytes_inputs | model.bf16_inputs | frozenset(model.input_reshapes)
        )
        self._run_options = model.settings.run_options()

    @property
    def session(self) -> ort.InferenceSession:
        if self._session is None:
            raise TritonError(Status.UNAVAILABLE, f"model '{self._model_name}' is unloaded")
        return self._session

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """Run the batch as one ``session.run`` (models with max_batch_size > 0)."""
        if len(requests) == 1:
            request = requests[0]
            names = self._output_names(request)
            arrays = self._run(names, self._feeds(request.inputs))
            return [InferenceResponse(outputs=self._tensors(names, arrays))]
        if not self._batching or not requests:
            return [self._execute_alone(request) for request in requests]
        return self._execute_batch(requests)

    def finalize(self) -> None:
        """Drop the session, which frees its memory."""
        self._session = None

    # -- helpers ----------------------------------------------------------------------------

    def _output_names(self, request: InferenceRequest) -> list[str]:
        names = request.output_names()
        if names is None:
            return self._all_outputs
        if not self._known_outputs.issuperset(names):
            unknown = [n for n in names if n not in self._known_outputs]
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{self._model_name}' has no output(s) {', '.join(unknown)} "
                f"(outputs: {', '.join(self._all_outputs)})",
            )
        return names

    def _feeds(self, inputs: dict[str, Tensor]) -> dict[str, Any]:
        feeds: dict[str, Any] = {name: tensor.data for name, tensor in inputs.items()}
        if self._special_inputs:
            self._convert(feeds)
        return feeds

    def _convert(self, feeds: dict[str, Any]) -> None:
        for name in self._special_inputs.intersection(feeds):
            array = feeds[name]
            reshape = self._input_reshapes.get(name)
            if reshape is not None:
                array = reshape(array)
            if name in self._bytes_inputs:
                array = _strings_for_ort(array, self._model_name, name)
            elif name in self._bf16_inputs:
                array = _bf16_for_ort(array)
            feeds[name] = array

    def _run(self, names: list[str], feeds: dict[str, Any]) -> list[np.ndarray]:
        session = self.session
        try:
            if self._bf16_outputs and not self._bf16_outputs.isdisjoint(names):
                # run() cannot return bfloat16 (numpy has no such dtype); fetch OrtValues.
                values = session.run_with_ort_values(
                    names, {n: _feed_value(v) for n, v in feeds.items()}, self._run_options
                )
                arrays = [_from_ortvalue(value) for value in values]
            else:
                arrays = session.run(names, feeds, self._run_options)
        except TritonError:
            raise
        except Exception as exc:
            raise TritonError(
                Status.INTERNAL, f"onnxruntime error for model '{self._model_name}': {exc}"
            ) from exc
        if self._output_reshapes:
            for i, name in enumerate(names):
                reshape = self._output_reshapes.get(name)
                if reshape is not None:
                    arrays[i] = reshape(arrays[i])
        return arrays

    def _tensors(self, names: list[str], arrays: Sequence[np.ndarray]) -> list[Tensor]:
        wire = self._wire
        return [Tensor(name, wire[name], array) for name, array in zip(names, arrays, strict=True)]

    def _execute_alone(self, request: InferenceRequest) -> InferenceResponse:
        try:
            names = self._output_names(request)
            arrays = self._run(names, self._feeds(request.inputs))
        except TritonError as exc:
            return InferenceResponse(error=exc)
        return InferenceResponse(outputs=self._tensors(names, arrays))

    def _execute_batch(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        # Requests asking for unknown outputs fail alone; the rest run as one call.
        return execute_concatenated(
            requests,
            model_name=self._model_name,
            all_outputs=self._all_outputs,
            output_datatypes=self._wire,
            output_names=self._output_names,
            run=self._run_concatenated,
            run_alone=self._execute_alone,
        )

    def _run_concatenated(self, feeds: dict[str, Any], names: list[str]) -> Sequence[np.ndarray]:
        if self._special_inputs:
            self._convert(feeds)
        return self._run(names, feeds)
