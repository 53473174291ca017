"""Thread pools the frontends and the core hand work to, named so that an operator sees them.

``--http-thread-count`` (and SageMaker's, Vertex AI's), ``--grpc-infer-thread-count`` and
``--buffer-manager-thread-count`` size these pools. Each starts its threads on first use, so a
pool whose work never comes (small requests stay on the event loop) costs nothing.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final, TypeVar

T = TypeVar("T")

#: Linux's prctl option that names the calling thread (15 bytes and a NUL at most)
_PR_SET_NAME: Final = 15
_NAME_BYTES: Final = 15


@functools.cache
def _libc() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    except OSError:
        return None


def name_native_thread(name: str) -> None:
    """Give the calling thread ``name`` where the system shows it (``top -H``, /proc/*/task/*/comm);
    nothing where it cannot."""
    libc = _libc()
    prctl = getattr(libc, "prctl", None)
    if prctl is not None:
        prctl(_PR_SET_NAME, name.encode()[:_NAME_BYTES], 0, 0, 0)


class OffloadThreads:
    """At most ``count`` threads named ``name``, started when work first comes."""

    __slots__ = ("_executor", "count", "name")

    def __init__(self, count: int, name: str) -> None:
        if count < 1:
            raise ValueError(f"{name}: a thread pool needs at least 1 thread, got {count}")
        self.count = count
        self.name = name
        self._executor: ThreadPoolExecutor | None = None

    def executor(self) -> ThreadPoolExecutor:
        executor = self._executor
        if executor is None:
            executor = self._executor = ThreadPoolExecutor(
                self.count,
                thread_name_prefix=self.name,
                initializer=name_native_thread,
                initargs=(self.name,),
            )
        return executor

    def run(self, function: Callable[..., T], *args: Any) -> asyncio.Future[T]:
        """``function(*args)`` in one of the threads, as a future of the running loop."""
        return asyncio.get_running_loop().run_in_executor(self.executor(), function, *args)

    def shutdown(self) -> None:
        """Let the threads end once their work is done (they are started again on use)."""
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)
