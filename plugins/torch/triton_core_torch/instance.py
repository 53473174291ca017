"""A PyTorch model instance: requests in as tensors (without a copy where torch can view
the memory), one ``forward`` per batch under ``torch.inference_mode()``, outputs back as numpy
views split per request, on the CPU or a GPU.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, cast

import numpy as np
import torch

from triton_core import (
    DEVICE_DATATYPES,
    DeviceBuffer,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelInstance,
    Status,
    Tensor,
    TritonError,
    has_device_tensors,
    request_on_device,
    request_to_host,
)
from triton_core_torch.loading import TORCH_TO_CONFIG, Loaded

if TYPE_CHECKING:
    from triton_core_torch.runtime import PyTorchModel

logger = logging.getLogger(__name__)

# The frontends hand the backend read-only numpy views of request bodies. torch.from_numpy
# wraps them without a copy but warns that the tensor is not writable; models read their
# inputs and never write them (Triton's backend wraps request buffers the same way), so this
# one warning is silenced instead of paying for a copy of every input.
warnings.filterwarnings(
    "ignore", message="The given NumPy array is not writable", category=UserWarning
)


#: how the input checks of a torch.export program's module word their failures
_GUARD_FAILURES: Final = ("Guard failed", "Expected input at")


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
