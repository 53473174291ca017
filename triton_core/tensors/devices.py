"""Which GPUs this process can use, found without importing any framework."""

from __future__ import annotations

import ctypes
import functools
import os


@functools.cache
def gpu_count() -> int:
    """Number of CUDA devices the driver reports (0 without a driver or a GPU)."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return 0
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            cuda = ctypes.CDLL(name)
        except OSError:
            continue
        count = ctypes.c_int(0)
        if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return 0
        return count.value
    return 0
