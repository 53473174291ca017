"""Repository agents: plugins that act on a model's files around its load and unload.

As Triton's repository agents: the agents a model's config lists
(``model_repository_agents { agents [...] }``) see LOAD in that order and may hand the load a
different model folder (a verified or decrypted copy); after the load, the agents that saw
LOAD get LOAD_COMPLETE or LOAD_FAIL in reverse order. Unloading sends UNLOAD in order and
UNLOAD_COMPLETE in reverse. A failing agent fails the load with its message.

Each load is one agent set: it hears LOAD, then LOAD_FAIL, or LOAD_COMPLETE and later
UNLOAD and UNLOAD_COMPLETE, exactly once each. A reload that replaces the serving versions
sends the old set UNLOAD when it swaps the new versions in and UNLOAD_COMPLETE once the old
versions finished their requests and unloaded; a failed reload releases the versions it
loaded, then sends its own set LOAD_FAIL (and nothing more), while the old set serves on.
At server stop every loaded model's set hears UNLOAD and UNLOAD_COMPLETE, then each agent's
:meth:`RepositoryAgent.finalize` runs, all within the stop's deadline.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_core.protos.model_config_pb2 import ModelConfig


class AgentAction(enum.Enum):
    """TRITONREPOAGENT_ACTION_*, in Triton's order."""

    LOAD = "LOAD"
    LOAD_COMPLETE = "LOAD_COMPLETE"
    LOAD_FAIL = "LOAD_FAIL"
    UNLOAD = "UNLOAD"
    UNLOAD_COMPLETE = "UNLOAD_COMPLETE"


@dataclass(slots=True)
class AgentModel:
    """What an agent sees of the model it acts on."""

    name: str
    #: the model folder the load uses now (an earlier agent may have changed it)
    location: Path
    #: the config as written (before auto-complete), as Triton gives agents
    config: ModelConfig
    #: this agent's ``parameters`` from the config's agent entry
    parameters: dict[str, str] = field(default_factory=dict)
    #: the folder as found in the repository (unchanged by agents)
    repository_location: Path | None = None


class RepositoryAgent(ABC):
    """One agent; created once per server, called off the event loop (may do file I/O)."""

    @abstractmethod
    def act(self, action: AgentAction, model: AgentModel) -> Path | None:
        """Act on ``model``; on LOAD, return a new model folder to load from, or None.

        Raise :class:`~triton_core.TritonError` to fail a LOAD (its message names the
        problem). Errors on the other actions are logged and do not change the outcome.
        After LOAD_FAIL no other action follows for that load: release what LOAD made
        (a decrypted copy) then, or on UNLOAD_COMPLETE after a LOAD_COMPLETE.
        """

    def finalize(self) -> None:  # noqa: B027 - optional hook
        """Release what the agent holds across models (temporary roots, connections).

        Called once at server stop, off the event loop, after every model it acted on has
        seen UNLOAD_COMPLETE. Runs within ``--exit-timeout-secs``: an agent still busy when
        the deadline passes is left behind and the server exits. Errors are logged.
        """
