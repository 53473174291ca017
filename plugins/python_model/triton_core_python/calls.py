"""What a Python model asks of the server while it runs: BLS inference calls and model
management (``pb_utils.is_model_ready``, ``load_model``, ``unload_model``).

Each call runs as a task on the server's event loop and answers on the stub's events
socket, or a BLS call on the reply channel it names (:mod:`.replies`); the stub may cancel
a BLS call (its response iterator was dropped).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from triton_core import (
    InferenceRequest,
    InferenceResponse,
    RequestedOutput,
    RequestFlag,
    Status,
    Tensor,
    TritonError,
    internal,
    unavailable,
    unsupported,
)
from triton_core_python import ipc
from triton_core_python.codes import CODES
from triton_core_python.shm import SharedMemoryError
from triton_core_python.wire import Packer, unpack

if TYPE_CHECKING:
    import weakref

    from triton_core import ModelServices

logger = logging.getLogger("triton_core_python")

#: sends one message on the stub's events socket: (kind, ident, body, shared-memory block)
SendEvent = Callable[[int, int, Any, Any], None]
#: sends a BLS call's answer on the reply channel it named (0: events): (reply, ident, body,
#: shared-memory block)
SendAnswer = Callable[[int, int, Any, Any], None]


class ModelCalls:
    """The calls one stub process makes, as tasks on the server's loop."""

    def __init__(
        self,
        server: ModelServices | None,
        loop: asyncio.AbstractEventLoop | None,
        send_event: SendEvent,
        traces: weakref.WeakValueDictionary[int, Any],
        send_answer: SendAnswer | None = None,
    ) -> None:
        self._server = server
        self._loop = loop
        self._send_event = send_event
        self._send_answer: SendAnswer = send_answer or (
            lambda _, ident, body, block: send_event(ipc.BLS_RESPONSE, ident, body, block)
        )
        #: the traces of requests sent to the stub, by id: their BLS calls continue them
        self._traces = traces
        #: the process's shared memory, once it started
        self.memory: ipc.Memory | None = None
        self._tasks: dict[int, asyncio.Task[None]] = {}
        #: the requests of decoupled BLS calls in flight, by call
        self._streams: dict[int, InferenceRequest] = {}

    def start_infer(self, message: ipc.Message) -> None:
        """A BLS request: run it through the server, answer each response."""
        reply = message.body[11]
        coroutine = self._infer(message.ident, reply, message.body, message.block)
        self._start(message.ident, coroutine, reply)

    def start_management(self, message: ipc.Message) -> None:
        """A model-management call (ready, load, unload)."""
        self._start(message.ident, self._manage(message.ident, *message.body))

    def cancel(self, ident: int) -> None:
        """The model cancelled a BLS call (on the loop). A decoupled one is marked cancelled,
        as Triton's: its model sees ``is_cancelled()`` and decides when to stop, and what it
        still sends arrives."""
        request = self._streams.get(ident)
        cancel = getattr(request.response_sender, "cancel", None) if request else None
        if cancel is not None:
            cancel()
            return
        task = self._tasks.get(ident)
        if task is not None:
            task.cancel()

    def cancel_all(self) -> None:
        """The process ended: cancel every call (from any thread)."""
        loop = self._loop
        if loop is None:
            return
        for task in list(self._tasks.values()):
            loop.call_soon_threadsafe(task.cancel)

    def _start(self, ident: int, coroutine: Any, reply: int = 0) -> None:
        if self._loop is None:
            coroutine.close()
            self._send_answer(
                reply,
                ident,
                (True, ((), (CODES[Status.UNSUPPORTED], "no server to call"), None)),
                None,
            )
            return
        task = self._loop.create_task(coroutine)
        self._tasks[ident] = task
        task.add_done_callback(lambda _: self._tasks.pop(ident, None))

    async def _infer(self, ident: int, reply: int, body: Any, block: Any) -> None:
        (
            model_name, version, request_id, correlation_id, flags, timeout, parameters,
            outputs, descriptors, decoupled, trace_id, _,
        ) = body  # fmt: skip
        memory = self.memory
        assert memory is not None and self._server is not None
        owner = memory.take_block(block)
        request = InferenceRequest(
            model_name,
            {d[0]: Tensor(d[0], d[1], unpack(owner, d)) for d in descriptors},
            model_version=version,
            id=request_id,
            outputs=[RequestedOutput(name) for name in outputs] if outputs else None,
            parameters=dict(parameters or {}),
            timeout_us=timeout,
            correlation_id=correlation_id,
            flags=RequestFlag(flags & 3),
        )
        parent = self._traces.get(trace_id) if isinstance(trace_id, int) else None
        if parent is not None:  # pb_utils.InferenceRequest(..., trace=request.trace())
            request.trace = parent.child()
        del owner
        server = self._server
        try:
            if decoupled:
                self._streams[ident] = request
                async for response in server.infer_stream(request):
                    self._answer(ident, reply, response.final, response)
            else:
                response = await server.infer(request, nested=True)
                self._answer(ident, reply, True, response)
        except asyncio.CancelledError:
            self._answer_error(ident, reply, TritonError(Status.CANCELLED, "BLS request cancelled"))
        except TritonError as error:
            self._answer_error(ident, reply, error)
        except Exception as exc:
            logger.exception("BLS request to model '%s' failed", model_name)
            self._answer_error(
                ident, reply, internal(f"BLS request to model '{model_name}' failed: {exc}")
            )
        finally:
            self._streams.pop(ident, None)

    def _answer(self, ident: int, reply: int, final: bool, response: InferenceResponse) -> None:
        memory = self.memory
        assert memory is not None
        packer = Packer()
        descriptors = tuple(
            packer.add(tensor.name, tensor.datatype, tensor.data) for tensor in response.outputs
        )
        parameters = {
            key: value
            for key, value in response.parameters.items()
            if key != "triton_final_response"
        }
        try:
            block = packer.write(memory.arena)
        except SharedMemoryError as exc:
            self._answer_error(ident, reply, unavailable(str(exc)))
            return
        self._send_answer(reply, ident, (final, (descriptors, None, parameters or None)), block)

    def _answer_error(self, ident: int, reply: int, error: TritonError) -> None:
        self._send_answer(
            reply,
            ident,
            (True, ((), (CODES.get(error.status, 1), error.message), None)),
            None,
        )

    async def _manage(self, ident: int, operation: str, args: Any) -> None:
        server = self._server
        assert server is not None
        try:
            value: Any = None
            if operation == "ready":
                name, version = args
                try:
                    value = server.model_ready(name, int(version) if version else -1)
                except (TritonError, ValueError):
                    value = False
            elif operation == "load":
                name, config, files = args
                # Triton's BLS names uploaded files "file:<version>/<path>"
                files = {key.removeprefix("file:"): data for key, data in files.items()}
                await server.load_model(name, config or None, files or None)
            elif operation == "unload":
                name, unload_dependents = args
                await server.unload_model(name, bool(unload_dependents))
            else:
                raise unsupported(f"unknown model management call '{operation}'")
            answer: tuple[bool, Any] = (True, value)
        except TritonError as error:
            answer = (False, error.message)
        self._send_event(ipc.CONTROL_ANSWER, ident, answer, None)
