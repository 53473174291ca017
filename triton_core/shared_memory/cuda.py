"""CUDA shared memory: device memory a client exported with ``cudaIpcGetMemHandle``.

The CUDA calls go through cuda-python (``cuda.bindings``, NVIDIA's own bindings, the package
``tritonclient.utils.cuda_shared_memory`` itself uses), imported only when a CUDA region is
registered or the server asks whether it can serve them: a server without a GPU or without
the package never loads it. Everything a client sends is checked before any CUDA call: the
handle's length, the device id against the devices present, the byte size against the
registry's limits and then against the real size of the exported allocation.

Instances that accept device tensors (ONNX Runtime's CUDA provider, PyTorch on CUDA) read
inputs and write outputs in the region itself (:mod:`triton_core.tensors.device_tensors`); for every
other backend an input is copied device to host once when the request is resolved, and an
output host to device once when it is written. :data:`HOST_COPIES` counts those copies.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from triton_core.errors import internal, invalid_arg
from triton_core.shared_memory.region import CudaRegionStatus, RegionKind
from triton_core.tensors.devices import gpu_count

logger = logging.getLogger(__name__)

#: ``sizeof(cudaIpcMemHandle_t)``
CUDA_IPC_HANDLE_SIZE: Final = 64
#: Triton's message for a handle of the wrong length (or not base64)
BAD_HANDLE: Final = "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"


@dataclass(slots=True)
class HostCopies:
    """Copies between CUDA regions and host memory since the server started (both ways)."""

    count: int = 0
    byte_size: int = 0

    def add(self, byte_size: int) -> None:
        # one += per copy of a whole tensor; a lost update under threads only skews a count
        self.count += 1
        self.byte_size += byte_size


#: every device-to-host and host-to-device copy of a CUDA region's bytes
HOST_COPIES: Final = HostCopies()


@dataclass(slots=True, frozen=True)
class CudaSupport:
    """Whether this process can open CUDA IPC handles: the runtime and its devices, or why not."""

    runtime: Any = None
    driver: Any = None
    device_count: int = 0
    #: why CUDA regions cannot be registered; empty when they can
    reason: str = ""

    @property
    def available(self) -> bool:
        return not self.reason


@functools.cache
def cuda_support() -> CudaSupport:
    """Probed once: a GPU the driver reports, cuda-python importable, its runtime working."""
    if gpu_count() == 0:
        return CudaSupport(reason="no CUDA device is visible to the server")
    try:
        import cuda.bindings.driver as driver
        import cuda.bindings.runtime as runtime
    except ImportError:
        return CudaSupport(
            reason="the Python package 'cuda-python' is not installed "
            "(pip install 'triton-core[cuda]')"
        )
    error, count = runtime.cudaGetDeviceCount()
    if error != runtime.cudaError_t.cudaSuccess:
        return CudaSupport(reason=f"the CUDA runtime cannot start: {_error_text(runtime, error)}")
    return CudaSupport(runtime, driver, count)


def _error_text(runtime: Any, error: Any) -> str:
    _, text = runtime.cudaGetErrorString(error)
    name = getattr(error, "name", str(error))
    return f"{name} ({text.decode() if isinstance(text, bytes) else text})"


def check_request(name: str, raw_handle: bytes, device_id: int, byte_size: int) -> None:
    """What a register request must be before anything is opened (Triton's messages)."""
    if not name:
        raise invalid_arg("'region name' is necessary to register cuda shared memory region")
    if len(raw_handle) != CUDA_IPC_HANDLE_SIZE:
        raise invalid_arg(BAD_HANDLE)
    if byte_size <= 0:
        raise invalid_arg(f"failed to register shared memory region '{name}': invalid args")
    if device_id < 0:
        raise invalid_arg(
            f"failed to register CUDA shared memory region '{name}': invalid device id {device_id}"
        )


def check_device(name: str, device_id: int, support: CudaSupport) -> None:
    """The server can open CUDA handles, on a device it has."""
    if not support.available:
        raise invalid_arg(
            f"failed to register CUDA shared memory region: '{name}', GPUs not supported: "
            f"{support.reason}"
        )
    if device_id >= support.device_count:
        raise invalid_arg(
            f"failed to register CUDA shared memory region '{name}': device {device_id} is not "
            f"a CUDA device of the server, which has {support.device_count}"
        )


class CudaRegion:
    """A registered CUDA region: ``byte_size`` bytes of device memory on ``device_id``."""

    kind = RegionKind.CUDA

    def __init__(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int, support: CudaSupport
    ) -> None:
        check_request(name, raw_handle, device_id, byte_size)
        check_device(name, device_id, support)
        self.name = name
        self.device_id = device_id
        self.byte_size = byte_size
        self.users = 0
        self.closing = False
        self._runtime = support.runtime
        self._driver = support.driver
        self._pointer = self._open(raw_handle)
        try:
            self._check_allocation()
        except BaseException:
            self.close()
            raise

    # -- opening and closing -------------------------------------------------------------

    def _open(self, raw_handle: bytes) -> int:
        runtime = self._runtime
        self._set_device()
        handle = runtime.cudaIpcMemHandle_t()
        ctypes.memmove(handle.getPtr(), raw_handle, CUDA_IPC_HANDLE_SIZE)
        error, pointer = runtime.cudaIpcOpenMemHandle(
            handle, runtime.cudaIpcMemLazyEnablePeerAccess
        )
        if error != runtime.cudaError_t.cudaSuccess:
            # the details go to the log; the client gets Triton's generic answer
            logger.error("failed to open CUDA IPC handle: %s", _error_text(runtime, error))
            raise invalid_arg("failed to register shared memory region: invalid args")
        return int(pointer)

    def _check_allocation(self) -> None:
        """``byte_size`` fits in the exported allocation (from the handle's address on)."""
        driver = self._driver
        error, base, size = driver.cuMemGetAddressRange(self._pointer)
        if error != driver.CUresult.CUDA_SUCCESS:
            logger.error("no CUDA address range for region '%s': %s", self.name, error)
            raise self._invalid_args()
        if self.byte_size > int(base) + int(size) - self._pointer:
            raise self._invalid_args()

    def _invalid_args(self) -> Exception:
        return invalid_arg(f"failed to register shared memory region '{self.name}': invalid args")

    def close(self) -> None:
        pointer, self._pointer = self._pointer, 0
        if not pointer:
            return
        runtime = self._runtime
        self._set_device()
        (error,) = runtime.cudaIpcCloseMemHandle(pointer)
        if error != runtime.cudaError_t.cudaSuccess:
            logger.error(
                "failed to close CUDA IPC handle of region '%s': %s",
                self.name,
                _error_text(runtime, error),
            )

    # -- use -------------------------------------------------------------------------------

    def check_alive(self) -> None:
        # device memory cannot be truncated; only an unregistered region is gone
        if not self._pointer:
            raise internal(f"shared memory region '{self.name}' is closed")

    def view(self, offset: int, byte_size: int) -> memoryview:
        """A host copy of ``[offset, offset + byte_size)``: one device-to-host copy."""
        host = np.empty(byte_size, np.uint8)
        if byte_size:
            self._copy(host.ctypes.data, self._pointer + offset, byte_size, "DeviceToHost")
            HOST_COPIES.add(byte_size)
        return host.data

    def write(self, offset: int, data: np.ndarray | memoryview) -> None:
        """``data`` (host memory, row-major) copied to ``offset``: one host-to-device copy."""
        source = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        if source.nbytes:
            self._copy(self._pointer + offset, source.ctypes.data, source.nbytes, "HostToDevice")
            HOST_COPIES.add(source.nbytes)

    def device_pointer(self, offset: int) -> int:
        """The device address of byte ``offset`` (bounds already checked)."""
        self.check_alive()
        return self._pointer + offset

    def copy_from_device(self, offset: int, source: int, byte_size: int) -> None:
        """``byte_size`` bytes at device address ``source`` copied to ``offset``, finished
        when this returns (a device-to-device copy needs no wait on the host otherwise)."""
        self.check_alive()
        self._copy(self._pointer + offset, source, byte_size, "DeviceToDevice")
        (error,) = self._runtime.cudaDeviceSynchronize()
        if error != self._runtime.cudaError_t.cudaSuccess:
            raise internal(
                f"failed to copy {byte_size} bytes to CUDA shared memory region "
                f"'{self.name}': {_error_text(self._runtime, error)}"
            )

    def _copy(self, destination: int, source: int, count: int, direction: str) -> None:
        runtime = self._runtime
        self._set_device()
        kind = getattr(runtime.cudaMemcpyKind, f"cudaMemcpy{direction}")
        (error,) = runtime.cudaMemcpy(destination, source, count, kind)
        if error != runtime.cudaError_t.cudaSuccess:
            raise internal(
                f"failed to copy {count} bytes {'from' if direction == 'DeviceToHost' else 'to'} "
                f"CUDA shared memory region '{self.name}': {_error_text(runtime, error)}"
            )

    def _set_device(self) -> None:
        # the current device is per thread: requests reach regions from several threads
        (error,) = self._runtime.cudaSetDevice(self.device_id)
        if error != self._runtime.cudaError_t.cudaSuccess:
            raise internal(
                f"failed to use CUDA device {self.device_id} for shared memory region "
                f"'{self.name}': {_error_text(self._runtime, error)}"
            )

    def status(self) -> CudaRegionStatus:
        return CudaRegionStatus(self.name, self.device_id, self.byte_size)
