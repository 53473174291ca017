"""The ONNX Runtime backend: auto-complete, load, one session per instance, batched execute.

Behaviour follows Triton's onnxruntime backend (triton-inference-server/onnxruntime_backend):
the same config ``parameters`` keys, the same ``optimization { graph { level } }`` mapping and
the same auto-complete rules, with CPU thread defaults that do not oversubscribe the host.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
import onnxruntime as ort

from triton_core import (
    CONFIG_TO_WIRE,
    DEVICE_DATATYPES,
    Backend,
    BackendModel,
    BatchPlan,
    DataType,
    DeviceBuffer,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    ModelSequenceBatching,
    RaggedBatching,
    Status,
    Tensor,
    TritonError,
    claimed_inputs,
    complete_batching,
    count_instances,
    dims_error,
    fill_tensor,
    fill_unset,
    has_device_tensors,
    input_reshapes,
    output_reshapes,
    request_on_device,
    request_to_host,
    state_outputs,
    wire_types,
)
from triton_core_onnx.providers import (
    CUDA_PROVIDER,
    TENSORRT_PROVIDER,
)
from triton_core_onnx.settings import parse_session_settings

if TYPE_CHECKING:
    from triton_core import ModelConfig

PLATFORM: Final = "onnxruntime_onnx"
DEFAULT_MODEL_FILENAME: Final = "model.onnx"

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

_CORRID: Final = ModelSequenceBatching.Control.CONTROL_SEQUENCE_CORRID


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
    # ragged inputs and scattered outputs reach the model joined end to end: 1-D, any length
    flat = {t.name for t in config.input if t.allow_ragged_batch}
    flat.update(name for spec in config.batch_output for name in spec.target_name)
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
            _check_tensor(config, model, kind, tensor, info, complete, tensor.name in flat)
    if complete:
        _check_inputs_fed(config, signature, model)


def _check_tensor(
    config: ModelConfig,
    model: str,
    kind: str,
    tensor: Any,
    info: TensorInfo,
    complete: bool,
    flat: bool,
) -> None:
    """One config tensor against the model's: datatype, then dims (1-D when ``flat``)."""
    if not info.config_type:
        raise TritonError(
            Status.UNSUPPORTED,
            f"model '{model}': {kind} '{tensor.name}' has type {info.ort_type}, which "
            f"has no Triton datatype",
        )
    configured = DataType.Name(tensor.data_type)
    if configured != info.config_type and (complete or tensor.data_type != 0):
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': {kind} '{tensor.name}' has data_type {configured} in the "
            f"config but {info.config_type} in the model",
        )
    if flat:
        if len(info.shape) != 1:
            raise TritonError(
                Status.INVALID_ARG,
                f"model '{model}': {kind} '{tensor.name}' is joined end to end for a "
                f"ragged batch, so the model must take it 1-D, not {list(info.shape)}",
            )
    elif complete or tensor.dims or tensor.HasField("reshape"):
        error = dims_error(model, kind, tensor, info.shape, config.max_batch_size)
        if error:
            raise TritonError(Status.INVALID_ARG, error)


def _check_inputs_fed(config: ModelConfig, signature: Signature, model: str) -> None:
    """Every input the model requires is one the config lists (or a sequence control)."""
    fed = {tensor.name for tensor in config.input} | claimed_inputs(config)
    missing = [name for name in signature.inputs if name not in fed]
    if missing:
        raise TritonError(
            Status.INVALID_ARG,
            f"model '{model}': the model has input(s) {', '.join(missing)} that the config "
            f"does not list (config inputs: "
            f"{', '.join(t.name for t in config.input) or 'none'})",
        )


