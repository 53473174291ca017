"""The backend contract: three levels of lifecycle, like Triton's backend API.

* :class:`Backend` - one object per backend name per server (``TRITONBACKEND_Initialize``);
  completes model configs and loads models.
* :class:`BackendModel` - one loaded model version (``TRITONBACKEND_ModelInitialize``);
  creates instances.
* :class:`ModelInstance` - one execution context (``TRITONBACKEND_ModelInstanceInitialize``);
  executes batches of requests.

All methods are synchronous. The server calls load and finalize methods off the event loop,
and ``execute`` on the instance's own worker thread, so backends that release the GIL
(ONNX Runtime, PyTorch) run instances in parallel.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Callable

    from triton_core.backends.services import ModelServices
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.types import InferenceRequest, InferenceResponse


@dataclass(frozen=True, slots=True)
class ModelContext:
    """Everything a backend needs to load one version of a model."""

    name: str
    version: int
    #: the auto-completed, normalised config (treat as read-only)
    config: ModelConfig
    #: ``<repository>/<model>``
    model_dir: Path
    #: ``<repository>/<model>/<version>``
    version_dir: Path
    #: ``version_dir / default_model_filename`` (a file or a folder)
    model_path: Path
    #: ``--backend-config=<backend>,<key>=<value>`` settings for this backend
    backend_options: dict[str, str] = field(default_factory=dict)
    #: the server, for models that call other models (Python BLS); None outside a server
    server: ModelServices | None = None
    #: the event loop the server runs on: await ``server``'s coroutines there
    loop: asyncio.AbstractEventLoop | None = None


@dataclass(frozen=True, slots=True)
class InstanceSpec:
    """One model instance to create, from the config's ``instance_group``."""

    #: ``<group name>_<index>``, as Triton names instances
    name: str
    #: "CPU", "GPU" or "MODEL"
    kind: str
    #: GPU ordinal for ``GPU`` instances, else 0
    device_id: int
    group_name: str
    #: the group is ``passive``: the instance is loaded but gets no requests
    passive: bool = False
    #: the group's ``host_policy`` ("" when none)
    host_policy: str = ""
    #: the CPUs that policy runs the instance's threads (and processes) on; None: any
    cpus: frozenset[int] | None = None


class ModelInstance(ABC):
    """An execution context of a model (a session, an engine, a process)."""

    #: ``execute`` may also be called on the server's event-loop thread, for a small batch
    #: of a model whose executions are short, when every instance is idle: it then skips
    #: two thread hand-offs (``--inline-execution-budget-us``). Set it only where
    #: ``execute`` keeps no per-thread state (nothing set in :meth:`thread_started`) and
    #: never waits on other work of the server.
    may_run_inline: bool = False
    #: opt in to device memory: inputs a client put in CUDA shared memory arrive as
    #: :class:`~triton_core.DeviceBuffer` (on any GPU: check ``device_id``) instead of host
    #: copies, and outputs it asked into CUDA shared memory are offered in
    #: ``request.device_outputs``. Only batches of one request carry them; see
    #: docs/writing_plugins.md. False: numpy arrays only, as always.
    accepts_device_tensors: bool = False
    #: whether :meth:`check_ready` has anything to ask; False: the instance is ready while
    #: its model version is, and nothing is called
    checks_readiness: bool = False

    @abstractmethod
    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """Run a batch of validated requests; return one response per request, in order.

        Called on this instance's worker thread, one batch at a time. Inputs are numpy arrays
        already checked against the config (datatype, shape, batch size), read-only, and may
        view memory the client shares (its shared-memory regions): copy what must outlive the
        request (sequence state, a cache), as in Triton. A response may carry
        ``error`` to fail just its request; raising fails the whole batch with the exception's
        message (a :class:`~triton_core.TritonError` keeps its status).
        """

    def thread_started(self) -> None:  # noqa: B027 - optional hook
        """Called once on this instance's worker thread, before its first :meth:`execute`.

        The thread runs this instance's batches only, for the instance's whole life: set
        per-thread framework state here (thread counts, the current device or stream, a grad
        mode) once instead of on every call. An exception is logged and the thread goes on.
        Not called for instances that run event-driven (:class:`EventDrivenInstance`).
        """

    def finalize(self) -> None:  # noqa: B027 - optional hook
        """Release what the instance holds. Called once, after its last ``execute``."""

    async def check_ready(self) -> None:  # noqa: B027 - optional hook
        """Raise :class:`~triton_core.TritonError` when the instance cannot serve now
        (Triton's ``TRITONBACKEND_ModelInstanceReady``); its message is logged.

        Awaited on the event loop by the model-ready endpoints (HTTP
        ``/v2/models/<m>/ready``, gRPC ``ModelReady``), only where :attr:`checks_readiness`
        is True, never on the inference path. Must not block the loop.
        """

    def interrupt(self) -> None:  # noqa: B027 - optional hook
        """A batch ran past the model's ``execute_timeout_secs``: end that call if you can.

        Called on the event loop, once per timed-out batch, while the call may still run.
        The batch has already failed and the instance is marked unhealthy; it takes batches
        again once the call returns (its results are dropped). An instance that runs in
        another process may kill it and let its next batch start a new one; a thread cannot
        be stopped, so the default does nothing. Must not block; exceptions are logged.
        """

    def abort(self) -> None:  # noqa: B027 - optional hook
        """The server's stop deadline passed while this instance may still be executing.

        Called at most once, from any thread, when ``--exit-timeout-secs`` runs out before
        the instance finished its work: end what runs now (kill a process, cancel a call)
        without waiting for ``execute`` or anything it holds. The server exits right after,
        with or without :meth:`finalize`; an exception is logged and ignored.
        """


