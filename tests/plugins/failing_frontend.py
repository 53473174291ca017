"""A frontend plugin with a flag of its own whose start fails with the flag's message: the
server must stop and exit with 1, saying why."""

from __future__ import annotations

import argparse

from triton_core import Endpoint, Frontend, FrontendRegistry, FrontendSettings, ServerAPI
from triton_core.plugins.hookspecs import hookimpl


class FailingFrontend(Frontend):
    name = "failing"

    def __init__(self, message: str) -> None:
        self.message = message

    def endpoints(self) -> list[Endpoint]:
        return []

    async def start(self, server: ServerAPI) -> None:
        raise ValueError(self.message)

    def ports(self) -> dict[str, int]:
        return {}

    async def stop(self, timeout: float) -> None:
        pass


@hookimpl
def triton_add_serve_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--failing-frontend-message", default=None)


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    def create(settings: FrontendSettings) -> FailingFrontend | None:
        message = settings.argument("failing_frontend_message")
        return None if message is None else FailingFrontend(message)

    registry.add("failing", create)
