"""Messages between the server and a stub process over a Unix ``SOCK_SEQPACKET`` socket.

Each instance has two sockets: *control* (the server's instance thread sends ``EXECUTE``
and waits for ``EXECUTE_DONE``; also init and finalize) and *events* (everything that may
happen at any time: decoupled responses, BLS calls, cancellation queries, logs, frees),
and the stub may add reply channels that carry the answers of one BLS call at a time
(:mod:`.replies`).
A seqpacket socket keeps message boundaries, so one ``sendmsg`` is one message and one
``recvmsg`` reads it whole.

A message is ``marshal`` of ``(kind, ident, body, block, frees, announced, dropped, extra)``:

* ``kind``/``ident``: what it is and which call it answers;
* ``body``: plain data (tuples, lists, dicts, str, int, float, bytes, None);
* ``block``: ``(segment, offset, length)`` of the sender's shared memory holding the
  message's tensors, the tensors' bytes themselves when they are few
  (:data:`~triton_core_python.wire.INLINE_BYTES`), or None;
* ``frees``: one segment id per block of the *receiver's* arena that the sender is done with;
* ``announced``: ``(segment, size)`` of sender segments whose descriptors ride along
  (``SCM_RIGHTS``), in order; a segment is announced on each socket before a message on
  that socket refers to it;
* ``dropped``: sender segments that no longer exist (the receiver forgets its mapping);
* ``extra``: how many more descriptors ride along after the announced segments' ones, for
  the message's body to use (clients' shared-memory regions, see :mod:`.regions`).

A message too big for the socket goes through shared memory itself (``INDIRECT``).

Imported by the stub process: the standard library and numpy only.
"""

from __future__ import annotations

import array
import contextlib
import marshal
import os
import socket
import threading
from typing import Any, NamedTuple

import numpy as np

from triton_core_python.shm import Arena, Leases, PeerSegments

# message kinds -------------------------------------------------------------------------------
INDIRECT = 0  # the real message is in the block
INIT = 1  # server -> stub (control): model and instance settings
READY = 2  # stub -> server (control): initialize() returned: (pid, has is_ready())
INIT_FAILED = 3  # stub -> server (control): (message,)
EXECUTE = 4  # server -> stub (control): a batch of requests
EXECUTE_DONE = 5  # stub -> server (control): responses, or the batch's error
FINALIZE = 6  # server -> stub (control)
FINALIZED = 7  # stub -> server (control)
RESPONSE = 10  # stub -> server (events): a decoupled response and/or the final flag
BLS_REQUEST = 11  # stub -> server (events)
BLS_RESPONSE = 12  # server -> stub (events)
BLS_CANCEL = 13  # stub -> server (events): the model stopped iterating a decoupled BLS call
CANCEL_QUERY = 14  # stub -> server (events): is this request cancelled?
#: a non-decoupled request's key in a CANCEL_QUERY: (batch ident << BATCH_SHIFT) | position
BATCH_SHIFT = 32
CANCEL_ANSWER = 15  # server -> stub (events)
LOG = 16  # stub -> server (events): (level, message, filename, line)
FREE = 17  # either way (events): only frees, when no other message is due
METRIC = 20  # stub -> server (events): custom metrics; ident 0: no answer expected
METRIC_ANSWER = 21  # server -> stub (events): (ok, value or message)
CONTROL = 18  # stub -> server (events): model management (is_model_ready ...)
CONTROL_ANSWER = 19  # server -> stub (events)
REGIONS_CLOSED = 22  # server -> stub (events): (idents,) of clients' regions to let go
REGIONS = 23  # server -> stub (control): clients' regions announced ahead of a batch
#: server -> stub (events): a response sent with a room ident fits its request's pool
#: (``--grpc-max-response-pool-size``): the model's ``send`` may return
RESPONSE_ROOM = 24
READINESS_QUERY = 25  # server -> stub (events): call the model's is_ready()
READINESS_ANSWER = 26  # stub -> server (events): (ready, error message or None)
#: stub -> server (events): a socket of the stub's own for the answers of the BLS calls that
#: name it (ident: its id; its descriptor rides along), see :mod:`.replies`
REPLY_CHANNEL = 27
#: server -> stub (events): the client of a watched request stopped waiting (ident: the
#: request's watch token, which the batch that carried the request named)
CANCELLED = 28