class EventDrivenInstance(ModelInstance):
    """An instance that executes in another process and answers through a callback.

    The server drives it from the event loop with :meth:`begin_execute`, with no worker
    thread, so a batch costs no thread hop. An instance that can run this way only some of
    the time (e.g. only when it has a loop to run on) sets :attr:`event_driven` to False
    per object and is then run on a worker thread with :meth:`execute`, like any other.
    """

    #: whether this object runs event-driven; False: on a worker thread with :meth:`execute`.
    #: A model's instances are driven from the loop only when every one of them says True
    event_driven: bool = True
    #: batches the instance may hold at once. With 2, the default scheduler hands it the
    #: next batch while one executes (it waits in the instance's own queue, such as a
    #: socket), so the instance goes on to it without waiting for the event loop;
    #: schedulers that form batches when an instance frees up still hand over one at a time
    max_batches_in_flight: int = 1

    @abstractmethod
    def begin_execute(
        self,
        requests: list[InferenceRequest],
        done: Callable[..., None],
    ) -> None:
        """Start a batch and return at once (on the event loop).

        Called with at most :attr:`max_batches_in_flight` batches started and not yet
        done. Call ``done(result, times=None)`` exactly once per batch, on the event loop
        and not from within this call: ``result`` is what :meth:`execute` would return, or
        the exception that fails the batch; ``times``
        (:class:`~triton_core.ExecutionTimes`, optional) is when and how long the batch
        really ran, for the statistics, where it did not start at once.
        """

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        """Run a batch on a worker thread: only called while :attr:`event_driven` is False;
        override it if the instance may run that way."""
        raise NotImplementedError(
            f"{type(self).__name__} runs event-driven only: it has no execute()"
        )


class BackendModel(ABC):
    """One loaded version of a model."""

    @abstractmethod
    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        """Create one instance; raise :class:`~triton_core.TritonError` to fail the load."""

    def finalize(self) -> None:  # noqa: B027 - optional hook
        """Release model-wide resources. Called once, after every instance is finalized."""


class Backend(ABC):
    """A backend: loads models of one backend name (and its platform aliases)."""

    #: the ``backend`` name a config selects this backend by
    name: ClassVar[str]
    #: ``platform`` names that also select it (the first is filled in when a config has none)
    platforms: ClassVar[tuple[str, ...]] = ()
    #: file or folder in a version directory that holds the model
    default_model_filename: ClassVar[str]
    #: instances per ``KIND_CPU`` group when the config gives no count (Triton uses 2 for ORT)
    default_cpu_instance_count: ClassVar[int] = 1
    #: backend-specific config fields this backend honours, as paths of
    #: docs/model_config.md (``"optimization.graph"`` covers its fields); the core refuses
    #: (or warns about) such a field when the model's backend does not list it
    config_fields: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, options: dict[str, str] | None = None) -> None:
        self.options: dict[str, str] = dict(options or {})

    def runs_on_gpus(self) -> bool:
        """Whether this backend can run instances on this machine's GPUs.

        Called at load where GPUs exist. A ``KIND_AUTO`` instance group (as a config without
        instance groups gets) becomes ``KIND_GPU`` only then, as Triton's does where GPUs
        are, else ``KIND_CPU``: a backend without GPU support installed (onnxruntime
        without its CUDA provider) still loads such models on the CPU. An explicit
        ``KIND_GPU`` is not changed.
        """
        return True

    def auto_complete_config(self, config: ModelConfig, model_path: Path) -> None:  # noqa: B027
        """Fill what ``config`` leaves out (inputs, outputs, max_batch_size) from the model.

        Called at load, before normalisation, unless auto-complete is disabled; edits
        ``config`` in place. ``model_path`` is the model file of the newest version. Raise
        :class:`~triton_core.TritonError` for a model that contradicts its config.
        """

    @abstractmethod
    def load_model(self, context: ModelContext) -> BackendModel:
        """Load one model version; raise :class:`~triton_core.TritonError` on failure."""

    def finalize(self) -> None:  # noqa: B027 - optional hook
        """Called once when the server stops, after all its models are unloaded."""
