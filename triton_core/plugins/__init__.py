"""How plugins are found and registered, and whose failure it is.

``triton_core.plugins`` was one module before it became this package: the names that were
imported from it still are, loaded from :mod:`triton_core.plugins.manager` on first use.
"""

from __future__ import annotations

from triton_core.plugins.migration import names_of_moved_module

__getattr__ = names_of_moved_module(
    __name__,
    "triton_core.plugins.manager",
    (
        "DEFAULT_PLUGINS",
        "DISABLE_ENV",
        "NO_AUTOLOAD_ENV",
        "PLUGINS_ENV",
        "PluginManager",
        "create_plugin_manager",
    ),
)
