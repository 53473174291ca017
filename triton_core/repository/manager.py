"""The model repository manager: loading, reloading and unloading models while the server
serves. Which models exist and the lookups are :mod:`.catalog`'s (the manager is one), the
records and their states :mod:`.records`'.

A reload loads the new versions beside the serving ones and swaps them in when they are
ready; the old versions finish the requests they accepted and then unload. A failed reload
leaves the old versions serving. Every change to one model is serialised by that model's
lock; lookups (the hot path) never wait for it.

Repository agents follow Triton's order (see :mod:`triton_core.repository.agent_set`): a
reload's agents get LOAD_COMPLETE, then the replaced set's agents UNLOAD at once and
UNLOAD_COMPLETE after its versions drained and unloaded; a failed reload releases the new
versions, then its agents get LOAD_FAIL, and the serving set's agents hear nothing.
The reload returns once the replaced set heard UNLOAD; its requests drain after.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from triton_core.config import (
    LOAD_TIMEOUT_PARAMETER,
    ModelConfig,
    config_from_json,
    timeout_parameter,
)
from triton_core.errors import (
    TritonError,
    internal,
    invalid_arg,
    unavailable,
)
from triton_core.plugins.registry import RepositoryAgentRegistry
from triton_core.repository.agent_set import AgentSet, notify, run_detached
from triton_core.repository.agents import AgentAction, AgentModel, RepositoryAgent
from triton_core.repository.catalog import ModelCatalog
from triton_core.repository.ensembles import ensemble_load_order, is_ensemble, step_models
from triton_core.repository.layout import load_name_problem, safe_model_name
from triton_core.repository.loader import (
    ModelLoader,
    PreparedModel,
    load_error,
    read_model_config,
)
from triton_core.repository.overrides import override_file_path
from triton_core.repository.records import (
    LOADING,
    NOT_IN_REPOSITORY,
    READY,
    UNAVAILABLE,
    UNLOADED_REASON,
    UNLOADING,
    ControlMode,
    LoadOverride,
    ModelRecord,
    PollFailure,
    VersionState,
    load_failure,
    versions_failure,
)
from triton_core.repository.remote import MAX_COMPONENT_BYTES
from triton_core.repository.sources import ModelSource, check_name
from triton_core.server.model import LoadedModel

logger = logging.getLogger(__name__)

T = TypeVar("T")


def _write_override_file(folder: Path, key: str, content: bytes, name: str) -> None:
    try:
        target = override_file_path(folder, key)
    except ValueError as error:
        raise PollFailure(name, str(error)) from None
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise PollFailure(
            name, f"Invalid file parameter 'file:{key}', directory has been created as a file"
        ) from None
    try:
        target.write_bytes(content)
    except IsADirectoryError:
        raise PollFailure(
            name, f"failed to open binary file for write {target}: Is a directory"
        ) from None


class ModelRepositoryManager(ModelCatalog):
    """Loads, reloads and unloads the models of the catalog while the server serves."""

    def __init__(
        self,
        sources: list[ModelSource],
        loader: ModelLoader,
        load_threads: int = 4,
        agents: RepositoryAgentRegistry | None = None,
        namespacing: bool = False,
    ) -> None:
        super().__init__(sources, namespacing)
        self._loader = loader
        self._agents = agents or RepositoryAgentRegistry()
        self._agent_objects: dict[str, RepositoryAgent] = {}
        self._load_slots = asyncio.Semaphore(max(1, load_threads))
        self._retiring: set[asyncio.Task[None]] = set()
        #: every loaded version until its unload ends (serving, retiring or unloading)
        self._live: set[LoadedModel] = set()
        self._override_root = Path(tempfile.mkdtemp(prefix="triton-core-overrides-"))

    # -- start-up --------------------------------------------------------------------------

    async def start(self, mode: ControlMode, load_models: list[str]) -> list[TritonError]:
        """Load what the control mode loads at start-up; returns the load errors."""
        self._models = await asyncio.to_thread(self.discover)
        if mode is ControlMode.EXPLICIT and "*" not in load_models:
            names = load_models
        else:
            names = list(self._models)
        records: list[ModelRecord] = []
        for name in names:
            if name in self._models:
                records.append(self._models[name])
                continue
            check_name(name, self._describe_sources())
            named = self._records_named(name)
            if not named:
                named = [ModelRecord(name, None)]
                self._models[name] = named[0]
                named[0].error = PollFailure(name, NOT_IN_REPOSITORY)
            records += named
        return await self._load_many(records)

    async def _load_many(
        self, records: list[ModelRecord], loaded_by: dict[str, str] | None = None
    ) -> list[TritonError]:
        """Load models at once; ensembles after the models they use, which are loaded too
        when nobody asked for them (``--load-model <ensemble>`` in explicit mode)."""
        for record in records:
            record.wanted = True
            record.loading = True
            record.loaded_by.add((loaded_by or {}).get(record.key, ""))
        try:
            return await self._load_prepared(records)
        finally:
            for record in records:
                record.loading = False

    async def _load_prepared(self, records: list[ModelRecord]) -> list[TritonError]:
        prepared = await asyncio.gather(*(self._prepare(record) for record in records))
        plain = []
        ensembles: dict[str, tuple[ModelRecord, PreparedModel]] = {}
        errors: list[TritonError | None] = []
        for record, ready in zip(records, prepared, strict=True):
            if isinstance(ready, TritonError):
                errors.append(ready)
            elif is_ensemble(ready.config):
                ensembles[record.key] = (record, ready)
            else:
                plain.append(self._swap_in(record, ready))
        errors += await asyncio.gather(*plain)
        errors += await self._load_unasked_members(ensembles)
        errors += await self._load_ensembles(ensembles)
        return [error for error in errors if error is not None]

    async def _load_unasked_members(
        self, ensembles: dict[str, tuple[ModelRecord, PreparedModel]]
    ) -> list[TritonError]:
        """The models these ensembles call that no one asked to load, loaded first."""
        members: dict[str, ModelRecord] = {}
        loaded_by: dict[str, str] = {}
        for record, _ in ensembles.values():
            for member in sorted(record.dependencies):
                key = self._member_key(record, member)
                found = self._models.get(key)
                if found is None or found.source is None or found.wanted or key in ensembles:
                    continue
                members.setdefault(key, found)
                loaded_by.setdefault(key, record.key)
        if not members:
            return []
        return await self._load_many(list(members.values()), loaded_by)

    # -- loading one model -----------------------------------------------------------------

    async def _prepare(self, record: ModelRecord) -> PreparedModel | TritonError:
        """Agents' LOAD, then the complete config; or the error, kept as the model's reason
        unless older versions are serving (a failed reload leaves them serving)."""
        if record.error is not None and (
            record.source is None or "more than one model repository" in record.error.message
        ):
            if not isinstance(record.error, PollFailure):  # that one logged itself
                logger.error("%s", record.error.message)
            return record.error
        async with self._load_slots:
            try:
                folder, root, raw = await asyncio.to_thread(self._read_config, record)
                prepared = await self._bounded(
                    lambda: self._prepare_blocking(record, folder, root, raw),
                    timeout_parameter(raw, LOAD_TIMEOUT_PARAMETER, record.name),
                    f"failed to load '{record.name}': its repository agents and config "
                    "auto-complete",
                    self._release_late_prepare,
                )
            except Exception as exc:
                error = load_error(exc, record.name)
                logger.error("failed to load '%s': %s", record.name, error.message)
                if not record.serving:
                    record.error = error
                    record.versions.clear()
                return error
        record.error = None
        record.dependencies = {}
        if is_ensemble(prepared.config):
            record.dependencies = step_models(prepared.config)
            prepared.members = self._members_of(record)
        return prepared

    def _read_config(self, record: ModelRecord) -> tuple[Path, Path, ModelConfig]:
        """The model's folder, its repository root and its config as written (blocking)."""
        assert record.source is not None or record.override is not None
        name = record.name
        if record.override is not None and record.override.folder is not None:
            folder, root = record.override.folder, record.override.folder.parent
        else:
            assert record.source is not None
            folder, root = record.source.materialize(name)
            record.fingerprint = record.source.fingerprint(name)
        record.folder = folder
        raw = (
            record.override.config
            if record.override is not None
            else read_model_config(
                name,
                folder,
                self._loader.options.model_config_name,
                mapped=record.source is not None and record.source.maps(name),
            )
        )
        return folder, root, raw

    def _prepare_blocking(
        self, record: ModelRecord, folder: Path, root: Path, raw: ModelConfig
    ) -> PreparedModel:
        """Agents' LOAD, then auto-complete and validation of the config (blocking)."""
        name = record.name
        location, agents = self._agents_load(record, raw, folder)
        try:
            if location != folder:
                folder, root = location, location.parent
            prepared = self._loader.prepare(name, folder, root, raw)
        except Exception:
            agents.send(AgentAction.LOAD_FAIL)
            raise
        prepared.agents = agents
        return prepared

    def _agents_load(
        self, record: ModelRecord, raw: ModelConfig, folder: Path
    ) -> tuple[Path, AgentSet]:
        """LOAD to each agent the config lists, in order; an agent may move the model."""
        location = folder
        active: list[tuple[RepositoryAgent, AgentModel]] = []
        for entry in raw.model_repository_agents.agents:
            agent = self._agent(entry.name, record.name)
            seen = AgentModel(record.name, location, raw, dict(entry.parameters), folder)
            try:
                moved = agent.act(AgentAction.LOAD, seen)
            except Exception as exc:
                notify(active, AgentAction.LOAD_FAIL)
                if isinstance(exc, TritonError):
                    raise TritonError(
                        exc.status,
                        f"repository agent '{entry.name}' failed to load model "
                        f"'{record.name}': {exc.message}",
                    ) from None
                raise internal(
                    f"repository agent '{entry.name}' failed for model '{record.name}': {exc}"
                ) from None
            active.append((agent, seen))
            if moved is not None:
                location = Path(moved)
        for _, seen in active:  # later actions see where the model now is
            seen.location = location
        return location, AgentSet(active)

    def _agent(self, name: str, model: str) -> RepositoryAgent:
        agent = self._agent_objects.get(name)
        if agent is None:
            registration = self._agents.get(name)
            if registration is None:
                raise invalid_arg(
                    f"model '{model}' lists repository agent '{name}' in "
                    "'model_repository_agents', which no installed plugin provides "
                    f"(available: {', '.join(self._agents.names()) or 'none'})"
                )
            agent = self._agent_objects[name] = registration.value()
        return agent

    @staticmethod
    async def _agents_send(agents: AgentSet, action: AgentAction) -> None:
        """``action`` to a set's agents off the loop; a hung agent holds only this await."""
        if agents.agents:
            await run_detached(lambda: agents.send(action), f"agents:{action.value}")
        else:
            agents.send(action)

    async def _swap_in(self, record: ModelRecord, prepared: PreparedModel) -> TritonError | None:
        """Load the selected versions beside the serving ones, then swap and retire the old.

        A first load keeps the versions that loaded; a reload keeps the old versions unless
        every new one loaded.
        """
        reloading = record.serving
        new_states: dict[int, VersionState] = {}
        errors: list[tuple[int, TritonError]] = []
        if not reloading:
            record.versions = {version: VersionState(LOADING) for version in prepared.versions}
        async with self._load_slots:
            for version in prepared.versions:
                state = VersionState(LOADING)
                try:
                    state.model = await self._load_version(prepared, version)
                    if self._namespacing and record.source is not None:
                        state.model.statistics.namespace = record.source.location
                    self._live.add(state.model)
                    state.state = READY
                    logger.info("successfully loaded '%s' version %d", record.name, version)
                except Exception as exc:
                    error = load_error(exc, record.name)
                    state.state, state.reason = UNAVAILABLE, error.message
                    logger.error(
                        "failed to load '%s' version %d: %s", record.name, version, error.message
                    )
                    errors.append((version, error))
                new_states[version] = state
                if not reloading:
                    record.versions[version] = state
        if reloading and errors:
            # as Triton: release what the failed reload loaded, then LOAD_FAIL
            loaded = [state.model for state in new_states.values() if state.model is not None]
            for model in loaded:
                model.retired = True
            await asyncio.gather(*(self._unload_model(model) for model in loaded))
            await self._agents_send(prepared.agents, AgentAction.LOAD_FAIL)
            logger.error("reload of '%s' failed; the loaded versions keep serving", record.name)
            return versions_failure(record.name, errors)
        action = AgentAction.LOAD_FAIL if errors else AgentAction.LOAD_COMPLETE
        await self._agents_send(prepared.agents, action)
        new = {state.model for state in new_states.values()}
        old = [
            s.model for s in record.versions.values() if s.model is not None and s.model not in new
        ]
        old_agents, record.agents = record.agents, prepared.agents
        record.versions = new_states
        record.refresh_latest()
        if old:
            for model in old:
                model.retired = True
            await self._agents_send(old_agents, AgentAction.UNLOAD)
            self._retire(old, old_agents)
        return versions_failure(record.name, errors) if errors else None

    async def _load_version(self, prepared: PreparedModel, version: int) -> LoadedModel:
        """One version, within the config's ``load_timeout_secs`` if it sets one; a failed
        load is tried again up to ``--model-load-retry-count`` times, as Triton does."""
        name = prepared.config.name
        retries = self._loader.options.model_load_retry_count
        for attempt in range(retries + 1):
            try:
                return await self._bounded(
                    lambda: self._loader.load_version(prepared, version),
                    timeout_parameter(prepared.config, LOAD_TIMEOUT_PARAMETER),
                    f"failed to load '{name}' version {version}: the load",
                    self._release_late_load,
                )
            except Exception as exc:
                if attempt == retries:
                    raise
                logger.warning(
                    "failed to load '%s' version %d (attempt %d of %d), trying again: %s",
                    name,
                    version,
                    attempt + 1,
                    retries + 1,
                    load_error(exc, name).message,
                )
        raise AssertionError("unreachable: the last attempt returns or raises")

    @staticmethod
    async def _bounded(
        call: Callable[[], T], timeout: float | None, what: str, late: Callable[[T], None]
    ) -> T:
        """``call`` off the loop, within ``timeout`` seconds (None: unbounded).

        Past it, raises UNAVAILABLE "<what> did not finish within load_timeout_secs=<n>"; the
        call's thread cannot be stopped and is abandoned, and ``late`` gets what it returns
        if it ever does.
        """
        if timeout is None:
            return await asyncio.to_thread(call)
        try:
            return await asyncio.wait_for(run_detached(call, "load", late=late), timeout)
        except TimeoutError:
            message = f"{what} did not finish within {LOAD_TIMEOUT_PARAMETER}={timeout:g}"
            logger.error("%s; its thread is abandoned", message)
            raise unavailable(message) from None

    def _release_late_prepare(self, prepared: PreparedModel) -> None:
        logger.warning(
            "the timed-out preparation of '%s' finished after all: its agents get LOAD_FAIL",
            prepared.config.name,
        )
        task = asyncio.create_task(self._agents_send(prepared.agents, AgentAction.LOAD_FAIL))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    def _release_late_load(self, model: LoadedModel) -> None:
        logger.warning(
            "the timed-out load of '%s' version %d finished after all: unloading it",
            model.name,
            model.version,
        )
        model.retired = True
        self._retire([model], AgentSet())

    def _retire(self, models: list[LoadedModel], agents: AgentSet) -> None:
        """Let a replaced version set finish what it accepted, then unload it; its agents
        get UNLOAD_COMPLETE once every version has unloaded."""
        task = asyncio.create_task(self._retire_set(models, agents))
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    async def _retire_set(self, models: list[LoadedModel], agents: AgentSet) -> None:
        await asyncio.gather(*(self._unload_model(model) for model in models))
        await self._agents_send(agents, AgentAction.UNLOAD_COMPLETE)

    # -- ensembles load after the models they use ------------------------------------------

    async def _load_ensembles(
        self, ensembles: dict[str, tuple[ModelRecord, PreparedModel]]
    ) -> list[TritonError | None]:
        order, cycles = ensemble_load_order(
            {
                key: {self._member_key(record, member) for member in record.dependencies}
                for key, (record, _) in ensembles.items()
            }
        )
        errors: list[TritonError | None] = []
        for key, error in cycles.items():
            record, prepared = ensembles[key]
            await self._agents_send(prepared.agents, AgentAction.LOAD_FAIL)
            record.error = error
            logger.error("failed to load '%s': %s", record.name, error.message)
            errors.append(error)
        for key in order:  # one at a time: an ensemble may use the ones before it
            errors.append(await self._load_checked(*ensembles[key]))
        return errors

    async def _load_checked(
        self, record: ModelRecord, prepared: PreparedModel
    ) -> TritonError | None:
        """Load a prepared model whose ensemble members (if any) are already loaded."""
        error = self._members_error(record)
        if error is not None:
            await self._agents_send(prepared.agents, AgentAction.LOAD_FAIL)
            if not record.serving:
                record.error = error
            logger.error("failed to load '%s': %s", record.name, error.message)
            return error
        return await self._swap_in(record, prepared)

    # -- the repository API: load, unload, poll --------------------------------------------

    async def load(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        """Load or reload a model (and, for an ensemble, the models it uses).

        ``config`` (JSON) replaces the repository's config; ``files`` (``<version>/<path>`` ->
        bytes) build the model from uploaded files and need ``config``. Raises the load error;
        a failed reload leaves the serving versions serving. With namespacing, a name in
        several repositories loads the model of that name in each.
        """
        problem = load_name_problem(name)
        if problem is not None:
            raise invalid_arg(problem)
        if len(name.encode()) > MAX_COMPONENT_BYTES:
            raise PollFailure(name, f"model name is longer than {MAX_COMPONENT_BYTES} bytes")
        if not safe_model_name(name):
            raise PollFailure(name, NOT_IN_REPOSITORY)
        if files and config is None:
            raise PollFailure(
                name, "Load parameter 'config' must be specified for model file override"
            )
        try:
            if self._namespacing:
                await self._rescan_for_load(name)
            for key in await self._keys_for_load(name):
                await self._load_key(key, config, files, "", frozenset())
        except TritonError as error:
            raise load_failure(name, error) from None

    async def _keys_for_load(self, name: str) -> list[str]:
        if name in self._models or not self._namespacing:
            return [name]
        records = await asyncio.to_thread(self.discover)
        for key, found in records.items():
            self._models.setdefault(key, found)
        named = self._records_named(name)
        return [record.key for record in named] if len(named) > 1 else [name]

    async def _load_key(
        self,
        key: str,
        config: str | None,
        files: dict[str, bytes] | None,
        loaded_by: str,
        visiting: frozenset[str],
    ) -> None:
        """Load the record ``key`` (a model name, or a namespaced key for members)."""
        record = await self._record_for_load(key, uploaded=bool(files))
        record.loading = True
        try:
            await self._load_record(record, config, files, loaded_by, visiting)
        finally:
            record.loading = False

    async def _load_record(
        self,
        record: ModelRecord,
        config: str | None,
        files: dict[str, bytes] | None,
        loaded_by: str,
        visiting: frozenset[str],
    ) -> None:
        name = record.name
        async with record.lock:
            record.override = (
                self._build_override(name, config, files or {}, record.key)
                if config is not None
                else None
            )
            record.wanted = True
            record.loaded_by.add(loaded_by)
            prepared = await self._prepare(record)
            if isinstance(prepared, TritonError):
                raise prepared
        try:
            await self._load_members(record, visiting)
        except BaseException:
            await self._agents_send(prepared.agents, AgentAction.LOAD_FAIL)
            raise
        async with record.lock:
            error = (
                await self._load_checked(record, prepared)
                if record.dependencies
                else await self._swap_in(record, prepared)
            )
        if error is not None:
            raise error

    async def _load_members(self, record: ModelRecord, visiting: frozenset[str]) -> None:
        """Load the models an ensemble's steps call that are not loaded yet."""
        name = record.name
        for member in sorted(record.dependencies):
            key = self._member_key(record, member)
            if key in visiting or key == record.key:
                raise invalid_arg(f"circular dependency between ensembles: {name} -> {member}")
            member_record = self._models.get(key)
            if member_record is None or member_record.latest is None:
                await self._load_key(key, None, None, record.key, visiting | {record.key})
            else:
                member_record.loaded_by.add(record.key)

    async def _record_for_load(self, name: str, uploaded: bool) -> ModelRecord:
        """The model's record; a model built from uploaded files needs no repository folder."""
        record = self._models.get(name)
        if record is None or record.source is None:
            records = await asyncio.to_thread(self.discover)
            for found_name, found in records.items():
                self._models.setdefault(found_name, found)
            record = self._models.get(name)
        if record is None and uploaded:
            record = self._models[name] = ModelRecord(name, None)
        if record is None or (record.source is None and not uploaded):
            raise PollFailure(name, NOT_IN_REPOSITORY)
        return record

    def _build_override(
        self, name: str, config: str, files: dict[str, bytes], key: str = ""
    ) -> LoadOverride:
        try:
            parsed = config_from_json(config, "the load request's 'config' parameter")
        except TritonError as error:
            raise PollFailure(name, f"Invalid config override: {error.message}") from None
        if parsed.name and parsed.name != name:
            raise PollFailure(
                name,
                f"unexpected directory name '{name}' for model '{parsed.name}', directory "
                "name must equal model name",
            )
        if not files:
            return LoadOverride(parsed)
        # one folder per model name; a namespaced model of that name gets one of its own
        folder = self._override_root / name
        if key and key != name:
            folder = self._override_root / f"{name}-{hashlib.sha256(key.encode()).hexdigest()[:12]}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        for key, content in files.items():
            _write_override_file(folder, key, content, name)
        return LoadOverride(parsed, folder)

    async def unload(self, name: str, unload_dependents: bool = False) -> None:
        """Stop serving a model: requests it accepted finish first. Unloading a model that is
        not loaded does nothing. ``unload_dependents`` also unloads the models that an
        ensemble loaded along with it."""
        if name not in self._models:
            check_name(name, self._describe_sources())
        named = [self._models[name]] if name in self._models else self._records_named(name)
        for record in named:
            await self._unload_with_dependents(record, unload_dependents)

    async def _unload_with_dependents(self, record: ModelRecord, dependents: bool) -> None:
        async with record.lock:
            await self._unload_record(record)
        if dependents:
            for member in sorted(record.dependencies):
                member_record = self._models.get(self._member_key(record, member))
                if member_record is None:
                    continue
                member_record.loaded_by.discard(record.key)
                if not member_record.loaded_by:
                    await self._unload_with_dependents(member_record, True)

    async def _unload_record(self, record: ModelRecord) -> None:
        record.wanted = False
        record.loaded_by.clear()
        record.error = None
        models = [state.model for state in record.versions.values() if state.model is not None]
        await self._agents_send(record.agents, AgentAction.UNLOAD)
        record.latest = None
        for state in record.versions.values():
            if state.model is not None:
                state.state = UNLOADING
        for model in models:
            model.retired = True
        await asyncio.gather(*(self._unload_model(model) for model in models))
        for state in record.versions.values():
            state.model = None
            state.state, state.reason = UNAVAILABLE, UNLOADED_REASON
        await self._agents_send(record.agents, AgentAction.UNLOAD_COMPLETE)
        record.agents = AgentSet()
        if record.override is not None and record.override.folder is not None:
            shutil.rmtree(record.override.folder, ignore_errors=True)
        record.override = None
        if record.source is not None:
            await asyncio.to_thread(record.source.release, record.name)

    async def _unload_model(self, model: LoadedModel) -> None:
        try:
            await model.unload()
            logger.info("successfully unloaded '%s' version %d", model.name, model.version)
        except Exception:
            logger.exception("unloading '%s' version %d failed", model.name, model.version)
        finally:
            self._live.discard(model)

    async def poll(self) -> None:
        """One pass of poll mode: load added models, unload removed ones, reload changed ones.

        A failure to read a repository is logged and leaves every model as it is.
        """
        changes = await self.poll_changes()
        if changes is None:
            return
        removed, changed = changes
        for record in removed:
            await self._drop_removed(record)
        if changed:
            await self._load_many(changed)

    async def _drop_removed(self, record: ModelRecord) -> None:
        """A model no longer found under its key: unloaded, and no longer in a repository."""
        if record.serving or record.wanted:
            logger.info("model '%s' was removed from the repository: unloading it", record.name)
            async with record.lock:
                await self._unload_record(record)
        record.source = None

    async def _rescan_for_load(self, name: str) -> None:
        """With namespacing, a load request looks at the repositories again (Triton polls
        them for it): a model that moved to another key is unloaded under the old one, and
        loaded ensembles other than ``name`` resolve their steps again."""
        removed, resolving = await self.rekeyed_for_load()
        for record in removed:
            await self._drop_removed(record)
        resolving = [record for record in resolving if record.name != name]
        if resolving:
            await self._load_many(resolving)

    # -- shutdown --------------------------------------------------------------------------

    async def unload_all(self) -> None:
        """Unload every loaded version; requests already accepted finish first."""
        records = [record for record in self._models.values() if record.serving]
        await asyncio.gather(*(self._unload_locked(record) for record in records))
        if self._retiring:
            await asyncio.gather(*list(self._retiring), return_exceptions=True)

    async def finalize_agents(self) -> None:
        """Each agent's :meth:`~RepositoryAgent.finalize`, once, at server stop."""
        agents, self._agent_objects = self._agent_objects, {}
        for name, agent in agents.items():
            try:
                await run_detached(agent.finalize, f"agent:{name}:finalize")
            except Exception:
                logger.exception("finalizing repository agent '%s' failed", name)

    async def _unload_locked(self, record: ModelRecord) -> None:
        async with record.lock:
            await self._unload_record(record)

    def abort_running(self) -> int:
        """The stop deadline passed: every loaded version's instances end what they run now.

        Safe from any thread (the exit watchdog calls it while the loop may be stuck).
        Returns how many model versions were still loaded.
        """
        models = list(self._live)
        for model in models:
            logger.warning("aborting model '%s' version %d", model.name, model.version)
            model.pool.abort()
        return len(models)

    def close(self) -> None:
        """Remove local copies of cloud models and uploaded overrides."""
        for source in self.sources:
            source.close()
        shutil.rmtree(self._override_root, ignore_errors=True)
