"""The model repository manager: which models exist, their versions, and their states."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from triton_core.errors import TritonError, invalid_arg, unavailable
from triton_core.model import LoadedModel
from triton_core.repository.layout import safe_model_name, scan_models
from triton_core.repository.loader import ModelLoader, load_error
from triton_core.types import ModelIndexEntry

logger = logging.getLogger(__name__)

READY = "READY"
UNAVAILABLE = "UNAVAILABLE"
LOADING = "LOADING"
UNLOADING = "UNLOADING"


@dataclass(slots=True)
class VersionState:
    state: str
    reason: str = ""
    model: LoadedModel | None = None


@dataclass(slots=True)
class ModelRecord:
    """A model found in a repository, with the state of each version."""

    name: str
    path: Path
    root: Path
    versions: dict[int, VersionState] = field(default_factory=dict)
    #: why the model as a whole could not load (bad config, unknown backend ...)
    error: TritonError | None = None
    #: the ready model serving version-less requests (the highest ready version)
    latest: LoadedModel | None = None

    def refresh_latest(self) -> None:
        ready = [v for v, s in self.versions.items() if s.model is not None and s.state == READY]
        self.latest = self.versions[max(ready)].model if ready else None


class ModelRepositoryManager:
    """Scans repositories, loads models, and answers lookups by name and version."""

    def __init__(self, repositories: list[Path], loader: ModelLoader, load_threads: int = 4):
        self.repositories = [Path(path) for path in repositories]
        self._loader = loader
        self._load_slots = asyncio.Semaphore(max(1, load_threads))
        self._models: dict[str, ModelRecord] = {}

    # -- loading -------------------------------------------------------------------------------

    def scan(self) -> dict[str, ModelRecord]:
        """Find model folders; a name found in two repositories cannot be served."""
        found: dict[str, ModelRecord] = {}
        duplicates: dict[str, list[Path]] = {}
        for root in self.repositories:
            if not root.is_dir():
                raise invalid_arg(f"model repository {root} is not a directory")
            for name, path in scan_models(root).items():
                if name in found:
                    duplicates.setdefault(name, [found[name].path]).append(path)
                    continue
                found[name] = ModelRecord(name, path, root)
        for name, paths in duplicates.items():
            found[name].error = invalid_arg(
                f"model '{name}' appears in more than one model repository: "
                f"{', '.join(str(p) for p in paths)}"
            )
        return found

    async def load_all(self) -> list[TritonError]:
        """Load every model found; returns the load errors (the others keep serving)."""
        self._models = self.scan()
        records = list(self._models.values())
        errors = await asyncio.gather(*(self._load(record) for record in records))
        return [error for error in errors if error is not None]

    async def _load(self, record: ModelRecord) -> TritonError | None:
        if record.error is not None:
            logger.error("%s", record.error.message)
            return record.error
        async with self._load_slots:
            try:
                prepared = await asyncio.to_thread(
                    self._loader.prepare, record.name, record.path, record.root
                )
            except Exception as exc:
                record.error = load_error(exc, record.name)
                logger.error("failed to load '%s': %s", record.name, record.error.message)
                return record.error
            first_error = None
            for version in prepared.versions:
                state = VersionState(LOADING)
                record.versions[version] = state
                try:
                    state.model = await asyncio.to_thread(
                        self._loader.load_version, prepared, version
                    )
                    state.state = READY
                    logger.info("successfully loaded '%s' version %d", record.name, version)
                except Exception as exc:
                    error = load_error(exc, record.name)
                    state.state, state.reason = UNAVAILABLE, error.message
                    logger.error(
                        "failed to load '%s' version %d: %s", record.name, version, error.message
                    )
                    first_error = first_error or error
            record.refresh_latest()
            return first_error

    async def unload_all(self) -> None:
        """Unload every loaded version; requests already accepted finish first."""
        tasks = []
        for record in self._models.values():
            record.latest = None
            for state in record.versions.values():
                if state.model is not None:
                    state.state = UNLOADING
                    tasks.append(self._unload(record.name, state))
        await asyncio.gather(*tasks)

    async def _unload(self, name: str, state: VersionState) -> None:
        model = state.model
        assert model is not None
        try:
            await model.unload()
        except Exception:
            logger.exception("unloading '%s' version %d failed", name, model.version)
        state.model = None
        state.state, state.reason = UNAVAILABLE, "unloaded"
        logger.info("successfully unloaded '%s' version %d", name, model.version)

    # -- lookups (hot path) --------------------------------------------------------------------

    def get(self, name: str, version: int = -1) -> LoadedModel:
        """The ready model version for a request; raises Triton's errors otherwise."""
        record = self._models.get(name)
        if record is None:
            raise invalid_arg(f"Request for unknown model: '{name}' is not found")
        if version < 0:
            if record.latest is not None:
                return record.latest
            raise unavailable(f"Request for unknown model: '{name}' has no available versions")
        state = record.versions.get(version)
        if state is None:
            raise invalid_arg(f"Request for unknown model: '{name}' version {version} is not found")
        if state.model is None or state.state != READY:
            raise unavailable(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return state.model

    def record(self, name: str) -> ModelRecord:
        record = self._models.get(name) if safe_model_name(name) else None
        if record is None:
            raise invalid_arg(f"Request for unknown model: '{name}' is not found")
        return record

    def is_ready(self, name: str, version: int = -1) -> bool:
        record = self.record(name)
        if version < 0:
            return record.latest is not None
        state = record.versions.get(version)
        return state is not None and state.state == READY and state.model is not None

    def ready_versions(self, name: str) -> list[int]:
        record = self.record(name)
        return sorted(v for v, s in record.versions.items() if s.state == READY)

    def all_ready(self) -> bool:
        """Every model found has a ready version and no version failed."""
        for record in self._models.values():
            if record.error is not None or record.latest is None:
                return False
            if any(state.state != READY for state in record.versions.values()):
                return False
        return True

    def ready_models(self) -> list[LoadedModel]:
        """Every ready model version, by name then version."""
        return [
            record.versions[version].model  # type: ignore[misc]
            for name, record in sorted(self._models.items())
            for version in sorted(record.versions)
            if record.versions[version].state == READY
            and record.versions[version].model is not None
        ]

    def index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        """Repository index rows: one per version, or one per model that has none."""
        entries: list[ModelIndexEntry] = []
        for name in sorted(self._models):
            record = self._models[name]
            if record.error is not None and not record.versions:
                if not ready_only:
                    entries.append(ModelIndexEntry(name, -1, UNAVAILABLE, record.error.message))
                continue
            for version in sorted(record.versions):
                state = record.versions[version]
                if ready_only and state.state != READY:
                    continue
                entries.append(ModelIndexEntry(name, version, state.state, state.reason))
            if not record.versions and not ready_only:
                entries.append(ModelIndexEntry(name))
        return entries
