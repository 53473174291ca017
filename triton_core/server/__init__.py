"""The data plane: the Server, loaded model versions, their checks.

``triton_core.server`` was one module before it became this package: the names that were
imported from it still are, loaded from :mod:`triton_core.server.core` on first use.
"""

from __future__ import annotations

from triton_core.plugins.migration import names_of_moved_module

__getattr__ = names_of_moved_module(
    __name__, "triton_core.server.core", ("EXTENSIONS", "Server", "ServerOptions")
)
