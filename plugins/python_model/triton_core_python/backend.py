"""The ``python`` backend: Triton's ``model.py`` files, each instance in a process of its own.

* :class:`PythonBackend` completes configs with the model's ``auto_complete_config`` (run
  in a throwaway interpreter, as Triton does) and loads models.
* :class:`PythonModel` holds what every instance of a model version shares.
* :class:`PythonInstance` owns one stub process (:class:`~triton_core_python.process.StubProcess`)
  and restarts it when it dies: the batch it was running fails with UNAVAILABLE, the next
  one runs on the new process.

Backend settings (``--backend-config=python,<key>=<value>``):

* ``shm-default-byte-size``: first shared-memory segment per instance and side (1 MiB);
  segments grow on demand, there is no upper bound but memory;
* ``shm-directory``: put segments in this tmpfs directory instead of anonymous memory
  (``memfd``), e.g. on hosts without ``memfd_create``;
* ``stub-timeout-seconds``: how long ``finalize`` may take at unload (30);
* ``execution-env-directory``: where packed ``EXECUTION_ENV_PATH`` archives are unpacked
  (a folder in the system's temporary folder);
* ``execution-env-max-bytes``: the most an archive may unpack to (32 GiB);
* ``metrics-per-model``: how many ``pb_utils.MetricFamily`` and ``Metric`` objects the
  instances of one model may hold at once (4096);
* ``instance-thread``: ``yes`` drives each instance from a worker thread, as other backends
  are, instead of from the event loop (slower; for comparison);
* ``stub-policy``: ``batch`` (default) runs the stubs under Linux ``SCHED_BATCH``: a stub
  woken by the server does not preempt the server's event loop, which keeps serving other
  requests meanwhile (about +15% under load, a few percent of latency at concurrency 1);
  ``normal`` keeps the default policy.
* ``stub-spin-us``: while a batch is all the server has in flight, the stub polls this long
  for its next batch after answering, and the event loop for the answer, instead of
  sleeping (500; 0 never polls; at most 10000).

Triton's ``shm-growth-byte-size``, ``shm-region-prefix-name``, ``shm_message_queue_size``
and ``thread-pool-size`` are accepted and have nothing to set here.
"""

from __future__ import annotations

import ast
import asyncio
import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from google.protobuf import json_format

from triton_core import (
    Backend,
    BackendModel,
    EventDrivenInstance,
    InstanceSpec,
    ModelConfig,
    ModelContext,
    ModelInstance,
    TritonError,
    config_to_json,
    input_reshapes,
    internal,
    invalid_arg,
    output_reshapes,
    unavailable,
    wire_datatype,
)
from triton_core_python import environment
from triton_core_python.launch import StubDied, StubSettings, stub_command
from triton_core_python.metrics import DEFAULT_MAX_HANDLES, ModelMetricBudget
from triton_core_python.process import StubProcess

if TYPE_CHECKING:
    from triton_core import InferenceRequest, InferenceResponse

logger = logging.getLogger("triton_core_python")

#: seconds between restart attempts of an instance whose process keeps failing to start
_RESTART_BACKOFF = 1.0
#: seconds ``auto_complete_config`` may take (it imports the model's libraries)
_AUTO_COMPLETE_TIMEOUT = 300.0
#: seconds a model-ready request waits for ``is_ready()`` (Triton's 5 s)
READINESS_TIMEOUT = 5.0
#: ``stub-spin-us``: how long a stub polls for the next batch after answering one
DEFAULT_SPIN_US = 500
MAX_SPIN_US = 10_000


def _int_option(
    options: dict[str, str], key: str, default: int, minimum: int = 1, maximum: int | None = None
) -> int:
    value = options.get(key)
    if value is None:
        return default
    try:
        number = int(value)
    except ValueError:
        raise invalid_arg(f"--backend-config=python,{key}={value}: expected an integer") from None
    if number < minimum:
        expected = "a positive integer" if minimum == 1 else f"an integer from {minimum}"
        raise invalid_arg(f"--backend-config=python,{key}={value}: expected {expected}")
    if maximum is not None and number > maximum:
        raise invalid_arg(f"--backend-config=python,{key}={value}: at most {maximum}")
    return number


