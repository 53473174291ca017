"""What the repository manager knows of each model: its record, the state of each version,
a load request's override, the control mode, and Triton's words for failed loads."""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass, field
from pathlib import Path

from triton_core.config import ModelConfig
from triton_core.errors import Status, TritonError
from triton_core.repository.agent_set import AgentSet
from triton_core.repository.sources import ModelSource
from triton_core.server.model import LoadedModel

logger = logging.getLogger("triton_core.repository.manager")

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"
LOADING = "LOADING"
UNLOADING = "UNLOADING"
UNLOADED_REASON = "unloaded"
UNHEALTHY_REASON = (
    "every instance is unhealthy: each ran past execute_timeout_secs and has not returned"
)


class PollFailure(TritonError):
    """A load whose model could not be found or read: Triton's "failed to poll" answer."""

    def __init__(self, name: str, detail: str) -> None:
        # Triton's words first (clients look for them), then what was wrong
        super().__init__(
            Status.INTERNAL,
            f"failed to load '{name}', failed to poll from model repository: {detail}",
        )
        logger.error("Poll failed for model directory '%s': %s", name, detail)


NOT_IN_REPOSITORY = "model not found in any model repository"


class LoadFailure(TritonError):
    """A model that was found but failed to load: Triton's "load failed for model"."""

    def __init__(self, name: str, detail: str) -> None:
        detail = unnamed(name, detail)
        super().__init__(Status.INVALID_ARG, f"load failed for model '{name}': {detail}\n")


def unnamed(name: str, detail: str) -> str:
    """``detail`` without the model's name where the message around it says it already:
    "load failed for model 'm': model 'm' uses backend ..." names it once."""
    for prefix in (f"model '{name}': ", f"model '{name}' "):
        if detail.startswith(prefix):
            return detail[len(prefix) :]
    return detail


def load_failure(name: str, error: TritonError) -> TritonError:
    """Triton's answer to a load request that failed (as it was, when it already is)."""
    if isinstance(error, PollFailure | LoadFailure):
        return error
    return LoadFailure(name, error.message)


def versions_failure(name: str, failures: list[tuple[int, TritonError]]) -> LoadFailure:
    """Triton's account of the versions that failed: ``version N is at UNAVAILABLE state``."""
    return LoadFailure(
        name,
        "".join(
            f"version {version} is at {UNAVAILABLE} state: {error.message};"
            for version, error in failures
        ),
    )


def qualified_key(source: ModelSource, name: str) -> str:
    """A namespaced record key: ``<repository>/<name>`` (a client's name has no ``/``)."""
    return f"{source.location.rstrip('/')}/{name}"


class ControlMode(enum.Enum):
    """``--model-control-mode``."""

    NONE = "none"
    POLL = "poll"
    EXPLICIT = "explicit"


@dataclass(slots=True)
class VersionState:
    state: str
    reason: str = ""
    model: LoadedModel | None = None


@dataclass(slots=True)
class LoadOverride:
    """A load request's config (and files) replacing what the repository holds."""

    config: ModelConfig
    #: a folder built from ``file:<version>/<path>`` parameters, or None
    folder: Path | None = None


@dataclass(slots=True)
class ModelRecord:
    """A model found in a repository, with the state of each version."""

    name: str
    source: ModelSource | None
    versions: dict[int, VersionState] = field(default_factory=dict)
    #: the record's key in the manager: the name, or with ``--model-namespacing`` and a name
    #: in several repositories, ``<repository>/<name>`` (never a name a client can load)
    key: str = ""
    #: why the model as a whole could not load (bad config, unknown backend ...)
    error: TritonError | None = None
    #: the ready model serving version-less requests (the highest ready version)
    latest: LoadedModel | None = None
    #: for an ensemble: the models its steps call, with the versions asked for (-1: latest)
    dependencies: dict[str, set[int]] = field(default_factory=dict)
    #: whether a load was asked for (start-up, API, poll); an unload clears it
    wanted: bool = False
    #: ensembles that loaded this model along with them ("" stands for a direct request)
    loaded_by: set[str] = field(default_factory=set)
    #: the files as they were when last loaded (poll mode compares against it)
    fingerprint: object = None
    override: LoadOverride | None = None
    #: a load or reload is under way
    loading: bool = False
    #: the agents that saw the serving version set's LOAD, for its UNLOAD later
    agents: AgentSet = field(default_factory=AgentSet)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: the folder the model was last read from
    folder: Path | None = None

    def __post_init__(self) -> None:
        self.key = self.key or self.name

    def refresh_latest(self) -> None:
        ready = [v for v, s in self.versions.items() if s.model is not None and s.state == READY]
        self.latest = self.versions[max(ready)].model if ready else None

    @property
    def serving(self) -> bool:
        return any(state.model is not None for state in self.versions.values())
