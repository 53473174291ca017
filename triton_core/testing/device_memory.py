"""CUDA shared-memory regions for testing a backend's device-tensor path
(``accepts_device_tensors``) without a client.

:class:`HostCudaRegion` keeps its bytes in host memory, for machines without a GPU: it has
the interface of a registered CUDA region (what :class:`~triton_core.DeviceBuffer` s point
into), but its "device addresses" are host addresses, so a test can follow where bytes went
(what a framework would have read and written at those addresses) and count every copy
between the region and host memory, which a device path must not make.
:class:`TorchCudaRegion` is the same over real device memory (a PyTorch allocation), for GPU
tests. Build buffers over either with ``DeviceBuffer(region, offset, ...)``.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from triton_core.shared_memory.region import CudaRegionStatus, RegionKind


class HostCudaRegion:
    """``byte_size`` bytes of host memory standing in for a CUDA region on ``device_id``."""

    kind = RegionKind.CUDA

    def __init__(self, name: str, byte_size: int, device_id: int = 0) -> None:
        self.name = name
        self.byte_size = byte_size
        self.device_id = device_id
        self.users = 0
        self.closing = False
        self.memory = np.zeros(byte_size, np.uint8)
        #: device-to-host and host-to-device copies, in bytes each
        self.to_host: list[int] = []
        self.from_host: list[int] = []
        #: device-to-device copies into the region: (offset, byte_size)
        self.device_copies: list[tuple[int, int]] = []

    @property
    def host_copies(self) -> int:
        return len(self.to_host) + len(self.from_host)

    def fill(self, offset: int, array: np.ndarray) -> None:
        """What a client's ``set_shared_memory_region`` does (not counted)."""
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        self.memory[offset : offset + raw.size] = raw

    def contents(self, offset: int, dtype: Any, count: int) -> np.ndarray:
        """``count`` values of ``dtype`` at ``offset`` (not counted as a copy)."""
        size = count * np.dtype(dtype).itemsize
        values: np.ndarray = self.memory[offset : offset + size].view(dtype)
        return values.copy()

    # -- Region ----------------------------------------------------------------------------

    def check_alive(self) -> None:
        pass

    def view(self, offset: int, byte_size: int) -> memoryview:
        self.to_host.append(byte_size)
        return self.memory[offset : offset + byte_size].copy().data

    def write(self, offset: int, data: np.ndarray) -> None:
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self.from_host.append(raw.size)
        self.memory[offset : offset + raw.size] = raw

    def close(self) -> None:
        pass

    def status(self) -> CudaRegionStatus:
        return CudaRegionStatus(self.name, self.device_id, self.byte_size)

    # -- DeviceMemory ----------------------------------------------------------------------

    def device_pointer(self, offset: int) -> int:
        return int(self.memory.ctypes.data) + offset

    def copy_from_device(self, offset: int, source: int, byte_size: int) -> None:
        assert offset + byte_size <= self.byte_size
        self.device_copies.append((offset, byte_size))
        ctypes.memmove(self.device_pointer(offset), source, byte_size)


class TorchCudaRegion(HostCudaRegion):
    """The same region in real device memory (a torch allocation on GPU 0), for GPU tests
    of a backend without a client: host copies are still counted, device copies made."""

    def __init__(self, name: str, byte_size: int) -> None:
        import torch

        super().__init__(name, byte_size)
        self._torch: Any = torch
        self.device_memory: Any = torch.zeros(byte_size, dtype=torch.uint8, device="cuda:0")

    def device_pointer(self, offset: int) -> int:
        return int(self.device_memory.data_ptr()) + offset

    def fill(self, offset: int, array: np.ndarray) -> None:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        self.device_memory[offset : offset + raw.size] = self._torch.from_numpy(raw).cuda(0)

    def contents(self, offset: int, dtype: Any, count: int) -> np.ndarray:
        size = count * np.dtype(dtype).itemsize
        array: np.ndarray = self.device_memory[offset : offset + size].cpu().numpy()
        return array.view(dtype)

    def view(self, offset: int, byte_size: int) -> memoryview:
        self.to_host.append(byte_size)
        host: np.ndarray = self.device_memory[offset : offset + byte_size].cpu().numpy()
        return host.data

    def copy_from_device(self, offset: int, source: int, byte_size: int) -> None:
        torch = self._torch
        self.device_copies.append((offset, byte_size))
        source_tensor = torch.as_tensor(_DeviceBytes(source, byte_size), device="cuda:0")
        self.device_memory[offset : offset + byte_size].copy_(source_tensor)
        torch.cuda.synchronize(0)


class _DeviceBytes:
    """``byte_size`` bytes at a device address, as a CUDA array interface."""

    def __init__(self, pointer: int, byte_size: int) -> None:
        self.__cuda_array_interface__ = {
            "shape": (byte_size,),
            "typestr": "|u1",
            "data": (pointer, False),
            "version": 3,
            "strides": None,
        }