class PythonBackend(Backend):
    """Backend ``python``: ``<version>/model.py`` with a class ``TritonPythonModel``."""

    name: ClassVar[str] = "python"
    default_model_filename: ClassVar[str] = "model.py"

    def __init__(self, options: dict[str, str] | None = None) -> None:
        super().__init__(options)
        self.shm_size = _int_option(self.options, "shm-default-byte-size", 1 << 20)
        self.shm_directory = self.options.get("shm-directory") or None
        self.finalize_timeout = float(_int_option(self.options, "stub-timeout-seconds", 30))
        self.env_directory = Path(
            self.options.get("execution-env-directory") or environment.default_cache_directory()
        )
        self.env_max_bytes = _int_option(
            self.options, "execution-env-max-bytes", environment.DEFAULT_MAX_BYTES
        )
        self.metrics_per_model = _int_option(self.options, "metrics-per-model", DEFAULT_MAX_HANDLES)
        self.stub_policy = self.options.get("stub-policy", "batch").lower()
        if self.stub_policy not in ("batch", "normal"):
            raise invalid_arg(
                f"--backend-config=python,stub-policy={self.stub_policy}: expected 'batch' or "
                "'normal'"
            )
        self.stub_spin_us = _int_option(
            self.options, "stub-spin-us", DEFAULT_SPIN_US, minimum=0, maximum=MAX_SPIN_US
        )
        #: run each instance on a worker thread (the core's default) instead of the loop
        self.instance_thread = self.options.get("instance-thread", "no").lower() in (
            "yes",
            "true",
            "1",
            "on",
        )

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:
        """Run the model's ``auto_complete_config`` (when it has one) on ``config``."""
        self._complete(config, model_path, None)

    def _complete(self, config: ModelConfig, model_path: Path, version_dir: Path | None) -> None:
        """``auto_complete_config`` of ``model_path``; ``version_dir``: it is a Python-based
        backend's, completing the model of that version folder."""
        if not model_path.is_file():
            return  # the load reports the missing file
        try:
            source = model_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return
        # Triton imports the model and asks its class. That costs a process and the model's
        # imports, so it is skipped where model.py alone shows the class cannot have one.
        if not may_auto_complete(source):
            return
        model_dir = model_path.parent.parent if version_dir is None else version_dir.parent
        python = _interpreter(self, config, model_dir)
        completed = run_auto_complete(python, model_path, config_to_json(config), version_dir)
        updated = ModelConfig()
        try:
            json_format.ParseDict(completed, updated)
        except json_format.ParseError as exc:
            raise invalid_arg(
                f"auto_complete_config of model '{config.name}' returned an invalid model "
                f"configuration: {exc}"
            ) from None
        updated.name = config.name
        config.CopyFrom(updated)

    def load_model(self, context: ModelContext) -> BackendModel:
        return PythonModel(self, context)


class PythonBasedBackend(PythonBackend):
    """One of Triton's Python-based backends: ``<backend folder>/<name>/model.py`` serves
    every model whose config says ``backend: "<name>"`` (Triton's vLLM backend is one).

    The model's folder holds no ``model.py``; its version folder holds what the backend
    reads there (vLLM's ``model.json``), found through ``args["model_repository"]`` and
    ``pb_utils.get_model_dir()`` as under the ``python`` backend. The backend's folder is on
    the stub's ``sys.path``, so its ``model.py`` imports its own modules.
    """

    #: the backend's ``model.py`` (set on each subclass :func:`python_based_backends` makes)
    backend_model_path: ClassVar[Path]

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:
        # model_path names the model's newest version folder, where it holds no model.py
        self._complete(config, self.backend_model_path, model_path.parent)


