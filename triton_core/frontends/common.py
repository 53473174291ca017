"""What the HTTP and gRPC frontends share: protocol facts (not wire layouts), listening sockets."""

from __future__ import annotations

import re
import socket
from collections.abc import Callable, Iterable
from typing import Final, TypeVar

from triton_core.errors import invalid_arg
from triton_core.frontends.receive_buffers import LARGE_MESSAGE, BufferPool, join_into
from triton_core.types import InferenceRequest, ParameterValue, RequestFlag

C = TypeVar("C")

#: request parameters that the server interprets instead of passing to the model
RESERVED_PARAMETERS = frozenset(
    {
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "binary_data_output",
        "headers",
    }
)


_VERSION_PREFIX: Final = re.compile(r"\s*[+-]?[0-9]+")
_INT64_MAX: Final = 2**63 - 1


def join_buffers(
    parts: list[bytes], size: int, pool: BufferPool | None = None
) -> bytes | memoryview:
    """``parts`` (``size`` bytes in all) as one read-only buffer.

    A large one lies in memory numpy allocates, which it asks the system to back with
    transparent huge pages: a fresh 64 MiB buffer then faults in a few hundred pages rather
    than sixteen thousand. ``pool`` keeps such buffers for later messages, which saves even
    those faults.
    """
    if size < LARGE_MESSAGE:
        return parts[0] if len(parts) == 1 else b"".join(parts)
    return join_into(parts, size, pool)


def parse_version(text: str) -> int:
    """A URL or message version string: "" means the server picks (-1).

    Read as Triton reads it (``std::stol``: leading blanks, a sign, the leading digits), with
    its messages for a string that is no number, out of range, or negative.
    """
    if not text:
        return -1
    if text.isdigit() and len(text) < 19:
        return int(text)
    match = _VERSION_PREFIX.match(text)
    # at most 19 significant digits reach int(): a client's long string costs nothing
    number = match.group().strip() if match else ""
    sign, digits = ("-", number[1:]) if number.startswith("-") else ("", number.lstrip("+"))
    digits = digits.lstrip("0") or "0"
    version = int(sign + digits) if match and len(digits) <= 19 else None
    if version is None or not -_INT64_MAX - 1 <= version <= _INT64_MAX:
        raise invalid_arg(
            f"failed to get model version from specified version string '{text}' (details: "
            "stol), version should be an integral value > 0"
        )
    if version < 0:
        raise invalid_arg(
            f"invalid model version specified '{text}' , version should be an integral value > 0"
        )
    return version


#: request parameters meant for the frontend alone: they set nothing on the request
FRONTEND_PARAMETERS: Final = frozenset(("binary_data_output", "headers"))


def apply_request_parameters(
    request: InferenceRequest, parameters: dict[str, ParameterValue]
) -> None:
    """Move reserved parameters into request fields; keep the rest as custom parameters.

    Raises INVALID_ARG for a ``triton_`` key or a reserved key of the wrong type.
    """
    custom = request.parameters
    flags = request.flags
    for key, value in parameters.items():
        if key == "sequence_id":
            if isinstance(value, bool) or not isinstance(value, int | str):
                raise invalid_arg("parameter 'sequence_id' must be an integer or a string")
            request.correlation_id = value
        elif key == "sequence_start":
            _require_bool(key, value)
            if value:
                flags |= RequestFlag.SEQUENCE_START
        elif key == "sequence_end":
            _require_bool(key, value)
            if value:
                flags |= RequestFlag.SEQUENCE_END
        elif key == "priority":
            request.priority = _require_uint(key, value)
        elif key == "timeout":
            request.timeout_us = _require_uint(key, value)
        elif key in FRONTEND_PARAMETERS:
            continue  # consumed by the frontend
        elif key.startswith("triton_"):
            raise invalid_arg(
                f"parameter keys starting with 'triton_' are reserved for Triton usage and "
                f"should not be specified (got '{key}')"
            )
        else:
            custom[key] = value
    request.flags = flags


def _require_bool(key: str, value: ParameterValue) -> None:
    if not isinstance(value, bool):
        raise invalid_arg(f"parameter '{key}' must be a boolean")


def _require_uint(key: str, value: ParameterValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise invalid_arg(f"parameter '{key}' must be a non-negative integer")
    return value


def listen_socket(address: str, port: int, what: str, reuse_port: bool = False) -> socket.socket:
    """A listening, non-blocking TCP socket for the ``what`` endpoint (IPv4 or IPv6).

    ``reuse_port`` lets several worker processes share the port. Raises ``OSError`` naming
    the endpoint, address and port when it cannot bind.
    """
    host = address.removeprefix("ipv6:").strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if reuse_port:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise OSError(f"failed to bind the {what} endpoint to {address}:{port}: {exc}") from exc
    sock.setblocking(False)
    return sock


def idle_longest(connections: Iterable[C], idle_since: Callable[[C], float | None]) -> C | None:
    """The connection with the smallest ``idle_since`` (None: busy), or None when all are
    busy: the one a listener at its connection cap closes to admit a new one. Called only
    at the cap, so connections keep no ordered registry of idleness on the busy path."""
    idle = (
        (since, connection)
        for connection in connections
        if (since := idle_since(connection)) is not None
    )
    return min(idle, key=lambda pair: pair[0], default=(None, None))[1]
