"""The device side: deserialize engines, record their descriptions, run batches on a GPU.

Imported only when a TensorRT model is completed or loaded; ``tensorrt`` itself is imported
then too, so that the plugin installs, imports and lists without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from triton_core import (
    BackendModel,
    BatchPlan,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    Status,
    TritonError,
)
from triton_core_tensorrt.description import (
    EngineDescription,
    ProfileDescription,
    TensorDescription,
)
from triton_core_tensorrt.device import DeviceMemory, device_properties, open_device_memory
from triton_core_tensorrt.planning import (
    Binding,
    binding_plan,
    check_config,
    choose_profile,
    deserialize_error,
    group_profiles,
    resolve_output_shape,
    served_outputs,
)

#: CUDA graphs kept per instance, one per distinct set of input shapes
MAX_CUDA_GRAPHS = 32


def import_tensorrt(model: str) -> Any:
    """The ``tensorrt`` module, or UNAVAILABLE saying what to install."""
    try:
        import tensorrt
    except ImportError as exc:
        raise TritonError(
            Status.UNAVAILABLE,
            f"unable to load model '{model}': the TensorRT backend needs the tensorrt "
            f"package and a CUDA GPU (pip install triton-core-tensorrt[gpu]); importing "
            f"tensorrt failed: {exc}",
        ) from None
    return tensorrt


def _make_logger(trt: Any) -> Any:
    class Logger(trt.ILogger):  # type: ignore[misc]
        """Keeps TensorRT's errors to explain a failed deserialization."""

        def __init__(self) -> None:
            trt.ILogger.__init__(self)
            self.errors: list[str] = []

        def log(self, severity: Any, msg: str) -> None:
            if severity in errors:
                self.errors.append(msg)

    errors = (trt.ILogger.Severity.INTERNAL_ERROR, trt.ILogger.Severity.ERROR)

    return Logger()


def deserialize(trt: Any, model: str, path: Path, device_id: int) -> tuple[Any, Any]:
    """(runtime, engine) on ``device_id`` from a plan file; errors say why it does not load.
    The runtime must outlive the engine, so the caller keeps both."""
    from triton_core_tensorrt.device import _check, _cudart

    runtime_module = _cudart()
    if runtime_module is not None:
        _check(runtime_module.cudaSetDevice(device_id), "cudaSetDevice")
    logger = _make_logger(trt)
    runtime = trt.Runtime(logger)
    if runtime is None:
        raise TritonError(
            Status.UNAVAILABLE,
            f"unable to load model '{model}': unable to create TensorRT runtime: "
            + " ".join(logger.errors),
        )
    engine = runtime.deserialize_cuda_engine(path.read_bytes())
    if engine is None:
        capability, _ = device_properties(device_id)
        raise deserialize_error(model, str(path), logger.errors, trt.__version__, capability)
    return runtime, engine


def _shape(dims: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in dims)


