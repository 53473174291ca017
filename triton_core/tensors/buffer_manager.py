"""``--buffer-manager-thread-count``: threads that copy large tensor contents, as Triton's.

With N > 0, the large copies of the server's own work run on N threads named
``buffer-manager``: gathering the inputs of a batch into one array (each request's part copied
by a thread of its own; numpy copies without the GIL) and writing large outputs into
shared-memory regions. With 0 (the default) copies run where they did: inline, and the
shared-memory writes on a worker thread. Splitting a batch's outputs costs no copy (views).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from typing import Final

import numpy as np

from triton_core.threads import OffloadThreads

#: a batch's gathered inputs from this size on are copied by the threads
LARGE_COPY_BYTES: Final = 1 << 20

_threads: OffloadThreads | None = None


def set_thread_count(count: int) -> None:
    """Use ``count`` copy threads from now on (0: copy inline)."""
    global _threads
    if count < 0:
        raise ValueError(f"--buffer-manager-thread-count must not be negative, got {count}")
    previous, _threads = _threads, OffloadThreads(count, "buffer-manager") if count else None
    if previous is not None:
        previous.shutdown()


def threads() -> OffloadThreads | None:
    """The copy threads; None when copies run inline."""
    return _threads


def gather(parts: list[np.ndarray]) -> np.ndarray:
    """``np.concatenate(parts, axis=0)``; a large result is copied part by part on the copy
    threads. Raises ValueError where numpy's concatenate would (shapes that do not join)."""
    pool = _threads
    if pool is None or len(parts) < 2 or sum(part.nbytes for part in parts) < LARGE_COPY_BYTES:
        return np.concatenate(parts, axis=0)
    first = parts[0]
    if any(p.ndim != first.ndim or p.shape[1:] != first.shape[1:] for p in parts) or any(
        p.dtype != first.dtype for p in parts
    ):
        return np.concatenate(parts, axis=0)  # numpy decides (and explains a refusal)
    total = sum(part.shape[0] for part in parts)
    joined = np.empty((total, *first.shape[1:]), dtype=first.dtype)
    _copy_parts(pool.executor(), joined, parts)
    return joined


def _copy_parts(executor: ThreadPoolExecutor, joined: np.ndarray, parts: list[np.ndarray]) -> None:
    copies = []
    start = 0
    for part in parts:
        stop = start + part.shape[0]
        copies.append(executor.submit(np.copyto, joined[start:stop], part, casting="no"))
        start = stop
    done, _ = wait(copies)
    for copy in done:
        copy.result()  # a failed copy raises here
