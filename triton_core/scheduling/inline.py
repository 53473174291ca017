"""When a batch may run on the event loop instead of going to an instance thread.

Handing a batch to an instance thread and back costs two thread wake-ups and two GIL
hand-overs: tens of microseconds, more than a small model's whole execution (a small MLP
runs in about 15 us on onnxruntime). When every instance of a model is idle, nothing is
queued, the batch is small and the model's recent executions were all short, the pool runs
the batch right away on the loop: the answer leaves sooner and the server spends less CPU.

The loop serves every client, so an inline run is bounded:

- the instances must allow it (:attr:`~triton_core.ModelInstance.may_run_inline`): no
  per-thread state, no waiting on other work of the server; and no host policy binds them
  to CPUs, no rate limiter or execute timeout watches them, no batcher forms batches as
  they free up (dynamic, sequence);
- the batch's input tensors hold at most :data:`MAX_INPUT_BYTES`;
- the model's last :data:`STREAK` executions on threads each took at most the budget,
  ``--inline-execution-budget-us`` (0 turns inline runs off), of CPU time of the thread
  that ran them (wall time would count waits for the GIL, which the loop holds then);
- inline runs (timed by the loop thread's CPU clock too: a busy machine that preempts the
  loop must not count against the model) stop when their average over about 16 goes over
  twice the budget, each counted at most :data:`CLIP` budgets, so that one-off pauses do
  not flip a model between the two ways;
- an inline run that takes more than :data:`OVERRUN_FACTOR` times the budget turns inline
  runs off for that model version for a cool-down that doubles with each overrun (1 s up
  to 60 s), so a request whose execution time depends on its values stalls the loop at
  most once per cool-down.
"""

from __future__ import annotations

import logging
from time import monotonic_ns
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Callable

    from triton_core.types import InferenceRequest

logger = logging.getLogger(__name__)

#: the default of ``--inline-execution-budget-us``
DEFAULT_BUDGET_US: Final = 50
#: a batch whose inputs hold more bytes goes to a thread
MAX_INPUT_BYTES: Final = 1 << 16
#: executions in a row within the budget before a batch may run inline
STREAK: Final = 8
#: an inline run counts at most this many budgets in the average
CLIP: Final = 4
#: an inline run over this many budgets starts a cool-down (one-off pauses such as a
#: garbage collection stay well under it)
OVERRUN_FACTOR: Final = 20
_FIRST_COOL_DOWN_NS: Final = 1_000_000_000
_MAX_COOL_DOWN_NS: Final = 60_000_000_000


class InlineGate:
    """Whether the next batch of one model version may run on the event loop.

    :meth:`record` is called after every execution, from the loop or an instance thread;
    the counters are plain ints, so a racing update only shortens or lengthens a streak.
    """

    __slots__ = (
        "_average_ns",
        "_budget_ns",
        "_clock",
        "_cool_down_ns",
        "_model",
        "_off_until",
        "_streak",
    )

    def __init__(self, budget_us: int, model: str, clock: Callable[[], int] = monotonic_ns) -> None:
        self._budget_ns = budget_us * 1000
        self._model = model
        self._clock = clock
        self._streak = 0
        #: moving average of the CPU time of inline runs
        self._average_ns = 0
        self._off_until = 0
        self._cool_down_ns = _FIRST_COOL_DOWN_NS

    def allows(self, requests: list[InferenceRequest]) -> bool:
        """The batch is small and the recent executions were short (on the loop)."""
        if self._streak < STREAK:
            if self._streak < 0 and self._clock() >= self._off_until:
                self._streak = 0  # the cool-down is over: threads build a new streak
            return False
        size = 0
        for request in requests:
            if request.response_sender is not None:  # decoupled: answers stream from execute
                return False
            for tensor in request.inputs.values():
                size += tensor.data.nbytes
        return size <= MAX_INPUT_BYTES

    def record(self, elapsed_ns: int) -> None:
        """An execution on an instance thread took ``elapsed_ns`` of its CPU time."""
        if self._streak < 0:  # cooling down
            return
        if elapsed_ns <= self._budget_ns:
            if self._streak < STREAK:
                self._streak += 1
        else:
            self._streak = 0

    def record_inline(self, elapsed_ns: int) -> None:
        """An execution on the loop took ``elapsed_ns`` of its CPU time."""
        sample = min(elapsed_ns, CLIP * self._budget_ns)
        average = self._average_ns = self._average_ns + (sample - self._average_ns) // 16
        if elapsed_ns <= OVERRUN_FACTOR * self._budget_ns:
            if average > 2 * self._budget_ns:  # the model got slower: back to the threads
                self._streak = 0
                self._average_ns = 0
            return
        now = self._clock()
        if now < self._off_until + self._cool_down_ns:  # overran again soon after
            self._cool_down_ns = min(2 * self._cool_down_ns, _MAX_COOL_DOWN_NS)
        else:
            self._cool_down_ns = _FIRST_COOL_DOWN_NS
        self._off_until = now + self._cool_down_ns
        self._streak = -(1 << 62)  # no inline run until the cool-down ends
        self._average_ns = 0
        logger.info(
            "model '%s': an execution on the event loop took %d us (budget %d us); "
            "running on instance threads for %d s",
            self._model,
            elapsed_ns // 1000,
            self._budget_ns // 1000,
            self._cool_down_ns // 1_000_000_000,
        )
