"""The order of answers on a ModelStreamInfer stream, as Triton writes them.

Triton queues each request of a stream that is not for a decoupled model (an unknown
model's, or a malformed one's, included) and writes their answers in the order the requests
came, whichever finishes first; a decoupled model's answers go out as they are sent. Here a
request read from the stream reserves its place (:meth:`InOrder.reserve`) and its answer
waits in it until those before it are written. :class:`StreamRoom` bounds how many requests
of one stream are in flight.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from typing import Any

from triton_core.frontends.common import parse_version
from triton_core.frontends.server_api import ServerAPI


def answered_in_order(server: ServerAPI, model_name: str, model_version: str) -> bool:
    """Whether a stream request's answer waits for those before it: unless its model is a
    decoupled one (the lookup is a dict's; an unknown model is answered in order too)."""
    try:
        return not server.model_is_decoupled(model_name, parse_version(model_version))
    except Exception:  # the request's own answer says what is wrong
        return True


class Place:
    """What one request answers, held until the answers before it are out."""

    __slots__ = ("items", "ready")

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.ready = False


class InOrder:
    """The places of a stream's ordered requests, oldest first; ``put`` writes an item."""

    def __init__(self, put: Callable[[Any], None]) -> None:
        self._put = put
        self._places: deque[Place] = deque()

    def reserve(self) -> Place:
        place = Place()
        self._places.append(place)
        return place

    def complete(self, place: Place) -> None:
        """``place`` has all its answer: write it, and those after it that wait, in order."""
        place.ready = True
        places = self._places
        while places and places[0].ready:
            for item in places.popleft().items:
                self._put(item)


class StreamRoom:
    """Bounds the requests of one stream that are read and not yet answered in full.

    A request holds its room from its read until it is done and every answer it produced
    is written, so neither the work in flight nor the answers waiting for a client that
    does not read grow past ``capacity``: at the bound the stream is not read, and HTTP/2
    flow control holds the client back.
    """

    __slots__ = ("_free", "capacity", "taken")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.taken = 0
        self._free = asyncio.Event()
        self._free.set()

    async def take(self) -> Ticket:
        """Wait for room for one more request."""
        while self.taken >= self.capacity:
            self._free.clear()
            await self._free.wait()
        self.taken += 1
        return Ticket(self)

    def give_back(self) -> None:
        self.taken -= 1
        self._free.set()


class Ticket:
    """One request's room: given back once it is done and its answers are written."""

    __slots__ = ("_done", "_room", "unwritten")

    def __init__(self, room: StreamRoom) -> None:
        self._room: StreamRoom | None = room
        self._done = False
        self.unwritten = 0

    def written(self) -> None:
        """One of its answers is written (or dropped)."""
        self.unwritten -= 1
        self._release_if_finished()

    def done(self) -> None:
        """It produces no more answers."""
        self._done = True
        self._release_if_finished()

    def _release_if_finished(self) -> None:
        if self._done and self.unwritten == 0 and self._room is not None:
            self._room.give_back()
            self._room = None
