"""How the C allocator returns freed memory to the system, for large tensors.

glibc's malloc gives freed memory at the top of its heaps back to the system once more than
its trim threshold is free (by default twice its mmap threshold, at most 64 MiB). A server
that receives and answers tensors of many MiB then allocates fresh pages for nearly every
request, and faulting them in (zeroed, one page at a time) costs more than copying the tensor
itself. ``--memory-trim-threshold`` keeps that much freed memory for reuse instead: the
server's resident memory stays up to that much above what it uses. Processes the server
starts (Python model stubs) get the same through glibc's ``MALLOC_*_`` variables, unless
those are set already.

Other C libraries (musl, macOS) are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
from typing import Final

log = logging.getLogger(__name__)

#: mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD: Final = -1
_M_MMAP_THRESHOLD: Final = -3
#: the largest mmap threshold glibc accepts on 64-bit systems (half its heap size)
_MAX_MMAP_THRESHOLD: Final = 32 << 20
#: freed memory kept for reuse, by default: a few large tensors' worth
DEFAULT_TRIM_THRESHOLD: Final = 256 << 20


def keep_freed_memory(trim_threshold: int) -> bool:
    """Keep up to ``trim_threshold`` bytes of freed memory for reuse (0: the C library's
    default behaviour); allocations up to 32 MiB then come from the heap, not fresh pages.

    Returns whether the C library took the setting (glibc only).
    """
    if trim_threshold <= 0:
        return False
    mallopt = _mallopt()
    if mallopt is None:
        log.info("--memory-trim-threshold applies to glibc's malloc only: left as it is")
        return False
    mmap_threshold = min(_MAX_MMAP_THRESHOLD, trim_threshold)
    trim_threshold = min(trim_threshold, 2**31 - 1)
    # processes started from here (Python model stubs) start with the same, unless told
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", str(mmap_threshold))
    os.environ.setdefault("MALLOC_TRIM_THRESHOLD_", str(trim_threshold))
    return bool(mallopt(_M_MMAP_THRESHOLD, mmap_threshold)) and bool(
        mallopt(_M_TRIM_THRESHOLD, trim_threshold)
    )


def _mallopt() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        gnu_get_libc_version = libc.gnu_get_libc_version  # glibc has it, others do not
    except (OSError, AttributeError):
        return None
    del gnu_get_libc_version
    mallopt = libc.mallopt
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return mallopt