#: largest message sent inline; bigger ones go through shared memory (seqpacket messages
#: are bounded by the socket buffer, ~200 KiB by default)
#: in ``EXECUTE_DONE``: the answer for a request released with RESCHEDULE (it runs again)
RESCHEDULED = -1

INLINE_LIMIT = 48 * 1024
#: descriptors one message may carry: announced segments and clients' regions together
_MAX_FDS = 64
_ANCILLARY = socket.CMSG_SPACE(_MAX_FDS * 4)
# plain ints: the socket module's flags are enums, slow to combine on every message
_DONTWAIT = int(socket.MSG_DONTWAIT)
_TRUNCATED = int(socket.MSG_TRUNC) | int(socket.MSG_CTRUNC)


#: a sent message's block: (segment, offset, length) in the sender's arena, the tensors'
#: bytes themselves, or None
OutBlock = tuple[int, int, int] | bytearray | bytes | None


class PeerClosed(ConnectionError):
    """The process at the other end is gone (or closed its socket)."""


class Message(NamedTuple):
    kind: int
    ident: int
    body: Any
    #: (segment, offset, length) of the sender's shared memory, or the bytes themselves
    block: tuple[int, int, int] | bytes | None
    #: the extra descriptors the message carried (the receiver owns them)
    fds: tuple[int, ...] = ()


class Memory:
    """One side's shared memory: its arena, the peer's segments, and its leases on them."""

    def __init__(self, arena: Arena) -> None:
        self.arena = arena
        self.peers = PeerSegments()
        self.leases = Leases()

    def take_block(self, block: tuple[int, int, int] | bytes | None) -> Any:
        """The uint8 array of a received message's block (None: no block).

        Every tensor of the message is a view of it. A few bytes came in the message itself
        and are copied into a writable array (a model may write into its inputs); a block in
        shared memory is viewed in place and freed when the array dies.
        """
        if block is None:
            return None
        if type(block) is bytes:  # wire.Packer.write put them inline
            return np.frombuffer(bytearray(block), np.uint8)
        segment_id, offset, length = block
        owner = self.peers.block(segment_id, offset, length)
        self.leases.hold(owner, segment_id)
        return owner

    def close(self) -> None:
        self.arena.close()
        self.peers.clear()


