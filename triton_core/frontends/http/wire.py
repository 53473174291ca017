"""What both request cycles of the HTTP/1.1 protocol write with: status lines, a corked
transport (one system call per answer) and the flow control between a connection and the
request answered on it."""

from __future__ import annotations

import asyncio
import http
from typing import Any, Final


def _status_line(status: int) -> bytes:
    try:
        phrase = http.HTTPStatus(status).phrase.encode()
    except ValueError:
        phrase = b""
    return b"HTTP/1.1 %d %s\r\n" % (status, phrase)


#: the status line of every status an answer may have
STATUS_LINE: Final = {status: _status_line(status) for status in range(100, 600)}

CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"

#: answers up to this size are joined into one buffer; larger ones are written in parts
JOIN_LIMIT: Final = 1 << 16


def nbytes(part: bytes | memoryview) -> int:
    return len(part) if type(part) is bytes else memoryview(part).nbytes


class CorkedTransport:
    """A transport whose writes leave together at the end of the loop turn they were made in."""

    __slots__ = ("_loop", "_pending", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            self._loop.call_soon(self.flush)
        self._pending.append(data)

    def write_whole(self, data: bytes) -> None:
        """Send a whole answer at once: nothing else of this turn needs to go with it."""
        if self._pending:
            self._pending.append(data)
            self.flush()
        elif not self._transport.is_closing():
            self._transport.write(data)

    def writelines(self, lines: Any) -> None:
        for data in lines:
            self.write(data)

    def write_parts(self, parts: list[bytes | memoryview]) -> None:
        """Send a whole answer as its parts, in one system call where the transport can."""
        self.flush()
        if not self._transport.is_closing():
            self._transport.writelines(parts)

    def flush(self) -> None:
        """Send what was written so far (called at the end of the loop turn)."""
        if not self._pending:
            return
        data = self._pending[0] if len(self._pending) == 1 else b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def is_closing(self) -> bool:
        return self._transport.is_closing()

    def get_write_buffer_size(self) -> int:
        return self._transport.get_write_buffer_size() + sum(map(len, self._pending))

    def close(self) -> None:
        self.flush()
        self._transport.close()

    def abort(self) -> None:
        self._pending.clear()
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class FlowControl:
    """Whether a connection reads and whether its answers may be written.

    Reading pauses while a request's body waits for its app, or requests wait behind the
    one answered; an app's ``send`` waits while the transport's write buffer is full.
    """

    __slots__ = ("_transport", "_writable", "read_paused", "write_paused")

    def __init__(self, transport: asyncio.Transport | CorkedTransport) -> None:
        self._transport = transport
        self.read_paused = False
        self.write_paused = False
        self._writable = asyncio.Event()
        self._writable.set()

    async def drain(self) -> None:
        """Return once the transport takes writes again."""
        await self._writable.wait()

    def pause_reading(self) -> None:
        if not self.read_paused:
            self.read_paused = True
            self._transport.pause_reading()

    def resume_reading(self) -> None:
        if self.read_paused:
            self.read_paused = False
            self._transport.resume_reading()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._writable.clear()

    def resume_writing(self) -> None:
        self.write_paused = False
        self._writable.set()
