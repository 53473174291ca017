"""The models the repositories hold: discovery across repositories (with namespacing),
changes found by polling, repositories registered while serving, and the lookups and states
the server answers from. Loading and unloading are :mod:`triton_core.repository.manager`'s."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from triton_core.config import ModelConfig
from triton_core.errors import (
    Status,
    TritonError,
    invalid_arg,
    not_found,
    unavailable,
    unsupported,
)
from triton_core.repository.ensembles import EnsembleMembers
from triton_core.repository.records import (
    READY,
    UNAVAILABLE,
    UNHEALTHY_REASON,
    ModelRecord,
    qualified_key,
)
from triton_core.repository.sources import MappedSource, ModelSource
from triton_core.server.model import LoadedModel
from triton_core.types import ModelIndexEntry

logger = logging.getLogger("triton_core.repository.manager")


class ModelCatalog:
    """The model records by key, found in the repositories, and every question about them."""

    def __init__(self, sources: list[ModelSource], namespacing: bool = False) -> None:
        self.sources = sources
        #: ``--model-namespacing``: a name may be in several repositories; each ensemble
        #: calls the models of its own repository first
        self._namespacing = namespacing
        self._models: dict[str, ModelRecord] = {}

    # -- discovery -------------------------------------------------------------------------

    def discover(self) -> dict[str, ModelRecord]:
        """Models across the repositories, by key; a name in two repositories cannot be
        served, unless namespacing is on: then each is a model of its own.

        Blocking I/O. Records that exist keep their state; new names get new records.
        """
        found: dict[str, list[ModelSource]] = {}
        for source in self.sources:
            for name in source.model_names():
                found.setdefault(name, []).append(source)
        records = {}
        for name, sources in found.items():
            if len(sources) > 1 and self._namespacing:
                for source in sources:
                    key = qualified_key(source, name)
                    records[key] = self._models.get(key) or ModelRecord(name, source, key=key)
                    records[key].source = source
                continue
            record = self._models.get(name) or ModelRecord(name, sources[0])
            record.source = sources[0]
            if len(sources) > 1:
                record.error = invalid_arg(
                    f"model '{name}' appears in more than one model repository: "
                    f"{', '.join(source.location for source in sources)}"
                )
            records[name] = record
        return records

    def _describe_sources(self) -> str:
        return ", ".join(source.location for source in self.sources)

    async def poll_changes(self) -> tuple[list[ModelRecord], list[ModelRecord]] | None:
        """One look at the repositories for poll mode: the records whose model was removed,
        and those to load or reload (new, changed on disk, or ensembles whose steps resolve
        anew); None when a repository could not be read (every model then stays as it is).
        """
        found = await self._discover_logged()
        if found is None:
            return None
        removed, changed = self._key_changes(found)
        for key, record in found.items():
            record = self._models.setdefault(key, record)
            if not record.wanted or (
                record not in changed
                and record.source is not None
                and await self._changed_on_disk(record)
            ):
                changed.append(record)
        return removed, changed

    async def rekeyed_for_load(self) -> tuple[list[ModelRecord], list[ModelRecord]]:
        """With namespacing, what a load request finds in the repositories, as Triton polls
        them for it: the records whose name moved to another key (it gained or lost a
        repository), and the wanted ensembles that resolve their steps again; new keys get
        records. A model whose folder is gone altogether stays as it is (explicit mode)."""
        found = await self._discover_logged()
        if found is None:
            return [], []
        removed, resolving = self._key_changes(found)
        names = {record.name for record in found.values()}
        for key, record in found.items():
            self._models.setdefault(key, record)
        return [record for record in removed if record.name in names], resolving

    async def _discover_logged(self) -> dict[str, ModelRecord] | None:
        """:meth:`discover` off the event loop; None (logged) when a repository is unreadable."""
        try:
            return await asyncio.to_thread(self.discover)
        except TritonError as error:
            logger.error("%s", error.message)
            return None

    def _key_changes(
        self, found: dict[str, ModelRecord]
    ) -> tuple[list[ModelRecord], list[ModelRecord]]:
        """The records whose key is no longer found, and the wanted ensembles that resolve
        their steps again because a name gained or lost a repository (namespacing)."""
        present = {key for key, record in self._models.items() if record.source is not None}
        removed = [self._models[key] for key in sorted(set(self._models) - set(found))]
        if not self._namespacing or set(found) == present:
            return removed, []
        resolving = [
            record
            for key, record in found.items()
            if record.wanted and record.dependencies and key in self._models
        ]
        return removed, resolving

    @staticmethod
    async def _changed_on_disk(record: ModelRecord) -> bool:
        assert record.source is not None
        try:
            fingerprint = await asyncio.to_thread(record.source.fingerprint, record.name)
        except Exception as exc:
            logger.error("failed to poll model '%s': %s", record.name, exc)
            return False
        if fingerprint == record.fingerprint:
            return False
        logger.info("model '%s' changed in the repository: reloading it", record.name)
        return True

    # -- repositories added and removed while serving --------------------------------------

    def register(self, path: str, mapping: dict[str, str], explicit: bool) -> None:
        """Add a repository folder while serving; ``mapping`` (model name -> subfolder) serves
        subfolders under other names. Triton's RegisterModelRepository and its words."""
        if not explicit:
            raise unsupported(
                "repository registration is not allowed if model control mode is not EXPLICIT"
            )
        if not Path(path).is_dir():
            raise invalid_arg(f"failed to register '{path}', repository not found")
        if any(source.location == path for source in self.sources):
            raise TritonError(
                Status.ALREADY_EXISTS, f"model repository '{path}' has already been registered"
            )
        for name in mapping:
            if any(source.maps(name) for source in self.sources):
                raise TritonError(
                    Status.ALREADY_EXISTS,
                    f"failed to register '{name}', there is a conflicting mapping for '{name}'",
                )
        self.sources.append(MappedSource(Path(path), mapping))
        logger.info("Model repository registered: %s", path)

    def unregister(self, path: str, explicit: bool) -> None:
        """Remove a repository added by :meth:`register`; its models that are loaded stay."""
        if not explicit:
            raise unsupported(
                "repository unregistration is not allowed if model control mode is not EXPLICIT"
            )
        found = [source for source in self.sources if source.location == path]
        if not found:
            raise invalid_arg(f"failed to unregister '{path}', repository not found")
        self.sources.remove(found[0])
        for record in self._models.values():
            if record.source is found[0]:
                record.source = None
        logger.info("Model repository unregistered: %s", path)

    # -- ensembles: ready while the models their steps call are ----------------------------

    def _members_error(self, record: ModelRecord) -> TritonError | None:
        """Why an ensemble cannot load now: a composing model missing or not loaded."""
        name = record.name
        for member, versions in sorted(record.dependencies.items()):
            found = self._models.get(self._member_key(record, member))
            if found is None and len(self._records_named(member)) > 1:
                return invalid_arg(
                    f"ensemble '{name}' contains models that are not available or ambiguous: "
                    f"{member}"
                )
            if found is None or found.source is None:
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
            found = self._models.get(self._member_key(record, member))
            if found is None or member in _seen:
                return member
            if not all(self._version_ready(found, version) for version in versions):
                return member
            if found.dependencies and self.unready_member(found, (*_seen, record.name)):
                return member
        return None

    @staticmethod
    def _version_ready(record: ModelRecord, version: int) -> bool:
        """Loaded, and not every instance hung past ``execute_timeout_secs``."""
        if version < 0:
            return record.latest is not None and record.latest.pool.healthy
        state = record.versions.get(version)
        return (
            state is not None
            and state.state == READY
            and state.model is not None
            and state.model.pool.healthy
        )

    def _member_key(self, record: ModelRecord, member: str) -> str:
        """The key of a model an ensemble calls: the one of the ensemble's own repository
        when the name is in several, else the name (Triton's namespacing)."""
        if self._namespacing and record.source is not None:
            key = qualified_key(record.source, member)
            found = self._models.get(key)
            if found is not None and found.source is not None:
                return key
        return member

    def _members_of(self, record: ModelRecord) -> EnsembleMembers:
        """How the ensemble ``record`` finds its composing models when a version loads."""

        def key_of(member: str) -> str:
            # with --model-namespacing: the model of this ensemble's own repository first
            return self._member_key(record, member)

        def config(member: str, version: int) -> ModelConfig:
            return self.get(key_of(member), version).config

        return EnsembleMembers(config, key_of)

    # -- lookups (hot path) ----------------------------------------------------------------

    def get(self, name: str, version: int = -1) -> LoadedModel:
        """The ready model version for a request; raises Triton's errors otherwise."""
        record = self._models.get(name)
        if record is None:
            raise self._unknown(name)
        if version < 0:
            if record.latest is not None:
                return record.latest
            if self._gone(record):
                raise self._unknown(name)
            raise not_found(f"Request for unknown model: '{name}' has no available versions")
        state = record.versions.get(version)
        if state is None:
            raise not_found(f"Request for unknown model: '{name}' version {version} is not found")
        if state.model is None or state.state != READY:
            raise unavailable(
                f"Request for unknown model: '{name}' version {version} is not at ready state"
            )
        return state.model

    def record(self, name: str) -> ModelRecord:
        record = self._models.get(name)
        if record is None or (self._gone(record) and not record.serving):
            raise self._unknown(name)
        return record

    def _gone(self, record: ModelRecord) -> bool:
        """With namespacing: a record whose name now lives only under namespaced keys."""
        return (
            self._namespacing
            and record.source is None
            and record.key == record.name
            and len(self._records_named(record.name)) > 1
        )

    def _unknown(self, name: str) -> TritonError:
        """Triton's error for a name with no model, or (namespacing) with several."""
        named = self._records_named(name) if self._namespacing else []
        if len(named) > 1:
            return invalid_arg(
                f"There are {len(named)} identifiers of model '{name}' in global map, model "
                "namespace must be provided to resolve ambiguity."
            )
        return not_found(f"Request for unknown model: '{name}' is not found")

    def _records_named(self, name: str) -> list[ModelRecord]:
        """The records of one model name (several only with namespacing), by key."""
        if not self._namespacing:
            record = self._models.get(name)
            return [record] if record is not None else []
        return [
            record
            for _, record in sorted(self._models.items())
            if record.name == name and (record.source is not None or record.serving)
        ]

    def is_ready(self, name: str, version: int = -1) -> bool:
        """Ready to serve; an ensemble also needs every model its steps call to be ready."""
        record = self.record(name)
        return self._version_ready(record, version) and self.unready_member(record) is None

    def ready_versions(self, name: str) -> list[int]:
        record = self.record(name)
        return sorted(v for v, s in record.versions.items() if s.state == READY)

    def all_ready(self) -> bool:
        """Strict readiness: every model asked for serves (none asked for: ready, as Triton).

        Models that are loading for the first time or unloading do not count against it, so
        loading or unloading one model never makes the server unready; a model that failed to
        load does.
        """
        for record in self._models.values():
            if not record.wanted:
                continue
            if record.latest is None:
                if record.loading:
                    continue
                return False
            if any(
                state.state == UNAVAILABLE
                or (state.model is not None and not state.model.pool.healthy)
                for state in record.versions.values()
            ):
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
        for key in sorted(self._models):
            record = self._models[key]
            name = record.name
            if record.source is None and not record.serving and record.override is None:
                continue
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
                elif status == READY and state.model is not None and not state.model.pool.healthy:
                    status, reason = UNAVAILABLE, UNHEALTHY_REASON
                if ready_only and status != READY:
                    continue
                entries.append(ModelIndexEntry(name, version, status, reason))
            if not record.versions and not ready_only:
                entries.append(ModelIndexEntry(name))
        return entries
