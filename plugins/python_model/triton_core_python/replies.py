"""Reply channels: sockets that carry the answers of one BLS call at a time to the thread
that waits for it.

Answers on the shared *events* socket wake the stub's events thread, which then wakes the
thread waiting for them: two wake-ups, each costing tens of microseconds. A thread that
waits for its own call (``exec()``, iterating ``exec(decoupled=True)``) instead takes a
reply channel from the stub's :class:`ReplyPool`, names it in its ``BLS_REQUEST`` and reads
the answers from it itself; the events thread sleeps on. The stub makes a channel when the
pool has none free (a socket pair; the server's end goes over *events* in a
``REPLY_CHANNEL`` message before the first call that names it) and takes it back once the
call's final answer is read, so one channel carries one call's answers at a time.

The server writes to a channel from its event loop through a :class:`ReplyOutbox`, which
never blocks the loop: a decoupled call's answers that the model reads slowly wait in the
outbox once the socket is full.

A channel is a :class:`~triton_core_python.ipc.Channel` of its own: it announces the
sender's segments itself, and the frees that ride on it are the same as on any other.

Imported by the stub process: the standard library and numpy only.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
import threading
from typing import Any

from triton_core_python import ipc

#: reply channels one stub keeps at most; calls beyond them are answered on *events*
POOL_LIMIT = 8


class Reply(ipc.Channel):
    """The stub's end of a reply channel."""

    def __init__(self, ident: int, sock: socket.socket, memory: ipc.Memory) -> None:
        super().__init__(sock, memory, 1 + ident)
        #: the channel's id, named in BLS_REQUEST
        self.ident = ident


class ReplyPool:
    """The stub's reply channels: taken by a thread for one call, given back after it."""

    def __init__(self, memory: ipc.Memory, events: ipc.Channel, limit: int = POOL_LIMIT) -> None:
        self._memory = memory
        self._events = events
        self._limit = limit
        self._free: list[Reply] = []
        self._made = 0
        self._lock = threading.Lock()

    def take(self) -> Reply | None:
        """A channel for one call (None: all are in use; answer on *events*). Raises
        :class:`~triton_core_python.ipc.PeerClosed` when the server is gone."""
        with self._lock:
            if self._free:
                return self._free.pop()
            if self._made >= self._limit:
                return None
            self._made += 1
            ident = self._made
        ours, theirs = ipc.channel_pair()
        try:
            self._events.send(ipc.REPLY_CHANNEL, ident, None, None, [theirs.fileno()])
        finally:
            theirs.close()
        return Reply(ident, ours, self._memory)

    def give(self, reply: Reply) -> None:
        """The call's final answer is read: the channel is free again."""
        with self._lock:
            self._free.append(reply)

    def abandon(self, reply: Reply) -> None:
        """Its caller stopped reading before the final answer (a response iterator
        dropped): a thread reads the rest, freeing their shared memory, then gives the
        channel back."""
        threading.Thread(target=self._drain, args=(reply,), name="stub-reply", daemon=True).start()

    def _drain(self, reply: Reply) -> None:
        while True:
            try:
                message = reply.recv()
            except ipc.PeerClosed:
                return
            assert message is not None
            self._memory.take_block(message.block)  # dropped at once: its free is queued
            if message.kind == ipc.BLS_RESPONSE and message.body[0]:
                self.give(reply)
                return


class ReplyOutbox:
    """The server's end of a reply channel; sends never block the event loop."""

    def __init__(self, channel: ipc.Channel, loop: asyncio.AbstractEventLoop | None) -> None:
        self.channel = channel
        #: None: no event loop (tests that drive a process directly): sends block
        self._loop = loop
        #: encoded messages waiting for room in the socket, in order
        self._held: collections.deque[tuple[bytes, list[int]]] = collections.deque()
        self._closed = False

    def send(self, kind: int, ident: int, body: Any, block: Any) -> None:
        """Send one message, or hold it until the socket has room; raises
        :class:`~triton_core_python.ipc.PeerClosed` when the stub is gone."""
        channel = self.channel
        with channel.lock:
            if self._closed:
                raise ipc.PeerClosed("reply channel closed")
            message, fds = channel.encode(kind, ident, body, block)
            if self._loop is None:
                channel.transmit(message, fds)
                return
            if not self._held:
                try:
                    channel.transmit(message, fds, nonblocking=True)
                    return
                except BlockingIOError:
                    self._loop.add_writer(channel.fileno(), self._flush)
            self._held.append((message, fds))

    def _flush(self) -> None:
        """The socket has room again (on the loop): send what waits, in order."""
        channel, held = self.channel, self._held
        with channel.lock:
            try:
                while held:
                    message, fds = held[0]
                    channel.transmit(message, fds, nonblocking=True)
                    held.popleft()
            except BlockingIOError:
                return
            except ipc.PeerClosed:
                held.clear()
            assert self._loop is not None
            self._loop.remove_writer(channel.fileno())

    def close(self) -> None:
        """Close the server's end (any thread); what is held is dropped with the stub."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and not _on_loop(loop):
            with contextlib.suppress(RuntimeError):  # closed meanwhile
                loop.call_soon_threadsafe(self.close)
                return
        with self.channel.lock:
            if self._closed:
                return
            self._closed = True
            if self._held and loop is not None and not loop.is_closed():
                with contextlib.suppress(ValueError, OSError):
                    loop.remove_writer(self.channel.fileno())
            self._held.clear()
        self.channel.close()


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
