"""What a frontend is to the runner: a plugin contract.

A frontend plugin registers a factory with ``triton_register_frontends``; ``triton-core
serve`` calls each factory with the parsed settings, and runs every frontend it gets through
the same steps (see :func:`triton_core.frontends.runner.serve`):

1. :meth:`Frontend.endpoints`, then :meth:`Frontend.check`, before anything loads: the
   runner refuses two endpoints on one port, a frontend refuses its own bad settings;
2. :meth:`Frontend.listen`: bind the ports (before the models load, so that a port in use
   fails at once; in a ``--workers`` process, once its models are loaded, with
   SO_REUSEPORT);
3. :meth:`Frontend.start`, once the models are loaded: accept requests;
4. :meth:`Frontend.stop` at a stop signal, with the time left to drain.

The HTTP, gRPC, metrics, SageMaker and Vertex AI frontends are built-in plugins of this
kind (:mod:`triton_core.frontends.builtin`).
"""

from __future__ import annotations

import argparse
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from triton_core.frontends.cloud import Endpoint

if TYPE_CHECKING:
    from triton_core.frontends.options import FrontendOptions
    from triton_core.frontends.server_api import ServerAPI

__all__ = ["Endpoint", "Frontend", "FrontendFactory", "FrontendSettings"]


@dataclass(slots=True)
class FrontendSettings:
    """What a frontend factory is built from.

    ``options``: the settings of the built-in frontends and of the runner (exit timeout,
    ports file, ``--workers``). ``arguments``: every parsed ``serve`` flag, those a plugin
    added with ``triton_add_serve_arguments`` included (``arguments.openai_port`` ...).
    """

    options: FrontendOptions
    arguments: argparse.Namespace = field(default_factory=argparse.Namespace)

    def argument(self, dest: str, default: Any = None) -> Any:
        """The parsed flag ``dest`` (``"openai_port"`` for ``--openai-port``), or ``default``
        when the command line had no such flag (as when the server runs in-process)."""
        return getattr(self.arguments, dest, default)


class Frontend(ABC):
    """One protocol served on one or more ports."""

    #: how logs and errors name this frontend
    name: str = "frontend"

    @abstractmethod
    def endpoints(self) -> list[Endpoint]:
        """The endpoints it will listen on. Called before :meth:`listen`; the ``--workers``
        supervisor sets each endpoint's ``port`` to the one port the workers share, so a
        frontend reads its ports from these objects when it listens."""

    def check(self) -> None:  # noqa: B027 - optional step
        """Refuse settings that cannot work (files, ranges), before any model loads;
        raises ``ValueError`` naming the flag."""

    async def listen(self, server: ServerAPI, reuse_port: bool) -> None:  # noqa: B027
        """Bind the ports; raises ``OSError`` naming the endpoint when one is taken.

        ``reuse_port``: set SO_REUSEPORT on every listening socket, as the ``--workers``
        processes share each port (a bind without it fails beside the others)."""

    @abstractmethod
    async def start(self, server: ServerAPI) -> None:
        """Accept requests: the models are loaded. Raises ``ValueError`` when the loaded
        models do not fit the settings (the server then stops and exits with 1)."""

    @abstractmethod
    def ports(self) -> dict[str, int]:
        """The bound ports by endpoint key (``{"http": 8000}``), for ``--ports-file``."""

    @abstractmethod
    async def stop(self, timeout: float) -> None:
        """Stop accepting, let requests in flight finish within ``timeout`` seconds, then
        drop what is left."""


#: builds a frontend from the settings; None when its flags leave it off
FrontendFactory = Callable[[FrontendSettings], "Frontend | None"]
