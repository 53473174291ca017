"""The control channel between workers: a Unix socket per worker in a private folder.

A worker answers its peers from a thread of its own, so it answers even while its event
loop waits on a peer (two workers asking each other at once cannot deadlock). A message is
a 4-byte big-endian length and that many bytes of JSON, bounded both ways; every call has a
timeout and its errors name the worker.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import socketserver
import struct
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final

logger = logging.getLogger("triton_core.workers")

#: the largest message either way: a load with uploaded model files (bounded by the HTTP and
#: gRPC message limits) or a large exposition
MAX_MESSAGE_BYTES: Final = 1 << 30
_HEADER: Final = struct.Struct(">I")
_PREFIX: Final = "worker-"
_SUFFIX: Final = ".sock"

Handler = Callable[[dict[str, Any]], dict[str, Any]]


class WorkerError(Exception):
    """A worker did not answer, or answered with an error; the message names it."""


class WorkerGone(WorkerError):
    """The worker's socket is gone or refuses connections: it has exited."""


def socket_path(folder: Path, pid: int) -> Path:
    return folder / f"{_PREFIX}{pid}{_SUFFIX}"


def peer_pids(folder: Path, own_pid: int) -> list[int]:
    """The other workers that listen in ``folder``, oldest pid first (an order all agree on)."""
    pids = []
    for path in folder.glob(f"{_PREFIX}*{_SUFFIX}"):
        text = path.name[len(_PREFIX) : -len(_SUFFIX)]
        if text.isdigit() and int(text) != own_pid:
            pids.append(int(text))
    return sorted(pids)


def _receive_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(min(size - len(chunks), 1 << 20))
        if not chunk:
            raise ConnectionError("the connection closed in the middle of a message")
        chunks += chunk
    return bytes(chunks)


def receive(sock: socket.socket) -> dict[str, Any]:
    (size,) = _HEADER.unpack(_receive_exactly(sock, _HEADER.size))
    if size > MAX_MESSAGE_BYTES:
        raise ValueError(f"a control message of {size} bytes is over {MAX_MESSAGE_BYTES}")
    message = json.loads(_receive_exactly(sock, size))
    if not isinstance(message, dict):
        raise ValueError("a control message must be a JSON object")
    return message


def send(sock: socket.socket, message: dict[str, Any]) -> None:
    data = json.dumps(message, separators=(",", ":")).encode()
    if len(data) > MAX_MESSAGE_BYTES:
        raise ValueError(f"a control message of {len(data)} bytes is over {MAX_MESSAGE_BYTES}")
    sock.sendall(_HEADER.pack(len(data)) + data)


def ask(folder: Path, pid: int, request: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Send ``request`` to worker ``pid`` and return its answer.

    Raises :class:`WorkerGone` when the worker has exited, :class:`WorkerError` when it does
    not answer within ``timeout`` seconds or answers ``{"error": ...}``.
    """
    path = socket_path(folder, pid)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(os.fspath(path))
        except (FileNotFoundError, ConnectionRefusedError) as exc:
            raise WorkerGone(f"worker {pid} has exited ({exc.strerror})") from None
        try:
            send(sock, request)
            answer = receive(sock)
        except TimeoutError:
            raise WorkerError(
                f"worker {pid} did not answer '{request.get('op')}' within {timeout:g}s"
            ) from None
        except (OSError, ValueError) as exc:
            op = request.get("op")
            if not path.exists():  # it exited while answering (a worker that failed to start)
                raise WorkerGone(f"worker {pid} exited before answering '{op}'") from None
            raise WorkerError(f"worker {pid} failed to answer '{op}': {exc}") from None
    if "error" in answer:
        raise WorkerError(f"worker {pid}: {answer['error']}")
    return answer


class ControlServer:
    """Answers peers on ``socket_path(folder, pid)`` from a thread per connection."""

    def __init__(self, folder: Path, handler: Handler) -> None:
        self.path = socket_path(folder, os.getpid())
        self.path.unlink(missing_ok=True)
        self._server = _ThreadingServer(os.fspath(self.path), _RequestHandler)
        self._server.handle = handler  # type: ignore[attr-defined]
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="triton-core-worker-control", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop answering: peers from now on see this worker as gone."""
        self.path.unlink(missing_ok=True)
        self._server.shutdown()
        self._server.server_close()


class _ThreadingServer(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    block_on_close = False


class _RequestHandler(socketserver.BaseRequestHandler):
    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(30.0)  # a peer that stops sending mid-message
        try:
            request = receive(sock)
        except (OSError, ValueError) as exc:
            logger.warning("a control message could not be read: %s", exc)
            return
        try:
            answer = self.server.handle(request)  # type: ignore[attr-defined]
        except Exception as exc:  # the peer gets the reason; this worker keeps serving
            answer = {"error": str(getattr(exc, "message", None) or exc)}
        try:
            sock.settimeout(None)
            send(sock, answer)
        except (OSError, ValueError) as exc:
            logger.warning("a control answer could not be sent: %s", exc)
