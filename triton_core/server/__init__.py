"""The data plane: the Server, loaded model versions, their checks.

``triton_core.server`` was one module before it became this package: the names that were
imported from it still are, loaded from :mod:`triton_core.server.core` on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the names of the module this package replaces
_MOVED = (
    "EXTENSIONS",
    "Server",
    "ServerOptions",
)


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("triton_core.server.core"), name)
    globals()[name] = value  # later lookups skip this function
    return value
