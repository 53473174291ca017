"""How plugins are found and registered, and whose failure it is.

``triton_core.plugins`` was one module before it became this package: the names that were
imported from it still are, loaded from :mod:`triton_core.plugins.manager` on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

#: the names of the module this package replaces
_MOVED = (
    "DEFAULT_PLUGINS",
    "DISABLE_ENV",
    "NO_AUTOLOAD_ENV",
    "PLUGINS_ENV",
    "PluginManager",
    "create_plugin_manager",
)


def __getattr__(name: str) -> Any:
    if name not in _MOVED:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module("triton_core.plugins.manager"), name)
    globals()[name] = value  # later lookups skip this function
    return value
