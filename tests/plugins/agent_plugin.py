"""Repository agents for the tests: they record what they see, and can move or refuse a model.

Parameters of an agent entry: ``log`` (a file each action is appended to, and
``finalize``), ``relocate`` ("true": LOAD copies the model to a temporary folder and loads
from there), ``fail`` ("true": LOAD fails) and ``hang_on`` (an action that waits until
``RELEASE`` is set).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from pathlib import Path

from triton_core.errors import invalid_arg
from triton_core.plugins.hookspecs import hookimpl
from triton_core.repository.agents import AgentAction, AgentModel, RepositoryAgent

#: agents told to hang (``hang_on``) go on when a test sets this
RELEASE = threading.Event()


class RecordingAgent(RepositoryAgent):
    def __init__(self, label: str) -> None:
        self.label = label
        self.log = ""

    def act(self, action: AgentAction, model: AgentModel) -> Path | None:
        log = model.parameters.get("log")
        if log:
            self.log = log
            with open(log, "a") as handle:
                handle.write(f"{self.label} {action.value} {model.name} {model.location}\n")
        if model.parameters.get("hang_on") == action.value:
            RELEASE.wait()
        if action is AgentAction.LOAD and model.parameters.get("fail") == "true":
            raise invalid_arg(f"agent {self.label} refuses model '{model.name}'")
        if action is AgentAction.LOAD and model.parameters.get("relocate") == "true":
            target = Path(tempfile.mkdtemp(prefix="relocated-")) / model.name
            shutil.copytree(model.location, target)
            return target
        return None

    def finalize(self) -> None:
        if self.log:
            with open(self.log, "a") as handle:
                handle.write(f"{self.label} FINALIZE\n")


@hookimpl
def triton_register_repository_agents(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add("recorder_a", lambda: RecordingAgent("A"))
    registry.add("recorder_b", lambda: RecordingAgent("B"))
