"""A plugin that logs once at start: a verbose line of its own, and one as a third-party
library would, to show which ``--log-verbose`` reaches."""

from __future__ import annotations

import logging

from triton_core.plugins.hookspecs import hookimpl

PLUGIN_LINE = "log_plugin: a verbose line of a plugin"
LIBRARY_LINE = "log_plugin: a debug line of a third-party library"
WARNING_LINE = "log_plugin: a warning"


@hookimpl
async def triton_server_started(server: object) -> None:
    logging.getLogger(__name__).debug(PLUGIN_LINE)
    logging.getLogger("some_third_party_library").debug(LIBRARY_LINE)
    logging.getLogger(__name__).warning(WARNING_LINE)