def python_based_backends(
    folders: tuple[Path, ...], taken: Collection[str]
) -> list[type[PythonBasedBackend]]:
    """A backend class for each ``<folder>/<name>/model.py`` in ``folders`` whose ``name``
    is not ``taken`` (a plugin's backend wins) and whose folder holds no
    ``libtriton_<name>.so`` (Triton then loads the library); the first folder wins a name."""
    found: dict[str, Path] = {}
    for folder in folders:
        try:
            entries = sorted(folder.iterdir())
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if name in found or name in taken or name == PythonBackend.name:
                continue
            model_py = entry / "model.py"
            if model_py.is_file() and not (entry / f"libtriton_{name}.so").exists():
                found[name] = model_py
    return [
        type(
            f"PythonBasedBackend[{name}]",
            (PythonBasedBackend,),
            {"name": name, "backend_model_path": model_py, "__module__": __name__},
        )
        for name, model_py in found.items()
    ]


# CPython 3.11 keeps the AST converter's recursion depth per interpreter: two threads in
# ast.parse at once (models load on several threads) fail with "AST constructor recursion
# depth mismatch" (python/cpython#106905). One parse at a time.
_AST_PARSE = threading.Lock()


def may_auto_complete(source: str) -> bool:
    """Whether the ``TritonPythonModel`` of ``source`` may have ``auto_complete_config``.

    False only when nothing in the file names the method and the file itself defines the
    class, once, with no base class, metaclass or decorator, and imports no names with
    ``*``: the class then has only what its body defines. A class from an import, a base
    class, or a file that does not parse (the load reports it) may have it.
    """
    if "auto_complete_config" in source:
        return True
    try:
        with _AST_PARSE:
            tree = ast.parse(source)
    except SyntaxError:
        return False
    definitions = 0
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and any(alias.name == "*" for alias in node.names):
            return True
        if _binds_model_class(node):
            if not isinstance(node, ast.ClassDef) or node.bases or node.keywords:
                return True
            if node.decorator_list:
                return True
            definitions += 1
    return definitions != 1


def _binds_model_class(node: ast.AST) -> bool:
    """Whether ``node`` binds the name ``TritonPythonModel`` (class, assignment, import)."""
    name = "TritonPythonModel"
    if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name == name
    if isinstance(node, ast.Name):
        return node.id == name and isinstance(node.ctx, ast.Store | ast.Del)
    if isinstance(node, ast.Import | ast.ImportFrom):
        return any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names)
    return False


