"""Responses of decoupled models: any number per request, delivered as they are sent."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

from triton_core.errors import TritonError, internal, invalid_arg
from triton_core.failures import exception_text
from triton_core.types import InferenceRequest, InferenceResponse

_Item = tuple[InferenceResponse | TritonError | None, bool]


class StreamSender:
    """A request's response sender: thread-safe ``send``, consumed on the event loop."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        request: InferenceRequest,
        finish: Callable[
            [InferenceRequest, InferenceResponse, str], InferenceResponse | TritonError
        ],
        version: int,
    ) -> None:
        self._loop = loop
        self._version = version
        self._request = request
        self._finish = finish
        self._queue: asyncio.Queue[_Item] = asyncio.Queue()
        self._final_sent = False
        self.cancelled = False
        #: called once when the client stops waiting (a scheduler that runs steps stops them)
        self.on_cancel: Callable[[], None] | None = None
        #: the instance executing the request, for error messages (set by the instance pool)
        self.instance = ""

    def send(self, response: InferenceResponse | None = None, *, final: bool = False) -> None:
        """Deliver a response (and/or the final flag); callable from any thread."""
        if self._final_sent:
            raise invalid_arg(
                f"model '{self._request.model_name}' sent a response after the final one for "
                f"request '{self._request.id}'"
            )
        if final:
            self._final_sent = True
        item = None if response is None else self._finish(self._request, response, self.instance)
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (item, final))

    def is_cancelled(self) -> bool:
        return self.cancelled

    def cancel(self) -> None:
        """The client stopped waiting. Call on the event loop."""
        self.cancelled = True
        callback, self.on_cancel = self.on_cancel, None
        if callback is not None:
            callback()

    def fail(self, error: TritonError) -> None:
        """End the stream with an error (execute raised). Call on the event loop."""
        if not self._final_sent:
            self._final_sent = True
            self._queue.put_nowait((error, True))

    def on_execute_done(self, future: asyncio.Future[Any]) -> None:
        """A failed ``execute`` ends the stream; a successful one leaves it to ``send``."""
        if future.cancelled():
            return
        error = future.exception()
        if isinstance(error, TritonError):
            self.fail(error)
        elif error is not None:  # the pool makes execute errors TritonErrors: this is a bug
            self.fail(internal(f"model '{self._request.model_name}': {exception_text(error)}"))

    async def responses(self) -> AsyncIterator[InferenceResponse]:
        """Responses in the order they were sent; the last one has ``final=True``.

        A flag-only final send yields an empty final response (no outputs). An error item
        raises its TritonError and ends the stream.
        """
        request = self._request
        while True:
            item, final = await self._queue.get()
            if isinstance(item, TritonError):
                raise item
            if item is None:
                if not final:
                    continue
                item = InferenceResponse(
                    model_name=request.model_name, model_version=self._version, id=request.id
                )
            item.final = final
            yield item
            if final:
                return


def note_instance(requests: list[InferenceRequest], instance: str) -> None:
    """Tell decoupled requests' senders which instance answers them (once per batch)."""
    for request in requests:
        sender = request.response_sender
        if isinstance(sender, StreamSender):
            sender.instance = instance
