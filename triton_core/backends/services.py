"""What backends and schedulers may ask of the server: one narrow protocol.

A model that calls other models (a Python model's BLS calls, an ensemble's steps) or manages
them (``pb_utils.load_model``) gets :class:`ModelServices` as ``ModelContext.server`` and
``SchedulerContext.server``, not the concrete :class:`~triton_core.server.core.Server`: plugins see
only what they may call, and the core's layers below the server do not depend on it. A test
checks that the real ``Server`` implements every method with a compatible signature.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from triton_core.backends.streaming import ResponsePool
    from triton_core.types import InferenceRequest, InferenceResponse


class ModelServices(Protocol):
    """Inference of other models and model management, as a running model may ask for them.

    Errors are :class:`~triton_core.TritonError` values naming the model.
    """

    async def infer(self, request: InferenceRequest, *, nested: bool = False) -> InferenceResponse:
        """Run ``request`` through its model. ``nested``: made on behalf of a request already
        accepted (it still runs while the server drains at shutdown)."""
        ...

    def infer_stream(
        self, request: InferenceRequest, *, nested: bool = False, pool: ResponsePool | None = None
    ) -> AsyncIterator[InferenceResponse]:
        """Every response of ``request`` (a decoupled model's several), as they come."""
        ...

    def model_ready(self, name: str, version: int = -1) -> bool:
        """Whether the model (version) is ready."""
        ...

    @property
    def requests_in_flight(self) -> int:
        """Clients' inference requests accepted and not answered yet, on every model (not
        the requests models make on their behalf: BLS calls, ensemble steps). A backend may
        wait actively for an answer when its batch is all the server has to do."""
        ...

    @property
    def nested_requests_in_flight(self) -> int:
        """Requests models made on behalf of others (BLS calls, ensemble steps) and not
        answered yet."""
        ...

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload a model (explicit model-control mode)."""
        ...

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        """Unload a model (explicit model-control mode)."""
        ...