class Channel:
    """One socket of an instance. ``send`` is thread-safe; ``recv`` has one reader."""

    def __init__(self, sock: socket.socket, memory: Memory, index: int) -> None:
        self.sock = sock
        self.memory = memory
        #: bit of this channel in Segment.announced
        self._bit = 1 << index
        #: held from :meth:`encode` to :meth:`transmit`
        self.lock = threading.Lock()
        self._buffer = bytearray(INLINE_LIMIT + 4096)
        self._view = memoryview(self._buffer)

    def fileno(self) -> int:
        return self.sock.fileno()

    def send(
        self,
        kind: int,
        ident: int,
        body: Any,
        block: tuple[int, int, int] | bytearray | bytes | None,
        extra_fds: list[int] | None = None,
    ) -> None:
        """Send one message (with ``extra_fds`` for its body); raises :class:`PeerClosed`
        when the peer is gone."""
        with self.lock:
            message, fds = self.encode(kind, ident, body, block, extra_fds)
            self.transmit(message, fds)

    def encode(
        self, kind: int, ident: int, body: Any, block: OutBlock, extra_fds: list[int] | None = None
    ) -> tuple[bytes, list[int]]:
        """The bytes and descriptors of one message, to be transmitted next on this channel
        (it takes the queued frees and marks segments announced): the caller holds
        :attr:`lock` until it transmitted them."""
        memory = self.memory
        extra = len(extra_fds) if extra_fds else 0
        fds: list[int] = []
        announced: list[tuple[int, int]] = []
        if type(block) is tuple:
            self._announce(block[0], fds, announced)
        frees = memory.leases.drain()
        dropped = _drain(memory.arena.dropped)
        message = marshal.dumps((kind, ident, body, block, frees, tuple(announced), dropped, extra))
        if len(message) > INLINE_LIMIT:
            inner = marshal.dumps((kind, ident, body, block))
            segment, offset = memory.arena.alloc(len(inner))
            segment.view[offset : offset + len(inner)] = inner
            spill = (segment.id, offset, len(inner))
            self._announce(segment.id, fds, announced)
            message = marshal.dumps(
                (INDIRECT, 0, None, spill, frees, tuple(announced), dropped, extra)
            )
        if extra_fds:
            fds += extra_fds
        return message, fds

    def transmit(self, message: bytes, fds: list[int], nonblocking: bool = False) -> None:
        """Send what :meth:`encode` made; raises :class:`PeerClosed` when the peer is gone
        and, ``nonblocking``, BlockingIOError when the socket is full (nothing was sent)."""
        flags = _DONTWAIT if nonblocking else 0
        try:
            if fds:
                self.sock.sendmsg(
                    [message],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))],
                    flags,
                )
            else:
                self.sock.send(message, flags)
        except BlockingIOError:
            raise
        except OSError as exc:  # EPIPE, ECONNRESET ...: the frees are lost with the peer
            raise PeerClosed(str(exc)) from None

    def _announce(self, segment_id: int, fds: list[int], announced: list[tuple[int, int]]) -> None:
        segment = self.memory.arena.segment(segment_id)
        # An unlocked read-modify-write: a lost bit only means announcing again, which the
        # receiver ignores; a bit is never set for a channel that was not sent the segment.
        if not segment.announced & self._bit:
            segment.announced |= self._bit
            fds.append(segment.fd)
            announced.append((segment.id, segment.size))

    def recv(self, nonblocking: bool = False) -> Message | None:
        """The next message (None: nothing waiting, nonblocking only).

        Applies what it carries for this side's memory first: maps announced segments,
        forgets dropped ones, frees blocks the peer released. Raises :class:`PeerClosed`
        at end of stream.
        """
        flags = _DONTWAIT if nonblocking else 0
        try:
            size, ancillary, msg_flags, _ = self.sock.recvmsg_into([self._view], _ANCILLARY, flags)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise PeerClosed(str(exc)) from None
        if size == 0:
            raise PeerClosed("end of stream")
        if msg_flags & _TRUNCATED:
            for fd in _fds(ancillary):
                os.close(fd)
            raise PeerClosed("message truncated")
        kind, ident, body, block, frees, announced, dropped, extra = marshal.loads(
            self._view[:size]
        )
        memory = self.memory
        extra_fds: tuple[int, ...] = ()
        if announced or extra:
            fds = _fds(ancillary)
            count = len(announced)
            if len(fds) != count + extra:
                for fd in fds:
                    os.close(fd)
                raise PeerClosed("a message's descriptors went missing")
            for (segment_id, segment_size), fd in zip(announced, fds, strict=False):
                memory.peers.add(segment_id, fd, segment_size)
            extra_fds = tuple(fds[count:])
        for segment_id in dropped:
            memory.peers.drop(segment_id)
        if frees:
            free = memory.arena.free
            for segment_id in frees:
                free(segment_id)
        if kind == INDIRECT:
            assert block is not None
            inner = bytes(memory.peers.block(*block))
            memory.leases.release(block[0])  # copied out: freed with the next send
            kind, ident, body, block = marshal.loads(inner)
        return Message(kind, ident, body, block, extra_fds)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()


def _fds(ancillary: list[tuple[int, int, bytes]]) -> list[int]:
    fds = array.array("i")
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
    return list(fds)


def _drain(queue: Any) -> tuple[int, ...]:
    if not queue:
        return ()
    items = []
    try:
        while True:
            items.append(queue.popleft())
    except IndexError:
        pass
    return tuple(items)


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """A connected seqpacket pair: (this side, the side to hand to the stub)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    for sock in (ours, theirs):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
    return ours, theirs
