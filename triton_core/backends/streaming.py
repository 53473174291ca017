"""Responses of decoupled models: any number per request, delivered as they are sent."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

from triton_core.errors import TritonError, internal, invalid_arg
from triton_core.plugins.failures import exception_text
from triton_core.types import InferenceRequest, InferenceResponse

_Item = tuple[InferenceResponse | TritonError | None, bool]


class ResponsePool:
    """Room for a request's responses that were produced but are not written yet
    (``--grpc-max-response-pool-size``, Triton's per-request gRPC response queue).

    Each response the stream yields holds one credit from the time it is sent until its
    consumer hands it to the writer (or drops it) and calls :meth:`release`. A producer
    off the event loop waits in :meth:`acquire` while ``limit`` credits are held, as Triton
    blocks a backend's thread that allocates one response too many. A producer on the event
    loop never waits: it calls :meth:`take`, then holds itself back with :meth:`when_room`
    or :meth:`room`. Once closed (the request ended, the client went away) nobody waits any
    more. ``release``, ``close`` and ``when_room`` are called on the event loop.
    """

    __slots__ = ("_changed", "_closed", "_held", "_waiting_for_room", "limit")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a response pool holds at least 1 response, got {limit}")
        self.limit = limit
        self._held = 0
        self._closed = False
        self._changed = threading.Condition(threading.Lock())
        #: callbacks of producers on the event loop, run once the held responses fit
        self._waiting_for_room: list[Callable[[], None]] = []

    @property
    def held(self) -> int:
        return self._held

    def acquire(self) -> None:
        """Take a credit, first waiting (this thread) while ``limit`` are held."""
        changed = self._changed
        with changed:
            while self._held >= self.limit and not self._closed:
                changed.wait()
            self._held += 1

    def take(self) -> None:
        """Take a credit without waiting (the event loop's producers, a flag-only final)."""
        with self._changed:
            self._held += 1

    def has_room(self) -> bool:
        """Whether what is held fits the limit (or nobody needs to wait any more)."""
        return self._held <= self.limit or self._closed

    def when_room(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once :meth:`has_room` (at once if it has)."""
        with self._changed:
            if not (self._held <= self.limit or self._closed):
                self._waiting_for_room.append(callback)
                return
        callback()

    async def room(self) -> None:
        """Return once :meth:`has_room` (on the event loop)."""
        if self.has_room():
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()

        def wake() -> None:
            if not future.done():
                future.set_result(None)

        self.when_room(wake)
        await future

    def release(self) -> None:
        """A response was written (or dropped): its credit is free again."""
        with self._changed:
            self._held = max(self._held - 1, 0)
            self._changed.notify()
            ready = self._held <= self.limit and self._waiting_for_room
            if ready:
                ready, self._waiting_for_room = self._waiting_for_room, []
        if ready:
            for callback in ready:
                callback()

    def close(self) -> None:
        """Nobody waits any more: the request ended or its client went away."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()
            ready, self._waiting_for_room = self._waiting_for_room, []
        for callback in ready:
            callback()


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
        pool: ResponsePool | None = None,
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
        self._cancel_listeners: list[Callable[[], None]] | None = None
        #: bounds the responses sent but not yet written (``--grpc-max-response-pool-size``)
        self.pool = pool
        #: made on the loop (by the server), whose thread this is
        self._loop_thread = threading.get_ident()

    def send(self, response: InferenceResponse | None = None, *, final: bool = False) -> None:
        """Deliver a response (and/or the final flag); callable from any thread.

        With a :class:`ResponsePool`, a response sent off the event loop first waits while
        the pool is full; on the loop, and for a flag-only final, it never waits.
        """
        if self._final_sent:
            raise invalid_arg(
                f"model '{self._request.model_name}' sent a response after the final one for "
                f"request '{self._request.id}'"
            )
        if final:
            self._final_sent = True
        pool = self.pool
        if pool is not None and (response is not None or final):  # what responses() yields
            if response is None or threading.get_ident() == self._loop_thread:
                pool.take()
            else:
                pool.acquire()
        item = None if response is None else self._finish(self._request, response, self.instance)
        # from the loop itself no wake-up is needed (call_soon_threadsafe writes one each time)
        if threading.get_ident() == self._loop_thread:
            self._loop.call_soon(self._queue.put_nowait, (item, final))
        else:
            self._loop.call_soon_threadsafe(self._queue.put_nowait, (item, final))

    def is_cancelled(self) -> bool:
        return self.cancelled

    def add_cancel_listener(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` once the client stops waiting (at once if it has), as a
        backend whose model runs elsewhere tells it without being asked. Call on the
        event loop; listeners run there, from :meth:`cancel`."""
        if self.cancelled:
            listener()
        elif self._cancel_listeners is None:
            self._cancel_listeners = [listener]
        else:
            self._cancel_listeners.append(listener)

    def cancel(self) -> None:
        """The client stopped waiting. Call on the event loop."""
        if self.cancelled:
            return
        self.cancelled = True
        if self.pool is not None:
            self.pool.close()  # a producer waiting for room wakes and sees the cancel
        callback, self.on_cancel = self.on_cancel, None
        if callback is not None:
            callback()
        listeners, self._cancel_listeners = self._cancel_listeners, None
        for listener in listeners or ():
            listener()

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
