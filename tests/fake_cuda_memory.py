"""A CUDA shared-memory region kept in host memory, for tests on machines without a GPU.

It has the interface of a registered CUDA region (``Region`` and ``DeviceMemory``): its
"device addresses" are host addresses, so a test can follow where bytes went (and what an
ONNX Runtime IO binding or a backend would have read and written) and count every copy
between the region and host memory, which a GPU-capable path must not make.
"""

from __future__ import annotations

import ctypes

import numpy as np

from triton_core.shared_memory.region import CudaRegionStatus, RegionKind


class FakeCudaRegion:
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

    def contents(self, offset: int, dtype: type, count: int) -> np.ndarray:
        size = count * np.dtype(dtype).itemsize
        return self.memory[offset : offset + size].view(dtype).copy()

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


class TorchCudaRegion(FakeCudaRegion):
    """The same region in real device memory (a torch allocation on GPU 0), for GPU tests
    of a backend without a client: host copies are still counted, device copies made."""

    def __init__(self, name: str, byte_size: int) -> None:
        import torch

        super().__init__(name, byte_size)
        self._torch = torch
        self.device_memory = torch.zeros(byte_size, dtype=torch.uint8, device="cuda:0")

    def device_pointer(self, offset: int) -> int:
        return int(self.device_memory.data_ptr()) + offset

    def fill(self, offset: int, array: np.ndarray) -> None:
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        self.device_memory[offset : offset + raw.size] = self._torch.from_numpy(raw).cuda(0)

    def contents(self, offset: int, dtype: type, count: int) -> np.ndarray:
        size = count * np.dtype(dtype).itemsize
        return self.device_memory[offset : offset + size].cpu().numpy().view(dtype)

    def view(self, offset: int, byte_size: int) -> memoryview:
        self.to_host.append(byte_size)
        return self.device_memory[offset : offset + byte_size].cpu().numpy().data

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
