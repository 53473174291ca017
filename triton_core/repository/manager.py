"""The model repository manager: which models exist, their versions, and their states."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path

from triton_core.errors import TritonError, invalid_arg, unavailable
from triton_core.model import LoadedModel
from triton_core.repository.layout import safe_model_name, scan_models
from triton_core.repository.loader import ModelLoader, PreparedModel, load_error
from triton_core.scheduling.ensemble import ensemble_load_order, is_ensemble, step_models
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
    #: for an ensemble: the models its steps call, with the versions asked for (-1: latest)
    dependencies: dict[str, set[int]] = field(default_factory=dict)

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
        """Load every model found; returns the load errors (the others keep serving).

        Ensembles load last, each after the models and ensembles its steps call.
        """
        self._models = self.scan()
        records = list(self._models.values())
        prepared = await asyncio.gather(*(self._prepare(record) for record in records))
        plain = []
        ensembles: dict[str, tuple[ModelRecord, PreparedModel]] = {}
        for record, ready in zip(records, prepared, strict=True):
            if ready is not None and is_ensemble(ready.config):
                ensembles[record.name] = (record, ready)
            elif ready is not None:
                plain.append(self._load_versions(record, ready))
        errors = [
            record.error for record, ready in zip(records, prepared, strict=True) if ready is None
        ]
        errors += await asyncio.gather(*plain)
        errors += await self._load_ensembles(ensembles)
        return [error for error in errors if error is not None]

    async def _prepare(self, record: ModelRecord) -> PreparedModel | None:
        """The model's complete config, or None with ``record.error`` set."""
        if record.error is not None:
            logger.error("%s", record.error.message)
            return None
        async with self._load_slots:
            try:
                prepared = await asyncio.to_thread(
                    self._loader.prepare, record.name, record.path, record.root
                )
            except Exception as exc:
                record.error = load_error(exc, record.name)
                logger.error("failed to load '%s': %s", record.name, record.error.message)
                return None
        if is_ensemble(prepared.config):
            record.dependencies = step_models(prepared.config)
        return prepared

    async def _load_versions(
        self, record: ModelRecord, prepared: PreparedModel
    ) -> TritonError | None:
        async with self._load_slots:
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

    # -- ensembles: they load after what they use, and are ready while their members are ------

    async def _load_ensembles(
        self, ensembles: dict[str, tuple[ModelRecord, PreparedModel]]
    ) -> list[TritonError | None]:
        order, cycles = ensemble_load_order(
            {name: record.dependencies for name, (record, _) in ensembles.items()}
        )
        errors: list[TritonError | None] = []
        for name, error in cycles.items():
            record = ensembles[name][0]
            record.error = error
            logger.error("failed to load '%s': %s", name, error.message)
            errors.append(error)
        for name in order:  # one at a time: an ensemble may use the ones before it
            errors.append(await self._load_checked(*ensembles[name]))
        return errors

    async def _load_checked(
        self, record: ModelRecord, prepared: PreparedModel
    ) -> TritonError | None:
        """Load a prepared model whose ensemble members (if any) are already loaded."""
        error = self._members_error(record)
        if error is not None:
            record.error = error
            logger.error("failed to load '%s': %s", record.name, error.message)
            return error
        return await self._load_versions(record, prepared)

    def _members_error(self, record: ModelRecord) -> TritonError | None:
        """Why an ensemble cannot load now: a composing model missing or not loaded."""
        name = record.name
        for member, versions in sorted(record.dependencies.items()):
            found = self._models.get(member)
            if found is None:
                return invalid_arg(
                    f"ensemble '{name}' step 'model_name' names '{member}', which is not in "
                    "the model repository"
                )
            if found.latest is None:
                cause = found.error.message if found.error is not None else ""
                cause = cause or next((s.reason for s in found.versions.values() if s.reason), "")
                return invalid_arg(
                    f"ensemble '{name}' depends on '{member}' which has no loaded version"
                    + (f". Model '{member}' loading failed with error: {cause}" if cause else "")
                )
            for version in sorted(versions):
                if not self._version_ready(found, version):
                    return invalid_arg(
                        f"ensemble '{name}' depends on '{member}' whose required version "
                        f"{version} ('model_version') is not loaded"
                    )
        return None

    def unready_member(self, record: ModelRecord, _seen: tuple[str, ...] = ()) -> str | None:
        """The first model an ensemble's steps call that is not ready (None: all are)."""
        for member, versions in record.dependencies.items():
            found = self._models.get(member)
            if found is None or member in _seen:
                return member
            if not all(self._version_ready(found, version) for version in versions):
                return member
            if found.dependencies and self.unready_member(found, (*_seen, record.name)):
                return member
        return None

    @staticmethod
    def _version_ready(record: ModelRecord, version: int) -> bool:
        if version < 0:
            return record.latest is not None
        state = record.versions.get(version)
        return state is not None and state.state == READY and state.model is not None

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
        """Ready to serve; an ensemble also needs every model its steps call to be ready."""
        record = self.record(name)
        return self._version_ready(record, version) and self.unready_member(record) is None

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
            if record.dependencies and self.unready_member(record) is not None:
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
            blocked = self.unready_member(record) if record.dependencies else None
            for version in sorted(record.versions):
                state = record.versions[version]
                status, reason = state.state, state.reason
                if blocked is not None and status == READY:
                    status, reason = UNAVAILABLE, f"composing model '{blocked}' is not ready"
                if ready_only and status != READY:
                    continue
                entries.append(ModelIndexEntry(name, version, status, reason))
            if not record.versions and not ready_only:
                entries.append(ModelIndexEntry(name))
        return entries
