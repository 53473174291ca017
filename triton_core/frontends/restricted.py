"""Triton's restricted APIs: groups of endpoints that answer only requests carrying a header.

``--http-restricted-api`` and ``--grpc-restricted-protocol`` take
``<api>[,<api>...]:<key>=<value>`` (repeatable). Each frontend maps its endpoints to the
groups below and checks ``<key>: <value>`` (HTTP header) or
``triton-grpc-protocol-<key>: <value>`` (gRPC metadata) before anything else is done.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

#: Triton's API groups, as its flags name them
API_GROUPS: Final = (
    "health",
    "metadata",
    "inference",
    "shared-memory",
    "model-config",
    "model-repository",
    "statistics",
    "trace",
    "logging",
)

#: what gRPC puts before the flag's key to make the metadata key (as tritonserver)
GRPC_HEADER_PREFIX: Final = "triton-grpc-protocol-"
#: what both an HTTP header name and a gRPC metadata key may hold (a client could never send
#: anything else, so such a restriction could never be met)
_HEADER_NAME: Final = re.compile(r"[A-Za-z0-9_.-]+")
#: what both an HTTP header value and a gRPC ASCII metadata value may hold, no edge spaces
_HEADER_VALUE: Final = re.compile(r"[\x21-\x7e]([\x20-\x7e]*[\x21-\x7e])?")


@dataclass(frozen=True, slots=True)
class Restriction:
    """The header a group of APIs requires, and its value."""

    #: the header (metadata key) as the error message names it
    header: str
    value: str

    @property
    def key(self) -> str:
        """The name to look up: HTTP/2 and ASGI servers hand names over in lowercase."""
        return self.header.lower()


def first_value(headers: Iterable[tuple[object, object]], key: object) -> object | None:
    """The value of the first header named ``key`` (Triton looks up the first one too)."""
    for name, value in headers:
        if name == key:
            return value
    return None


#: group name -> its restriction; a group that is absent is open to everyone
Restrictions = dict[str, Restriction]


def parse_restrictions(specs: Iterable[str], flag: str, header_prefix: str = "") -> Restrictions:
    """The restrictions ``specs`` (values of ``flag``) set, by group.

    ``header_prefix`` goes before each key (``triton-grpc-protocol-`` for gRPC). Raises
    ``ValueError`` naming the flag for a malformed value, an unknown group, or a group named
    in more than one value, as tritonserver refuses them.
    """
    kind = "protocol" if flag.startswith("--grpc") else "api"
    restrictions: Restrictions = {}
    for spec in specs:
        groups, key, value = _split(spec, flag)
        for group in groups.split(","):
            if group not in API_GROUPS:
                raise ValueError(
                    f"{flag}: unknown restricted {kind} '{group}' "
                    f"(choose from {', '.join(API_GROUPS)})"
                )
            if group in restrictions:
                raise ValueError(
                    f"{flag}: restricted {kind} '{group}' can not be specified in multiple "
                    "config groups"
                )
            restrictions[group] = Restriction(header_prefix + key, value)
    return restrictions


def _split(spec: str, flag: str) -> tuple[str, str, str]:
    """``<apis>:<key>=<value>`` as its three parts, none empty."""
    groups, colon, setting = spec.partition(":")
    key, equals, value = setting.partition("=")
    if not (colon and equals and groups and key and value):
        raise ValueError(f"{flag} option format is '<api>[,<api>...]:<key>=<value>'. Got '{spec}'")
    if not _HEADER_NAME.fullmatch(key):
        raise ValueError(
            f"{flag}: '{key}' cannot be a header name (use letters, digits, '-', '_', '.')"
        )
    if not _HEADER_VALUE.fullmatch(value):
        raise ValueError(f"{flag}: the value of '{key}' must be printable ASCII")
    return groups, key, value
