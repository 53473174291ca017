"""CUDA streams, device buffers and copies for one instance, through cuda-python or torch.

cuda-python's runtime bindings (``cuda.bindings.runtime``) are used where installed, else
PyTorch's caching allocator and streams when torch has CUDA. Both hand TensorRT plain device
addresses and a stream handle; neither is imported until a GPU instance is created.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from triton_core import Status, TritonError


class DeviceMemory(Protocol):
    """One instance's stream and buffers on one device."""

    #: the ``cudaStream_t`` as an int, for ``execute_async_v3``
    stream_handle: int

    def make_current(self) -> None: ...
    def alloc(self, nbytes: int) -> int: ...
    def to_device(self, address: int, array: np.ndarray) -> None: ...
    def to_host(self, array: np.ndarray, address: int) -> None: ...
    def synchronize(self) -> None: ...
    def capture(self, launch: Callable[[int], None]) -> Callable[[], None]: ...
    def close(self) -> None: ...


def _cudart() -> Any | None:
    try:
        from cuda.bindings import runtime  # cuda-python >= 12.6
    except ImportError:
        try:
            from cuda import cudart as runtime  # older layout
        except ImportError:
            return None
    return runtime


def _check(result: Any, what: str) -> Any:
    """Unpack a cuda-python ``(error, value...)`` tuple, raising on an error."""
    error, *values = result if isinstance(result, tuple) else (result,)
    if int(error) != 0:
        raise TritonError(Status.INTERNAL, f"CUDA error in {what}: {error!r}")
    return values[0] if len(values) == 1 else values


class CudaPythonMemory:
    """Device memory through ``cuda.bindings.runtime`` (cudaMalloc, cudaMemcpyAsync)."""

    def __init__(self, runtime: Any, device_id: int) -> None:
        self._rt = runtime
        self._device = device_id
        _check(runtime.cudaSetDevice(device_id), "cudaSetDevice")
        self._stream = _check(runtime.cudaStreamCreate(), "cudaStreamCreate")
        self.stream_handle = int(self._stream)
        self._allocations: list[Any] = []
        self._graphs: list[Any] = []

    def make_current(self) -> None:
        _check(self._rt.cudaSetDevice(self._device), "cudaSetDevice")

    def alloc(self, nbytes: int) -> int:
        pointer = _check(self._rt.cudaMalloc(nbytes), "cudaMalloc")
        self._allocations.append(pointer)
        return int(pointer)

    def to_device(self, address: int, array: np.ndarray) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyHostToDevice
        host = np.ascontiguousarray(array)
        _check(
            self._rt.cudaMemcpyAsync(address, host.ctypes.data, host.nbytes, kind, self._stream),
            "cudaMemcpyAsync (host to device)",
        )

    def to_host(self, array: np.ndarray, address: int) -> None:
        kind = self._rt.cudaMemcpyKind.cudaMemcpyDeviceToHost
        _check(
            self._rt.cudaMemcpyAsync(array.ctypes.data, address, array.nbytes, kind, self._stream),
            "cudaMemcpyAsync (device to host)",
        )

    def synchronize(self) -> None:
        _check(self._rt.cudaStreamSynchronize(self._stream), "cudaStreamSynchronize")

    def capture(self, launch: Callable[[int], None]) -> Callable[[], None]:
        rt = self._rt
        mode = rt.cudaStreamCaptureMode.cudaStreamCaptureModeThreadLocal
        _check(rt.cudaStreamBeginCapture(self._stream, mode), "cudaStreamBeginCapture")
        try:
            launch(self.stream_handle)
        finally:
            graph = _check(rt.cudaStreamEndCapture(self._stream), "cudaStreamEndCapture")
        executable = _check(rt.cudaGraphInstantiate(graph, 0), "cudaGraphInstantiate")
        self._graphs.append((graph, executable))
        stream = self._stream
        return lambda: _check(rt.cudaGraphLaunch(executable, stream), "cudaGraphLaunch")

    def close(self) -> None:
        for graph, executable in self._graphs:
            self._rt.cudaGraphExecDestroy(executable)
            self._rt.cudaGraphDestroy(graph)
        for pointer in self._allocations:
            self._rt.cudaFree(pointer)
        self._graphs, self._allocations = [], []
        self._rt.cudaStreamDestroy(self._stream)


class TorchMemory:
    """Device memory through PyTorch's caching allocator and a stream of its own."""

    def __init__(self, torch: Any, device_id: int) -> None:
        self._torch = torch
        self._device = torch.device("cuda", device_id)
        self._stream = torch.cuda.Stream(self._device)
        self.stream_handle = int(self._stream.cuda_stream)
        self._buffers: dict[int, Any] = {}
        self._graphs: list[Any] = []

    def make_current(self) -> None:
        self._torch.cuda.set_device(self._device)

    def alloc(self, nbytes: int) -> int:
        buffer = self._torch.empty(nbytes, dtype=self._torch.uint8, device=self._device)
        self._buffers[buffer.data_ptr()] = buffer
        return int(buffer.data_ptr())

    def _bytes(self, array: np.ndarray) -> Any:
        return self._torch.from_numpy(np.ascontiguousarray(array).reshape(-1).view(np.uint8))

    def to_device(self, address: int, array: np.ndarray) -> None:
        with self._torch.cuda.stream(self._stream):
            self._buffers[address][: array.nbytes].copy_(self._bytes(array), non_blocking=True)

    def to_host(self, array: np.ndarray, address: int) -> None:
        with self._torch.cuda.stream(self._stream):
            self._bytes(array).copy_(self._buffers[address][: array.nbytes], non_blocking=True)

    def synchronize(self) -> None:
        self._stream.synchronize()

    def capture(self, launch: Callable[[int], None]) -> Callable[[], None]:
        graph = self._torch.cuda.CUDAGraph()
        with self._torch.cuda.graph(graph, stream=self._stream):
            launch(self.stream_handle)
        self._graphs.append(graph)

        def replay() -> None:
            with self._torch.cuda.stream(self._stream):
                graph.replay()

        return replay

    def close(self) -> None:
        self._graphs.clear()
        self._buffers.clear()


def _torch_with_cuda() -> Any | None:
    try:
        import torch
    except ImportError:
        return None
    return torch if torch.cuda.is_available() else None


def open_device_memory(model: str, device_id: int) -> DeviceMemory:
    """cuda-python where installed, else torch with CUDA; a clear error without either."""
    runtime = _cudart()
    if runtime is not None:
        return CudaPythonMemory(runtime, device_id)
    torch = _torch_with_cuda()
    if torch is not None:
        return TorchMemory(torch, device_id)
    raise TritonError(
        Status.UNAVAILABLE,
        f"unable to load model '{model}': the TensorRT backend needs cuda-python "
        f"(pip install triton-core-tensorrt[gpu]) or PyTorch with CUDA for device memory",
    )


def device_properties(device_id: int) -> tuple[tuple[int, int] | None, str]:
    """(compute capability, name) of a device, or (None, "") when neither library answers."""
    runtime = _cudart()
    if runtime is not None:
        try:
            props = _check(runtime.cudaGetDeviceProperties(device_id), "cudaGetDeviceProperties")
        except TritonError:
            return None, ""
        name = props.name.decode() if isinstance(props.name, bytes) else str(props.name)
        return (int(props.major), int(props.minor)), name.rstrip("\x00")
    torch = _torch_with_cuda()
    if torch is None:
        return None, ""
    major, minor = torch.cuda.get_device_capability(device_id)
    return (major, minor), torch.cuda.get_device_name(device_id)
