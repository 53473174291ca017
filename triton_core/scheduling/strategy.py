"""Custom batching strategies: a plugin decides whether a pending request joins a batch.

This is Triton's custom batching (``TRITONBACKEND_ModelBatchIncludeRequest``) as a plugin
family: the dynamic batcher asks the model's strategy about each candidate request, in queue
order, while it forms a batch. A plugin registers a factory with
``triton_register_batch_strategies``; a model selects it with the config parameter
``batch_strategy`` (and may pass it settings through other parameters)::

    @hookimpl
    def triton_register_batch_strategies(registry):
        registry.add("max_input_bytes", MaxInputBytes)   # MaxInputBytes(config)

Strategies run on the event loop for every candidate: keep ``include`` cheap.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton_core.types import InferenceRequest


class BatchStrategy(ABC):
    """Created once per model version (``factory(config)``); called on the event loop."""

    @abstractmethod
    def new_batch(self) -> Any:
        """State for a batch about to be formed (Triton's ``ModelBatchInitialize``)."""

    @abstractmethod
    def include(self, request: InferenceRequest, state: Any) -> bool:
        """Whether ``request`` joins the batch; may update ``state``.

        Called for each candidate in queue order (requests of another shape are never
        offered). A refusal closes the batch, which is sent at once, as Triton does: the
        refused request and those behind it stay queued, in order, for later batches. The
        first request of a batch always joins (its answer is ignored), so a strategy cannot
        stall the queue. A batch being formed may be abandoned (the batcher waits for more
        requests, then starts again with a fresh ``new_batch()``), so keep ``state`` free
        of side effects. An exception counts as a refusal and is logged.
        """
