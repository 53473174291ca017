"""Registers this distribution's repository agents."""

from __future__ import annotations

from typing import TYPE_CHECKING

from triton_core import hookimpl
from triton_core_repo_agents.checksum import ChecksumAgent

if TYPE_CHECKING:
    from triton_core import RepositoryAgentRegistry


@hookimpl
def triton_register_repository_agents(registry: RepositoryAgentRegistry) -> None:
    registry.add("checksum", ChecksumAgent)
