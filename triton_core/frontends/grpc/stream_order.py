"""The order of answers on a ModelStreamInfer stream, as Triton writes them.

Triton queues each request of a stream that is not for a decoupled model (an unknown
model's, or a malformed one's, included) and writes their answers in the order the requests
came, whichever finishes first; a decoupled model's answers go out as they are sent. Here a
request read from the stream reserves its place (:meth:`InOrder.reserve`) and its answer
waits in it until those before it are written.
"""

from __future__ import annotations

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