class OnnxRuntimeBackend(Backend):
    """Serves ``.onnx`` models with ONNX Runtime (CPU, or CUDA with ``onnxruntime-gpu``)."""

    name = "onnxruntime"
    platforms = (PLATFORM,)
    default_model_filename = DEFAULT_MODEL_FILENAME
    default_cpu_instance_count = 2
    #: ``optimization { graph { level } }`` and the execution accelerators (only "cuda" GPU
    #: accelerators load; others are refused by name)
    config_fields = frozenset({"optimization.graph", "optimization.execution_accelerators"})

    def runs_on_gpus(self) -> bool:
        """Only with onnxruntime's CUDA provider (``onnxruntime-gpu``): with the CPU build, a
        model without instance groups loads on the CPU where there are GPUs."""
        return CUDA_PROVIDER in ort.get_available_providers()

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
            complete_batching(
                config,
                model,
                signature.inputs,
                signature.outputs,
                self,
                optional_inputs=signature.overridable,
            )
        check_config(config, signature, model, complete=False)

        max_batch_size = config.max_batch_size
        if not has_inputs:
            claimed = claimed_inputs(config)
            for info in signature.inputs.values():
                if info.name not in claimed:
                    _fill(config.input.add(), info, max_batch_size)
        if not has_outputs:
            internal = state_outputs(config)  # implicit state stays out of 'output'
            for info in signature.outputs.values():
                if info.name not in internal:
                    _fill(config.output.add(), info, max_batch_size)
        # Listed tensors without a datatype or dims get them from the model.
        model_tensors = {**signature.overridable, **signature.inputs, **signature.outputs}
        for tensor in [*config.input, *config.output]:
            fill_unset(tensor, model_tensors[tensor.name], max_batch_size)

    def load_model(self, context: ModelContext) -> OnnxRuntimeModel:
        """Check the model file and parse the session settings; sessions come per instance."""
        return OnnxRuntimeModel(context, self.default_cpu_instance_count)


def _fill(tensor: Any, info: TensorInfo, max_batch_size: int) -> None:
    if not info.config_type:
        raise TritonError(
            Status.UNSUPPORTED,
            f"tensor '{info.name}' has type {info.ort_type}, which has no Triton datatype",
        )
    fill_tensor(tensor, info, max_batch_size)


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


def _bind_input(binding: Any, name: str, data: Any, device_type: str) -> None:
    if isinstance(data, DeviceBuffer):
        device, shape = data.device_id, list(data.shape)
        binding.bind_input(name, device_type, device, data.dtype.type, shape, data.pointer)
    else:
        binding.bind_cpu_input(name, np.ascontiguousarray(data))


def _bind_into(binding: Any, name: str, buffer: DeviceBuffer, device_type: str) -> None:
    """Output ``name`` written by the run straight into ``buffer`` (the client's region)."""
    device, shape = buffer.device_id, list(buffer.shape)
    binding.bind_output(name, device_type, device, buffer.dtype.type, shape, buffer.pointer)