def _profile_shapes(
    engine: Any, tensor: TensorDescription, index: int
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """(min, opt, max) of an input in a profile; a static input's one shape where TensorRT
    keeps no range for it."""
    try:
        lo, opt, hi = engine.get_tensor_profile_shape(tensor.name, index)
    except (RuntimeError, TypeError, ValueError):
        if -1 in tensor.engine_shape:
            raise
        return tensor.engine_shape, tensor.engine_shape, tensor.engine_shape
    return _shape(lo), _shape(opt), _shape(hi)


def describe_engine(trt: Any, engine: Any, device_id: int = 0) -> EngineDescription:
    """Record an engine's description: I/O tensors, every profile's input ranges and the
    output shapes at the profile's largest inputs (read through an execution context)."""
    tensors = []
    for i in range(engine.num_io_tensors):
        name = engine.get_tensor_name(i)
        tensors.append(
            TensorDescription(
                name=name,
                mode=engine.get_tensor_mode(name).name,
                dtype=engine.get_tensor_dtype(name).name,
                engine_shape=_shape(engine.get_tensor_shape(name)),
                format=engine.get_tensor_format(name).name,
                is_shape_tensor=bool(engine.is_shape_inference_io(name)),
            )
        )
    inputs = [t for t in tensors if t.is_input]
    outputs = [t for t in tensors if not t.is_input]
    context = engine.create_execution_context()
    profiles = []
    for index in range(engine.num_optimization_profiles):
        ranges = {}
        for tensor in inputs:
            if tensor.is_shape_tensor:
                continue
            ranges[tensor.name] = _profile_shapes(engine, tensor, index)
        # Setting the profile on the default stream is enough for reading shapes.
        context.set_optimization_profile_async(index, 0)
        for name, (_, _, hi) in ranges.items():
            context.set_input_shape(name, hi)
        max_outputs = {t.name: _shape(context.get_tensor_shape(t.name)) for t in outputs}
        profiles.append(ProfileDescription(inputs=ranges, max_outputs=max_outputs))
    capability, device_name = device_properties(device_id)
    return EngineDescription(
        tensors=tuple(tensors),
        profiles=tuple(profiles),
        tensorrt_version=str(trt.__version__),
        compute_capability=capability,
        device_name=device_name,
    )


def read_description(model: str, path: Path, device_id: int = 0) -> EngineDescription:
    """Deserialize the plan on ``device_id`` and describe it (for auto-complete)."""
    trt = import_tensorrt(model)
    if not path.is_file():
        raise TritonError(Status.UNAVAILABLE, f"unable to find '{path}' for model '{model}'")
    _runtime, engine = deserialize(trt, model, path, device_id)
    return describe_engine(trt, engine, device_id)


class TensorRTModel(BackendModel):
    """One loaded version of a plan; an engine per device, shared by that device's instances."""

    def __init__(self, context: ModelContext) -> None:
        self.name = context.name
        self.config = context.config
        self.path = context.model_path
        if not self.path.is_file():
            raise TritonError(
                Status.UNAVAILABLE, f"unable to find '{self.path}' for model '{self.name}'"
            )
        self._trt = import_tensorrt(self.name)
        #: device -> (runtime, engine, description)
        self._engines: dict[int, tuple[Any, Any, EngineDescription]] = {}
        self._lock = threading.Lock()
        self.use_cuda_graphs = bool(self.config.optimization.cuda.graphs)
        self.output_types = served_outputs(self.config, self.name)
        self.plan = BatchPlan(self.name, self.output_types, batching=self.config.max_batch_size > 0)

    def engine(self, device_id: int) -> tuple[Any, EngineDescription]:
        """The engine on a device (deserialized and checked against the config once)."""
        with self._lock:
            if device_id not in self._engines:
                runtime, engine = deserialize(self._trt, self.name, self.path, device_id)
                description = describe_engine(self._trt, engine, device_id)
                check_config(self.config, description, self.name)
                self._engines[device_id] = (runtime, engine, description)
            _, engine, description = self._engines[device_id]
            return engine, description

    def create_instance(self, spec: InstanceSpec) -> TensorRTInstance:
        if spec.kind.upper() != "GPU":
            raise TritonError(
                Status.INVALID_ARG,
                f"unable to load model '{self.name}' instance '{spec.name}': the TensorRT "
                f"backend runs on GPUs only (KIND_GPU), not {spec.kind}",
            )
        engine, description = self.engine(spec.device_id)
        group = next((g for g in self.config.instance_group if g.name == spec.group_name), None)
        profiles = (
            group_profiles(self.name, group, len(description.profiles))
            if group is not None
            else (0,)
        )
        return TensorRTInstance(self, spec, engine, description, profiles)


class TensorRTInstance(ModelInstance):
    """One execution context per profile, one stream and one set of buffers per instance."""

    def __init__(
        self,
        model: TensorRTModel,
        spec: InstanceSpec,
        engine: Any,
        description: EngineDescription,
        profiles: tuple[int, ...],
    ) -> None:
        self._name = model.name
        self._plan = model.plan
        self._description = description
        self._profiles = profiles
        self._memory: DeviceMemory = open_device_memory(model.name, spec.device_id)
        self._bindings: dict[str, Binding] = {
            b.name: b for b in binding_plan(model.name, description, profiles)
        }
        self._addresses = {name: self._memory.alloc(b.nbytes) for name, b in self._bindings.items()}
        self._contexts: dict[int, Any] = {}
        for index in profiles:
            context = engine.create_execution_context()
            context.set_optimization_profile_async(index, self._memory.stream_handle)
            for name, address in self._addresses.items():
                context.set_tensor_address(name, address)
            self._contexts[index] = context
        self._memory.synchronize()
        self._use_graphs = model.use_cuda_graphs
        self._graphs: dict[tuple[Any, ...], Callable[[], None]] = {}

    def thread_started(self) -> None:
        """Make this instance's GPU the executing thread's current device."""
        self._memory.make_current()

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        return self._plan.execute(requests, self._run)

    def _run(self, inputs: dict[str, np.ndarray], names: list[str]) -> list[np.ndarray]:
        shapes = {name: tuple(array.shape) for name, array in inputs.items()}
        index = choose_profile(self._name, self._description, self._profiles, shapes)
        context = self._contexts[index]
        for name, array in inputs.items():
            binding = self._bindings[name]
            host = np.ascontiguousarray(array, dtype=binding.dtype)
            if host.nbytes > binding.nbytes:
                raise TritonError(
                    Status.INVALID_ARG,
                    f"model '{self._name}' input '{name}': {host.nbytes} bytes exceed the "
                    f"{binding.nbytes} the optimization profiles allow",
                )
            context.set_input_shape(name, host.shape)
            self._memory.to_device(self._addresses[name], host)
        self._launch(context, index, shapes)
        arrays = []
        for name in names:
            shape = resolve_output_shape(self._name, name, context.get_tensor_shape(name))
            array = np.empty(shape, dtype=self._bindings[name].dtype)
            self._memory.to_host(array, self._addresses[name])
            arrays.append(array)
        self._memory.synchronize()
        return arrays

    def _launch(self, context: Any, index: int, shapes: dict[str, tuple[int, ...]]) -> None:
        def enqueue(stream: int) -> None:
            if not context.execute_async_v3(stream):
                raise TritonError(
                    Status.INTERNAL, f"model '{self._name}': TensorRT failed to enqueue the batch"
                )

        if not self._use_graphs:
            enqueue(self._memory.stream_handle)
            return
        key = (index, *sorted(shapes.items()))
        graph = self._graphs.get(key)
        if graph is None:
            # TensorRT updates its state for new shapes on the first enqueue: capture after it.
            enqueue(self._memory.stream_handle)
            if len(self._graphs) < MAX_CUDA_GRAPHS:
                self._memory.synchronize()
                self._graphs[key] = self._memory.capture(enqueue)
            return
        graph()

    def finalize(self) -> None:
        self._graphs.clear()
        self._contexts.clear()
        self._memory.close()
