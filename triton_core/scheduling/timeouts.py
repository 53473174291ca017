"""``execute_timeout_secs``: an instance whose batch runs too long is marked unhealthy.

The pool tells an :class:`ExecuteWatch` when each batch starts and ends on an instance (a
deque append and pop, from the instance's thread or the event loop); a check on the event
loop, a few times per timeout, finds batches that ran past it. Such a batch fails at once
with UNAVAILABLE, the instance is marked unhealthy and takes no more batches, and it is
asked to :meth:`~triton_core.ModelInstance.interrupt` the call. When the call returns after
all, its results are dropped and the instance is healthy again. A model version whose
instances are all unhealthy is not ready.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from time import monotonic_ns
from typing import TYPE_CHECKING

from triton_core.errors import TritonError, unavailable

if TYPE_CHECKING:
    from triton_core.backends.contract import ModelInstance
    from triton_core.types import InferenceResponse

logger = logging.getLogger(__name__)

Futures = list["asyncio.Future[InferenceResponse]"]

#: checks per timeout period: a batch fails at most a quarter timeout late
_CHECKS_PER_TIMEOUT = 4


@dataclass(slots=True)
class _Running:
    """A batch an instance holds; ``start`` is when it began to run (or to wait its turn)."""

    start: int
    futures: Futures


class ExecuteWatch:
    """The batches each instance of one model version runs, and which instances are hung."""

    def __init__(
        self,
        timeout: float,
        model_name: str,
        instances: Sequence[ModelInstance],
        names: Sequence[str],
        loop: asyncio.AbstractEventLoop,
        abandon: Callable[[int, Futures, TritonError], None],
    ) -> None:
        self.timeout = timeout
        self._timeout_ns = int(timeout * 1e9)
        self._model_name = model_name
        self._instances = list(instances)
        self._names = list(names)
        self._loop = loop
        self._abandon = abandon
        #: per instance: the batches it holds, oldest first
        self._running: list[deque[_Running]] = [deque() for _ in self._instances]
        #: id(futures) of batches that timed out and have not returned -> instance index
        self.abandoned: dict[int, int] = {}
        self.unhealthy = [False] * len(self._instances)
        self.unhealthy_count = 0
        #: batches that ran past the timeout, for the metrics
        self.timeouts = 0
        self._stopped = False
        loop.call_soon_threadsafe(self._check)

    def began(self, index: int, futures: Futures) -> None:
        """A batch was handed to instance ``index`` (any thread)."""
        self._running[index].append(_Running(monotonic_ns(), futures))

    def ended(self, index: int, futures: Futures) -> None:
        """Instance ``index`` answered a batch (any thread); the next one it holds starts now."""
        running = self._running[index]
        for entry in running:
            if entry.futures is futures:
                running.remove(entry)
                break
        if running:
            running[0].start = monotonic_ns()

    def late(self, futures: Futures) -> bool:
        """Whether a returning batch had timed out; if so its instance is healthy again."""
        index = self.abandoned.pop(id(futures), None)
        if index is None:
            return False
        if index not in self.abandoned.values() and self.unhealthy[index]:
            self.unhealthy[index] = False
            self.unhealthy_count -= 1
        logger.warning(
            "model '%s' instance '%s' returned a batch after execute_timeout_secs=%g: its "
            "results were dropped and the instance takes batches again",
            self._model_name,
            self._names[index],
            self.timeout,
        )
        return True

    def stop(self) -> None:
        self._stopped = True

    def unhealthy_error(self, index: int | None = None) -> TritonError:
        """Why a batch is refused: instance ``index`` is unhealthy (None: every one is)."""
        which = f"instance '{self._names[index]}' is" if index is not None else "every instance is"
        error = unavailable(
            f"model '{self._model_name}' is unavailable: {which} unhealthy, in a call that ran "
            f"past execute_timeout_secs={self.timeout:g}"
        )
        error.reason = "BACKEND"
        return error

    def _check(self) -> None:
        if self._stopped:
            return
        now = monotonic_ns()
        for index, running in enumerate(self._running):
            try:
                oldest = running[0]
            except IndexError:  # the instance's thread took it off just now
                continue
            if now - oldest.start > self._timeout_ns and id(oldest.futures) not in self.abandoned:
                self._expire(index, oldest.futures)
        self._loop.call_later(self.timeout / _CHECKS_PER_TIMEOUT, self._check)

    def _expire(self, index: int, futures: Futures) -> None:
        name = self._names[index]
        self.abandoned[id(futures)] = index
        self.timeouts += 1
        if not self.unhealthy[index]:
            self.unhealthy[index] = True
            self.unhealthy_count += 1
        logger.error(
            "model '%s' instance '%s' did not finish a batch within execute_timeout_secs=%g: "
            "the batch failed and the instance is unhealthy until the call returns",
            self._model_name,
            name,
            self.timeout,
        )
        error = unavailable(
            f"model '{self._model_name}' instance '{name}' did not finish executing within "
            f"execute_timeout_secs={self.timeout:g}; the instance is marked unhealthy"
        )
        error.reason = "BACKEND"
        self._abandon(index, futures, error)
        try:
            self._instances[index].interrupt()
        except Exception:
            logger.exception("interrupting model '%s' instance '%s' failed", self._model_name, name)
