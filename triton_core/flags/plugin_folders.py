"""The plugin folder flags (``--backend-directory`` and the rest): read before the command
line is parsed, since the plugins in them add flags to it."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Final

logger = logging.getLogger(__name__)

#: Triton's default plugin folders: skipped when absent
DEFAULT_BACKEND_DIRECTORY: Final = "/opt/tritonserver/backends"
DEFAULT_REPOAGENT_DIRECTORY: Final = "/opt/tritonserver/repoagents"
DEFAULT_CACHE_DIRECTORY: Final = "/opt/tritonserver/caches"

#: the plugin folder flags with Triton's defaults
_DIRECTORY_FLAGS: Final = (
    ("--backend-directory", DEFAULT_BACKEND_DIRECTORY),
    ("--repoagent-directory", DEFAULT_REPOAGENT_DIRECTORY),
    ("--cache-directory", DEFAULT_CACHE_DIRECTORY),
)


def plugin_directories(args: argparse.Namespace) -> list[tuple[str, Path]]:
    """(flag, folder) of each plugin folder to import.

    An absent folder is skipped, as Triton starts without it (a typical Triton command line
    names ``/opt/tritonserver/backends``): one line says so when the flag names it. A path
    that exists but is not a folder is refused (ValueError naming the flag).
    """
    found = []
    for flag, default in _DIRECTORY_FLAGS:
        given = getattr(args, flag.lstrip("-").replace("-", "_"), None)
        folder = Path(given or default)
        if not folder.exists():
            if given is not None:
                logger.warning(
                    "%s: '%s' does not exist; plugins are found through their entry points",
                    flag,
                    folder,
                )
            continue
        if not folder.is_dir():
            raise ValueError(f"{flag}: '{folder}' is not a directory")
        if (flag, folder) not in found:
            found.append((flag, folder))
    return found
