"""Custom batching strategies: a plugin decides whether a pending request joins a batch.

This is Triton's custom batching (``TRITONBACKEND_ModelBatchIncludeRequest``) as a plugin
family: the dynamic batcher asks the model's strategy about each candidate request, in queue
order, while it forms a batch.
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
        """Whether ``request`` joins the batch; may update ``state``. A request that does not
        join stays queued, in order, for a later batch. The first request of a batch always
        joins, so a strategy cannot stall the queue."""
