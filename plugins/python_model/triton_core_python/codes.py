"""The error codes of ``pb_utils.TritonError`` on the wire, as the server's statuses."""

from __future__ import annotations

from triton_core import Status

#: pb_utils.TritonError codes (TRITONSERVER_Error_Code order) -> statuses
STATUSES = (
    Status.UNKNOWN,
    Status.INTERNAL,
    Status.NOT_FOUND,
    Status.INVALID_ARG,
    Status.UNAVAILABLE,
    Status.UNSUPPORTED,
    Status.ALREADY_EXISTS,
    Status.CANCELLED,
)
CODES = {status: code for code, status in enumerate(STATUSES)}


def status_of(code: int) -> Status:
    """The status of a code the stub sent; INTERNAL for one it should not have."""
    return STATUSES[code] if 0 <= code < len(STATUSES) else Status.INTERNAL