def run_auto_complete(
    python: str, model_path: Path, config: dict, version_dir: Path | None = None
) -> dict:
    """``TritonPythonModel.auto_complete_config`` in a throwaway interpreter (``version_dir``:
    ``model_path`` is a Python-based backend's, completing that version's model)."""
    read_fd, write_fd = os.pipe()
    arguments = ["--auto-complete", str(model_path), "--result-fd", str(write_fd)]
    if version_dir is not None:
        arguments += ["--version-dir", str(version_dir)]
    command, env = stub_command(python, *arguments)
    try:
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            pass_fds=(write_fd,),
            env=env,
        )
    except OSError as exc:
        os.close(read_fd)
        os.close(write_fd)
        raise internal(f"cannot run auto_complete_config of {model_path}: {exc}") from None
    os.close(write_fd)
    try:
        assert process.stdin is not None
        try:
            process.stdin.write(json.dumps(config).encode())
            process.stdin.close()
        except BrokenPipeError:
            pass
        with os.fdopen(read_fd, "rb") as result:
            data = result.read()
        process.wait(_AUTO_COMPLETE_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise internal(
            f"auto_complete_config of {model_path} did not finish in {_AUTO_COMPLETE_TIMEOUT:.0f} s"
        ) from None
    if not data:
        raise internal(
            f"auto_complete_config of {model_path} failed: its process exited with status "
            f"{process.returncode}"
        )
    outcome = json.loads(data)
    if "error" in outcome:
        raise invalid_arg(f"auto_complete_config of {model_path} failed: {outcome['error']}")
    return outcome["config"]


def _interpreter(backend: PythonBackend, config: ModelConfig, model_dir: Path) -> str:
    """The Python that runs the stubs: the server's, or ``EXECUTION_ENV_PATH``'s."""
    if "EXECUTION_ENV_PATH" not in config.parameters:
        return sys.executable
    location = config.parameters["EXECUTION_ENV_PATH"].string_value
    folder = environment.resolve(
        config.name, location, model_dir, backend.env_directory, backend.env_max_bytes
    )
    return environment.python_of(config.name, folder, location)


#: what Triton's Python backend (2.7x) refuses in the names its stub processes carry: the
#: model's, and each instance's
_STUB_NAME_REFUSED: Final = frozenset(";|&$`<>()[]{}\\\"'*?~#!")


def _check_stub_name(name: str) -> None:
    if not name or not _STUB_NAME_REFUSED.isdisjoint(name):
        raise invalid_arg("Invalid stub name: contains invalid characters")


class PythonModel(BackendModel):
    """One version of a Python model: what its instances share."""

    def __init__(self, backend: PythonBackend, context: ModelContext) -> None:
        _check_stub_name(context.name)
        config = context.config
        #: the model.py the stubs load: the version folder's, or a Python-based backend's
        self.model_path = (
            backend.backend_model_path
            if isinstance(backend, PythonBasedBackend)
            else context.model_path
        )
        if not self.model_path.is_file():
            raise invalid_arg(
                "Failed to preinitialize Python stub: Python model file not found in "
                f"'{self.model_path}'"
            )
        self.backend = backend
        self.context = context
        self.python = _interpreter(backend, config, context.model_dir)
        self.config_json = json.dumps(config_to_json(config))
        self.output_names = tuple(output.name for output in config.output)
        # numpy has no bfloat16: a model returns their bits as uint16, labelled BF16 here
        self.bf16_outputs = frozenset(
            output.name for output in config.output if wire_datatype(output.data_type) == "BF16"
        )
        self.decoupled = config.model_transaction_policy.decoupled
        # the model sees (and returns) a config reshape's shape, the client the dims
        self.input_reshapes = input_reshapes(config)
        self.output_reshapes = output_reshapes(config)
        self.metric_budget = ModelMetricBudget(context.name, backend.metrics_per_model)

    def settings(self, spec: InstanceSpec) -> StubSettings:
        context = self.context
        args = {
            "model_config": self.config_json,
            "model_instance_kind": spec.kind,
            "model_instance_name": spec.name,
            "model_instance_device_id": str(spec.device_id),
            "model_repository": str(context.model_dir),
            "model_version": str(context.version),
            "model_name": context.name,
        }
        return StubSettings(
            model_name=context.name,
            model_version=context.version,
            instance_name=spec.name,
            model_path=self.model_path,
            model_dir=context.model_dir,
            version_dir=context.version_dir if self.model_path != context.model_path else None,
            decoupled=self.decoupled,
            output_names=self.output_names,
            bf16_outputs=self.bf16_outputs,
            input_reshapes=self.input_reshapes,
            output_reshapes=self.output_reshapes,
            args=args,
            python=self.python,
            shm_size=self.backend.shm_size,
            shm_directory=self.backend.shm_directory,
            policy=self.backend.stub_policy,
            cpus=spec.cpus,
            spin_us=self.backend.stub_spin_us,
        )

    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        _check_stub_name(spec.name)
        return PythonInstance(self, spec)


class UserReadiness:
    """The model's ``is_ready()`` for one instance, as Triton asks it: one call at a time;
    requests that come while one runs share its answer. A call that outlasts
    :data:`READINESS_TIMEOUT` goes on, and the next request waits for it."""

    def __init__(self, instance_name: str) -> None:
        self.instance_name = instance_name
        self._pending: asyncio.Future[tuple[bool, str | None]] | None = None

    async def check(self, stub: StubProcess) -> None:
        pending = self._pending
        if pending is None:
            pending = self._pending = asyncio.get_running_loop().create_future()
            stub.ask_readiness(lambda answer: self._answered(pending, answer))
            late = "Timed out waiting for user-defined is_ready() response"
        else:
            late = "Timed out waiting for in-flight is_ready() response"
        try:
            ready, error = await asyncio.wait_for(asyncio.shield(pending), READINESS_TIMEOUT)
        except TimeoutError:
            raise unavailable(late) from None
        if error is not None:
            raise internal(error)
        if not ready:
            raise unavailable(
                f"Model '{self.instance_name}' is not ready (user-defined check failed)."
            )

    def _answered(
        self, pending: asyncio.Future[tuple[bool, str | None]], answer: tuple[bool, str | None]
    ) -> None:
        if self._pending is pending:
            self._pending = None
        if not pending.done():
            pending.set_result(answer)


class PythonInstance(EventDrivenInstance):
    """A model instance: one stub process, restarted when it dies.

    With a server loop the instance is event-driven: the pool hands it batches on the loop
    (:meth:`begin_execute`) and the stub's answers are read there, so a batch costs no
    thread hop. Without one (or with ``--backend-config=python,instance-thread=yes``) a
    worker thread blocks in :meth:`execute`.
    """

    def __init__(self, model: PythonModel, spec: InstanceSpec) -> None:
        self.model = model
        self.spec = spec
        self._settings = model.settings(spec)
        self._loop = model.context.loop
        self.event_driven = self._loop is not None and not model.backend.instance_thread
        # the next batch waits in the process's socket while one executes: the process goes
        # on to it without a round trip through the event loop
        self.max_batches_in_flight = 2 if self.event_driven else 1
        self._lock = threading.Lock()  # held while (re)starting or stopping the process
        self._closing = False
        self._restart_error: TritonError | None = None
        self._retry_at = 0.0
        #: batches waiting for the process to restart (event-driven mode)
        self._deferred: list[tuple[list[InferenceRequest], Any]] = []
        self.restarts = 0
        self._readiness = UserReadiness(spec.name)
        self._stub = self._spawn()

    @property
    def pid(self) -> int:
        """The process id of the instance's current stub (for tests and logs)."""
        return self._stub.pid

    def _spawn(self) -> StubProcess:
        context = self.model.context
        stub = StubProcess(
            self._settings,
            server=context.server,
            loop=context.loop,
            event_driven=self.event_driven,
            metric_budget=self.model.metric_budget,
        )
        stub.on_death = self._on_death
        stub.on_batch_died = lambda requests, done, died: self._batch_died(
            stub, requests, done, died
        )
        stub.start()
        return stub

    # -- readiness ------------------------------------------------------------------------------

    #: a dead process makes the instance unready, whether or not the model has is_ready()
    checks_readiness = True

    async def check_ready(self) -> None:
        """Triton's: the process is alive, and the model's ``is_ready()`` (if any) says yes."""
        stub = self._stub
        if stub.dead:
            raise internal(f"Stub process '{self.spec.name}' is not healthy.")
        if stub.has_is_ready:
            await self._readiness.check(stub)

    # -- worker-thread mode ---------------------------------------------------------------------

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse] | None:
        stub = self._current()
        try:
            return stub.execute(requests)
        except StubDied as died:
            stub.mark_dead()
            if died.sent:
                raise self._died_error(died) from None
        # The batch never reached the process (it had died idle): run it on a new one.
        stub = self._current()
        try:
            return stub.execute(requests)
        except StubDied as died:
            stub.mark_dead()
            raise self._died_error(died) from None

    def _current(self) -> StubProcess:
        stub = self._stub
        if not stub.dead:
            return stub
        with self._lock:  # waits for a restart in progress
            return self._restart_locked()

    # -- event-driven mode (on the event loop) --------------------------------------------------

    def begin_execute(self, requests: list[InferenceRequest], done: Any) -> None:
        stub = self._stub
        if stub.dead:
            self._defer(requests, done, stub)
            return
        try:
            stub.begin_execute(requests, done)
        except StubDied:
            self._defer(requests, done, stub)

    def _batch_died(
        self, stub: StubProcess, requests: list[InferenceRequest], done: Any, died: StubDied
    ) -> None:
        """A batch that ``stub`` never answered: failed if it reached the process, else kept."""
        if died.sent:
            done(self._died_error(died))
        else:
            self._defer(requests, done, stub)

    def _defer(self, requests: list[InferenceRequest], done: Any, stub: StubProcess) -> None:
        """Keep a batch that did not reach the process until a new one runs."""
        self._deferred.append((requests, done))
        threading.Thread(
            target=self._restart_in_background, args=(stub,), name="python-model-restart"
        ).start()

    def _resume(self) -> None:
        deferred, self._deferred = self._deferred, []
        for requests, done in deferred:
            if self._stub.dead:
                done(
                    self._restart_error
                    or unavailable(
                        f"model '{self._settings.model_name}' is unavailable: its Python "
                        "process ended"
                    )
                )
            else:
                self.begin_execute(requests, done)

    # -- deaths and restarts --------------------------------------------------------------------

    def _died_error(self, died: StubDied) -> TritonError:
        return unavailable(
            f"model '{self._settings.model_name}' instance '{self._settings.instance_name}': "
            f"the Python process {died.description} while executing the request; the "
            "instance is restarting"
        )

    def _on_death(self, stub: StubProcess) -> None:
        if self._closing:
            return
        logger.error(
            "the Python process of model '%s' instance '%s' (pid %d) %s; restarting it",
            self._settings.model_name,
            self._settings.instance_name,
            stub.pid,
            stub.exit_description(0.0),
        )
        threading.Thread(
            target=self._restart_in_background, args=(stub,), name="python-model-restart"
        ).start()

    def _restart_in_background(self, stub: StubProcess) -> None:
        with self._lock:
            if self._stub is stub and not self._closing:
                try:
                    self._restart_locked()
                except TritonError as error:
                    logger.error("%s", error.message)
        if self._deferred and self._loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                self._loop.call_soon_threadsafe(self._resume)

    def _restart_locked(self) -> StubProcess:
        old = self._stub
        if not old.dead:
            return old
        if self._closing:
            raise unavailable(f"model '{self._settings.model_name}' is being unloaded")
        if not old.closing:
            old.closing = True
            old._shutdown(kill=True)
        if self._restart_error is not None and time.monotonic() < self._retry_at:
            raise self._restart_error
        try:
            self._stub = self._spawn()
        except TritonError as error:
            self._retry_at = time.monotonic() + _RESTART_BACKOFF
            self._restart_error = unavailable(
                f"model '{self._settings.model_name}' instance "
                f"'{self._settings.instance_name}' is unavailable: its Python process ended "
                f"and could not be restarted: {error.message}"
            )
            raise self._restart_error from None
        self._restart_error = None
        self.restarts += 1
        logger.warning(
            "restarted the Python process of model '%s' instance '%s' (pid %d)",
            self._settings.model_name,
            self._settings.instance_name,
            self._stub.pid,
        )
        return self._stub

    def interrupt(self) -> None:
        # a batch ran past execute_timeout_secs: end the process; as after any death, its
        # batches fail and a new process serves the next ones
        self._stub.kill()

    def abort(self) -> None:
        # the server's stop deadline passed: no finalize, the process goes now
        self._closing = True
        self._stub.kill()

    def finalize(self) -> None:
        self._closing = True
        with self._lock:
            self._stub.stop(self.model.backend.finalize_timeout)
