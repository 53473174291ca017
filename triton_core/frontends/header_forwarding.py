"""``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern``: request headers whose
names match become string request parameters, as Triton forwards them.

Only built when the flag is set: without it, the frontends never look at headers for this.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from triton_core.errors import invalid_arg

#: request parameters Triton reserves for itself; headers may not set them (nor ``triton_*``)
RESERVED_PARAMETERS: Final = frozenset(
    (
        "sequence_id",
        "sequence_start",
        "sequence_end",
        "priority",
        "timeout",
        "headers",
        "binary_data_output",
    )
)
#: at most this many headers are forwarded from one request (the frontends bound the rest)
MAX_FORWARDED: Final = 256


class HeaderForwarder:
    """Picks the headers to forward from one request's headers."""

    __slots__ = ("pattern",)

    def __init__(self, pattern: re.Pattern[str]) -> None:
        self.pattern = pattern

    def parameters(self, headers: Iterable[tuple[str, str]]) -> dict[str, str]:
        """``{name: value}`` of the matching headers; raises INVALID_ARG for a reserved name,
        with Triton's message."""
        forwarded: dict[str, str] = {}
        search = self.pattern.search
        for name, value in headers:
            if not search(name):
                continue
            if name in RESERVED_PARAMETERS or name.startswith("triton_"):
                raise invalid_arg(
                    f"Header '{name}' is reserved for Triton usage and cannot be forwarded."
                )
            if len(forwarded) >= MAX_FORWARDED:
                raise invalid_arg(f"more than {MAX_FORWARDED} headers match the forward pattern")
            forwarded[name] = value
        return forwarded


def forwarder(pattern: re.Pattern[str] | None) -> HeaderForwarder | None:
    """The forwarder of a ``--*-header-forward-pattern`` flag; None when not given."""
    return None if pattern is None else HeaderForwarder(pattern)