def _copy_into(name: str, value: ort.OrtValue, target: DeviceBuffer) -> DeviceBuffer:
    """An output ONNX Runtime allocated on the device, copied into the client's region."""
    datatype = CONFIG_TO_WIRE.get(ORT_TO_CONFIG.get(value.data_type(), ""), "")
    placed = target.laid_out(name, datatype, tuple(value.shape()))
    placed.copy_from_device(value.data_ptr(), placed.nbytes)
    return placed


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
        self.output_datatypes = wire_types(self.name, "output", config.output)
        # Implicit-state outputs are produced too: the sequence batcher reads them back.
        for name, data_type in state_outputs(config).items():
            self.output_datatypes.setdefault(name, CONFIG_TO_WIRE[DataType.Name(data_type)])
        self.output_names: tuple[str, ...] = tuple(self.output_datatypes)
        input_datatypes = wire_types(self.name, "input", config.input)
        for name, data_type in _sequence_input_types(config).items():
            input_datatypes[name] = CONFIG_TO_WIRE[DataType.Name(data_type)]
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
        self.input_reshapes = input_reshapes(config)
        self.output_reshapes = output_reshapes(config)
        #: outputs whose every dim the config fixes: their size is known before a run
        self.fixed_output_dims = {
            t.name: tuple(t.dims) for t in config.output if all(d >= 0 for d in t.dims)
        }
        self.plan = BatchPlan(
            self.name,
            self.output_datatypes,
            batching=self.max_batch_size > 0,
            ragged=RaggedBatching.of(config),
        )
        self._checked = False

    def session_providers(self, spec: InstanceSpec) -> list[str | tuple[str, dict[str, str]]]:
        """Execution providers for an instance: TensorRT (when asked) and CUDA on its device
        for GPU, else CPU only."""
        kind = spec.kind.upper()
        available = ort.get_available_providers()
        if kind == "GPU" or (kind in ("MODEL", "AUTO") and CUDA_PROVIDER in available):
            gpu = self.settings.gpu
            if gpu.tensorrt is not None and TENSORRT_PROVIDER not in available:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"unable to load model '{self.name}' instance '{spec.name}': "
                    f"gpu_execution_accelerator 'tensorrt' needs onnxruntime's TensorRT "
                    f"execution provider, which is not available (available: "
                    f"{', '.join(available)}); install triton-core-onnx[gpu] with TensorRT",
                )
            if CUDA_PROVIDER not in available:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"unable to load model '{self.name}' instance '{spec.name}' (KIND_GPU, "
                    f"device {spec.device_id}): the onnxruntime CUDA execution provider is not "
                    f"available (available: {', '.join(available)}); install "
                    f"triton-core-onnx[gpu] or use KIND_CPU",
                )
            # CPU stays as the fallback for the few ops that have no CUDA kernel.
            return [*gpu.for_device(spec.device_id), CPU_PROVIDER]
        return [CPU_PROVIDER]

    def create_instance(self, spec: InstanceSpec) -> OnnxRuntimeInstance:
        """Create one ``InferenceSession``; the first one is checked against the config."""
        providers = self.session_providers(spec)
        session = _create_session(
            self.model_file, self.name, self.settings.session_options(), providers
        )
        started = session.get_providers()
        wants_tensorrt = self.settings.gpu.tensorrt is not None and providers[0] != CPU_PROVIDER
        if wants_tensorrt and TENSORRT_PROVIDER not in started:
            raise TritonError(
                Status.UNAVAILABLE,
                f"unable to load model '{self.name}' instance '{spec.name}': onnxruntime "
                f"could not start gpu_execution_accelerator 'tensorrt' on device "
                f"{spec.device_id} (session providers: {', '.join(started)})",
            )
        if providers[0] != CPU_PROVIDER and CUDA_PROVIDER not in started:
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
        self._plan = model.plan
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
        # GPU sessions run through an IO binding: ORT writes outputs straight into host
        # buffers it allocates, with no device-side output kept and copied again. Strings and
        # BF16 outputs take the plain path.
        self._io_binding = (
            "CUDAExecutionProvider" in session.get_providers()
            and not model.bytes_inputs
            and not model.bf16_outputs
        )
        # CUDA shared-memory tensors are bound where they are (see _execute_on_device) for
        # tensors that pass straight through: no conversion, reshape or ragged join
        self.accepts_device_tensors = (
            self._io_binding
            and not self._special_inputs
            and not model.output_reshapes
            and model.plan.ragged is None
        )
        #: where device tensors live, as ONNX Runtime names the device
        self._device_type = "cuda"
        self._batched = model.max_batch_size > 0
        self._fixed_output_dims = model.fixed_output_dims
        self._wire = model.output_datatypes
        # A CPU session keeps no per-thread state: a short run may happen on the event loop.
        self.may_run_inline = session.get_providers() == [CPU_PROVIDER]

    @property
    def session(self) -> ort.InferenceSession:
        if self._session is None:
            raise TritonError(Status.UNAVAILABLE, f"model '{self._model_name}' is unloaded")
        return self._session

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """Run the batch as one ``session.run`` (models with max_batch_size > 0)."""
        if self.accepts_device_tensors and len(requests) == 1 and has_device_tensors(requests[0]):
            return [self._execute_on_device(requests[0])]
        return self._plan.execute(requests, self._run)

    def _execute_on_device(self, request: InferenceRequest) -> InferenceResponse:
        """One request whose tensors are (partly) in CUDA shared memory: inputs bound at
        their device addresses, outputs written into their regions by the run itself where
        their size is known first, else copied there device to device once it ran."""
        if not request_on_device(request, self.spec.device_id):
            request_to_host(request)  # another GPU's memory: through the host, as before
            return self._plan.execute([request], self._run)[0]
        names = self._plan.select(request)
        device_type = self._device_type
        binding = self.session.io_binding()
        for name, tensor in request.inputs.items():
            _bind_input(binding, name, tensor.data, device_type)
        # other datatypes are written (or sent) by the server from host memory
        wire = self._wire
        targets = {
            name: target
            for name, target in (request.device_outputs or {}).items()
            if wire.get(name) in DEVICE_DATATYPES
        }
        placed: dict[str, DeviceBuffer] = {}
        for name in names:
            target = targets.get(name)
            shape = self._known_output_shape(name, request.batch_size)
            if target is None:
                binding.bind_output(name, "cpu")
            elif shape is None or not prod(shape):
                binding.bind_output(name, device_type, self.spec.device_id)
            else:
                placed[name] = target.laid_out(name, wire[name], shape)
                _bind_into(binding, name, placed[name], device_type)
        values = self._run_binding(binding)
        outputs = []
        for name, value in zip(names, values, strict=True):
            data = placed.get(name)
            if data is None:
                target = targets.get(name)
                data = value.numpy() if target is None else _copy_into(name, value, target)
            outputs.append(Tensor(name, wire[name], cast(np.ndarray, data)))
        return InferenceResponse(outputs=outputs)

    def _known_output_shape(self, name: str, batch_size: int) -> tuple[int, ...] | None:
        dims = self._fixed_output_dims.get(name)
        if dims is None:
            return None
        return (batch_size, *dims) if self._batched else dims

    def _run_binding(self, binding: Any) -> list[Any]:
        try:
            self.session.run_with_iobinding(binding, self._run_options)
            binding.synchronize_outputs()  # written before the client is told
            return list(binding.get_outputs())
        except TritonError:
            raise
        except Exception as exc:
            raise self._ort_error(exc) from exc

    def _ort_error(self, exc: Exception) -> TritonError:
        return TritonError(
            Status.INTERNAL, f"onnxruntime error for model '{self._model_name}': {exc}"
        )

    def finalize(self) -> None:
        """Drop the session, which frees its memory."""
        self._session = None

    # -- helpers ----------------------------------------------------------------------------

    def _run_bound(
        self, session: ort.InferenceSession, feeds: dict[str, Any], names: list[str]
    ) -> list[np.ndarray]:
        binding = session.io_binding()
        for name, value in feeds.items():
            if isinstance(value, ort.OrtValue):
                binding.bind_ortvalue_input(name, value)
            else:
                binding.bind_cpu_input(name, np.ascontiguousarray(value))
        for name in names:
            binding.bind_output(name, "cpu")
        session.run_with_iobinding(binding, self._run_options)
        return [value.numpy() for value in binding.get_outputs()]

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

    def _run(self, feeds: dict[str, Any], names: list[str]) -> list[np.ndarray]:
        """One ``session.run`` of the feeds (converted in place) for the outputs ``names``."""
        if self._special_inputs:
            self._convert(feeds)
        session = self.session
        try:
            if self._bf16_outputs and not self._bf16_outputs.isdisjoint(names):
                # run() cannot return bfloat16 (numpy has no such dtype); fetch OrtValues.
                values = session.run_with_ort_values(
                    names, {n: _feed_value(v) for n, v in feeds.items()}, self._run_options
                )
                arrays = [_from_ortvalue(value) for value in values]
            elif self._io_binding:
                arrays = self._run_bound(session, feeds, names)
            else:
                arrays = session.run(names, feeds, self._run_options)
        except TritonError:
            raise
        except Exception as exc:
            raise self._ort_error(exc) from exc
        if self._output_reshapes:
            for i, name in enumerate(names):
                reshape = self._output_reshapes.get(name)
                if reshape is not None:
                    arrays[i] = reshape(arrays[i])
        return arrays
