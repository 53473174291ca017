"""The process of one Python model instance: imports ``model.py`` and serves its executes.

Started by the server as ``python -m triton_core_python.stub --control-fd N --events-fd M``
with two seqpacket sockets (see :mod:`triton_core_python.ipc`):

* the main thread reads *control*: ``INIT`` (import the model, ``initialize(args)``),
  ``EXECUTE`` (run ``execute(requests)``, answer ``EXECUTE_DONE``), ``FINALIZE``;
* a reader thread reads *events*: answers to cancellation queries, model management
  calls and ``async_exec`` BLS calls the model made, and frees of shared memory;
* a thread that waits for its own BLS call (``exec()``, iterating ``exec(decoupled=True)``)
  reads the answers itself, from a reply channel (:mod:`triton_core_python.replies`).

The model's own threads may send responses (decoupled models), make BLS calls and log at
any time; those go out on *events* (:mod:`triton_core_python.server_calls`, which also holds
the events thread). When the server goes away, both sockets end and the process exits at
once.

``python -m triton_core_python.stub --auto-complete MODEL_PY --result-fd K`` instead runs
``TritonPythonModel.auto_complete_config`` on the config JSON read from stdin and writes
``{"config": ...}`` or ``{"error": ...}`` to descriptor K: the throwaway interpreter of
Triton's auto-complete. How ``model.py`` is imported, and that run, are in
:mod:`triton_core_python.model_module`.

Imports only the standard library, numpy, and the model's own imports.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import os
import socket
import struct
import sys
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from triton_core_python import ipc
from triton_core_python.model_module import (
    describe_exception,
    load_model_module,
    model_class,
    run_auto_complete,
)
from triton_core_python.regions import INVALID_ARG, MappedRegions, RegionError
from triton_core_python.server_calls import ServerCalls
from triton_core_python.shm import Arena
from triton_core_python.wire import NUMPY_DTYPES, Packer, deserialize_bytes, unpack


class Stub:
    """One model instance in the stub process: the control loop, the model's lifecycle and
    its executes. What the model asks of the server goes through :attr:`calls`
    (``pb_utils._runtime``)."""

    def __init__(
        self, control: socket.socket, events: socket.socket, arena: Arena, spin_us: int = 0
    ) -> None:
        self.memory = ipc.Memory(arena)
        #: how long to poll for the next batch after answering one before sleeping
        self._spin_ns = spin_us * 1000
        #: the last batch came within the spin window of the answer before it
        self._spinning = False
        #: the server sent the last batch as all it had to do: nothing else keeps it busy
        self._spin_allowed = False
        self._answered_at = 0
        self.commands = ipc.Channel(control, self.memory, 0)
        #: clients' system regions the server sent: their tensors are read and written here
        self.regions = MappedRegions()
        #: what the model asks of the server (pb_utils._runtime), and the events thread
        self.calls = ServerCalls(
            events,
            self.memory,
            self.regions,
            encode_response=self._encode_response,
            answer_readiness=self._answer_readiness,
            exit_process=self._exit,
        )
        self._loop: asyncio.AbstractEventLoop | None = None
        self.model: Any = None
        self.model_name = ""
        self.model_version = -1
        self.instance_name = ""
        self.model_dir = ""
        self.decoupled = False
        self.output_names: list[str] = []
        self._execute: Callable[[list[Any]], Any] | None = None
        self._async_execute = False

    # -- lifecycle -------------------------------------------------------------------------------

    def run(self) -> None:
        try:
            message = self.commands.recv()
        except ipc.PeerClosed:
            os._exit(0)
        assert message is not None and message.kind == ipc.INIT
        threading.Thread(target=self.calls.read_events, name="stub-events", daemon=True).start()
        try:
            self._initialize(message.body)
        except BaseException as exc:
            detail = describe_exception(exc, self.model_dir or None)
            self._send_control(ipc.INIT_FAILED, 0, (detail,), None)
            self._exit(1)
        has_is_ready = hasattr(self.model, "is_ready")
        self._send_control(ipc.READY, 0, (os.getpid(), has_is_ready), None)
        while True:
            try:
                message = self._next_command()
            except ipc.PeerClosed:
                self._exit(0)  # the server is gone
            assert message is not None
            if message.kind == ipc.EXECUTE:
                self._serve(message)
            elif message.kind == ipc.REGIONS:
                self.regions.add(message.body, message.fds)
            elif message.kind == ipc.FINALIZE:
                self._finalize()
                self._send_control(ipc.FINALIZED, 0, None, None)
                self._exit(0)

    def _next_command(self) -> ipc.Message:
        """The next message on the control socket.

        Waking a sleeping process costs tens of microseconds (more in virtual machines); a
        client that sends its next request as soon as it has an answer (concurrency 1)
        pays it twice per request. So while batches keep coming within ``spin_ns`` of the
        previous answer, the stub polls for the next one that long before it sleeps. A poll
        that times out stops the polling until a batch again comes that soon, so a stub with
        sparse traffic sleeps at once; and it polls only after a batch the server sent as
        all it had to do: with more requests in flight the server is busy, and a polling
        stub would take CPU from it. Nor after a batch whose model called the server (BLS):
        the models it called may poll too, and two pollers on two CPUs starve the server.
        """
        commands = self.commands
        if self._spinning and self._spin_allowed and not self.calls.called:
            deadline = self._answered_at + self._spin_ns
            while True:
                message = commands.recv(nonblocking=True)
                if message is not None:
                    return message
                if time.monotonic_ns() > deadline:
                    self._spinning = False
                    break
        message = commands.recv()
        assert message is not None
        if self._spin_ns and message.kind == ipc.EXECUTE:
            self._spinning = time.monotonic_ns() - self._answered_at < self._spin_ns
        return message

    def _initialize(self, settings: dict[str, Any]) -> None:
        self.model_name = settings["model_name"]
        self.model_version = settings["model_version"]
        self.instance_name = settings["instance_name"]
        self.model_dir = settings["model_dir"]
        self.decoupled = settings["decoupled"]
        self.output_names = list(settings["output_names"])
        pb_utils._runtime = self.calls
        # a Python-based backend's model.py is elsewhere: the model's version folder is sent
        version_dir = settings.get("version_dir")
        pb_utils._model_dir = version_dir or str(Path(settings["model_path"]).parent)
        module = load_model_module(settings["model_path"], python_based=version_dir is not None)
        self.model = model_class(module, settings["model_path"])()
        initialize = getattr(self.model, "initialize", None)
        if initialize is not None:
            result = initialize(dict(settings["args"]))
            if inspect.isawaitable(result):
                asyncio.run_coroutine_threadsafe(_awaited(result), self._coroutines()).result()
        execute = getattr(self.model, "execute", None)
        if execute is None:
            raise AttributeError("class 'TritonPythonModel' has no method 'execute'")
        self._execute = execute
        self._async_execute = inspect.iscoroutinefunction(execute)
        self.calls.serving = True

    def _finalize(self) -> None:
        self.calls.finalizing = True
        self.calls.serving = False
        finalize = getattr(self.model, "finalize", None)
        if finalize is None:
            return
        try:
            result = finalize()
            if inspect.isawaitable(result):
                asyncio.run_coroutine_threadsafe(_awaited(result), self._coroutines()).result()
        except BaseException as exc:
            self.calls.log(
                int(pb_utils.LogLevel.ERROR),
                f"finalize() of model '{self.model_name}' failed: "
                f"{describe_exception(exc, self.model_dir)}",
            )

    def _exit(self, code: int) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    def _send_control(self, kind: int, ident: int, body: Any, block: Any) -> None:
        try:
            self.commands.send(kind, ident, body, block)
        except ipc.PeerClosed:
            self._exit(0)

    def _coroutines(self) -> asyncio.AbstractEventLoop:
        """The loop that runs ``async def`` model methods, on a thread of its own."""
        if self._loop is None:
            loop = asyncio.new_event_loop()
            threading.Thread(target=loop.run_forever, name="stub-asyncio", daemon=True).start()
            self._loop = loop
        return self._loop

    # -- execute ---------------------------------------------------------------------------------

    def _serve(self, message: ipc.Message) -> None:
        received = time.monotonic_ns()
        requests, failed = self._requests(message)
        times = None
        try:
            if failed:
                status, payload, block, started, ended = self._run_without(requests, failed)
            else:
                status, payload, block, started, ended = self._run(requests)
        except BaseException as exc:
            status, payload, block = self._failed_batch(requests, exc)
            exc.__traceback__ = None  # drop the frames holding the requests' tensors
        else:
            times = (received, started, ended, time.monotonic_ns())
        # Requests (and their tensors' views) die here unless the model kept them, so the
        # answer below can carry the frees of their shared memory.
        del requests
        self._send_control(ipc.EXECUTE_DONE, message.ident, (status, payload, times), block)
        self._answered_at = time.monotonic_ns()
        self.regions.drop_stale()

    def _requests(
        self, message: ipc.Message
    ) -> tuple[list[pb_utils.InferenceRequest], dict[int, tuple[int, str]]]:
        """The batch's requests, and those whose tensors could not be read from their
        clients' regions (position -> (code, message)): they are answered with that error."""
        items, announced, self._spin_allowed = message.body
        self.calls.called = False
        if announced:
            self.regions.add(announced, message.fds)
        owner = self.memory.take_block(message.block)
        received = pb_utils.InferenceRequest._received
        tensor = pb_utils.Tensor._of
        name, version, decoupled = self.model_name, self.model_version, self.decoupled
        all_outputs = self.output_names
        # a non-decoupled request's key is its position: with the batch's, it names the
        # request to the server (cancellation queries)
        batch = 0 if decoupled else message.ident << ipc.BATCH_SHIFT
        requests = []
        failed: dict[int, tuple[int, str]] = {}
        for (
            key,
            request_id,
            correlation_id,
            flags,
            params,
            outputs,
            inputs,
            timeout,
            trace,
            targets,
            pooled,
            watch_token,
        ) in items:
            try:
                tensors = [
                    tensor(d[0], d[1], unpack(owner, d) if len(d) == 5 else self._mapped(d))
                    for d in inputs
                ]
            except RegionError as error:
                failed[len(requests)] = (error.code, error.message)
                tensors = []
            request = received(
                key | batch,
                request_id,
                correlation_id,
                flags,
                params,
                outputs if outputs is not None else list(all_outputs),
                tensors,
                timeout,
                name,
                version,
                decoupled,
            )
            if trace is not None:
                request._trace = pb_utils.InferenceTrace(trace[1] or None, trace[0])
            request._output_regions = targets
            request._pooled = pooled
            if watch_token:
                self.calls.watch(request._key, watch_token)
            requests.append(request)
        return requests, failed

    def _mapped(self, descriptor: tuple[Any, ...]) -> Any:
        """An input in a client's region: a read-only view of the region, mapped here
        (BYTES: its elements, parsed from there)."""
        name, datatype, shape, offset, nbytes, region = descriptor
        if datatype != "BYTES":
            return self.regions.input(region, offset, nbytes, NUMPY_DTYPES[datatype], shape)
        data = self.regions.input(region, offset, nbytes, NUMPY_DTYPES["UINT8"], (nbytes,))
        count = 1
        for dim in shape:
            count *= dim
        try:
            return deserialize_bytes(data, count).reshape(shape)
        except (ValueError, struct.error) as exc:  # its owner rewrote it since the server read it
            raise RegionError(
                INVALID_ARG, f"unable to parse BYTES data for input '{name}': {exc}"
            ) from None

    def _run_without(
        self, requests: list[pb_utils.InferenceRequest], failed: dict[int, tuple[int, str]]
    ) -> tuple[int, Any, Any, int, int]:
        """:meth:`_run` on the requests not in ``failed``; those are answered their error."""
        positions = [index for index in range(len(requests)) if index not in failed]
        if positions:
            status, payload, block, started, ended = self._run([requests[i] for i in positions])
        else:
            started = ended = time.monotonic_ns()
            status, payload, block = 0, None if self.decoupled else [], None
        if self.decoupled:
            for index, (code, text) in failed.items():
                self.calls.send_response(
                    requests[index]._key,
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(text, code)),
                    pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            rescheduled = [positions[index] for index in payload or ()]
            return status, rescheduled or None, block, started, ended
        items: list[Any] = [None] * len(requests)
        for index, item in zip(positions, payload, strict=True):
            items[index] = item
        for index, error in failed.items():
            items[index] = ((), error, None, None)
        return status, items, block, started, ended

    def _run(self, requests: list[pb_utils.InferenceRequest]) -> tuple[int, Any, Any, int, int]:
        """(status 0, answers, their block, execute's start and end times) of a batch."""
        assert self._execute is not None
        started = time.monotonic_ns()
        if self._async_execute:
            future = asyncio.run_coroutine_threadsafe(self._execute(requests), self._coroutines())
            if self.decoupled:
                # decoupled coroutines run concurrently, like Triton's: answer at once
                future.add_done_callback(lambda done: self._coroutine_done(done, requests))
                return 0, None, None, started, time.monotonic_ns()
            result = future.result()
        else:
            result = self._execute(requests)
        ended = time.monotonic_ns()
        if self.decoupled:
            if result is not None:
                self._fail_decoupled(
                    requests, self._error_of(_returned_responses(self.instance_name))
                )
                return 0, None, None, started, ended
            return 0, _rescheduled(requests) or None, None, started, ended
        if result is None:
            # since Triton 23.10 a model may answer through response senders instead
            result = [None] * len(requests)
        if not isinstance(result, list | tuple):
            raise pb_utils.TritonModelException(
                f"execute() must return a list of InferenceResponse, got {type(result).__name__}"
            )
        if len(result) != len(requests):
            raise pb_utils.TritonModelException(
                f"execute() returned {len(result)} responses for {len(requests)} requests"
            )
        packer = Packer()
        items: list[Any] = []
        for request, response in zip(requests, result, strict=True):
            if request._release_flags & pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE:
                if response is not None:
                    raise pb_utils.TritonModelException(
                        "Expected a None object in the execute function return list for "
                        f"reschduled request, found type '{type(response)}'."
                    )
                items.append(ipc.RESCHEDULED)
            elif response is None:
                sent = None if request._sender is None else _sent_response(request._sender)
                items.append(
                    None
                    if sent is None
                    else self._encode_response(packer, sent, request._output_regions)
                )
            elif isinstance(response, pb_utils.InferenceResponse):
                if request._sender is not None:
                    _close_with_returned(request._sender, response)
                items.append(self._encode_response(packer, response, request._output_regions))
            else:
                raise pb_utils.TritonModelException(
                    "execute() must return InferenceResponse objects, got "
                    f"{type(response).__name__}"
                )
        return 0, items, packer.write(self.memory.arena), started, ended

    def _coroutine_done(self, future: Any, requests: list[pb_utils.InferenceRequest]) -> None:
        if future.cancelled() or future.exception() is None:
            return
        exc = future.exception()
        # nobody awaits a decoupled coroutine: its traceback goes to the log, as in Triton
        self.calls.log(
            int(pb_utils.LogLevel.ERROR), "".join(traceback.format_exception(exc)).rstrip()
        )
        self._fail_decoupled(requests, self._error_of(exc))

    def _fail_decoupled(
        self, requests: list[pb_utils.InferenceRequest], error: tuple[int, str]
    ) -> None:
        """End a decoupled batch that failed: each request whose sender is still open gets
        the error as its final response, on the channel of its responses (so after them),
        and its sender closes."""
        for request in requests:
            sender = request.get_response_sender()
            if not sender._closed:
                sender._closed = True
                self.calls.send_response(
                    request._key,
                    pb_utils.InferenceResponse(error=pb_utils.TritonError(error[1], error[0])),
                    pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )

    def _failed_batch(
        self, requests: list[pb_utils.InferenceRequest], exc: BaseException
    ) -> tuple[int, Any, Any]:
        """(status, payload, block) of a batch whose execute raised: its error, but the
        requests of a non-decoupled model that sent their response first keep it, as
        Triton delivered it already."""
        error = self._error_of(exc)
        sent = [None if r._sender is None else r._sender._captured for r in requests]
        if self.decoupled or not any(sent):
            return 1, error, None
        packer = Packer()
        items = [
            ((), error, None, None)
            if response is None
            else self._encode_response(packer, response, request._output_regions)
            for request, response in zip(requests, sent, strict=True)
        ]
        return 0, items, packer.write(self.memory.arena)

    def _error_of(self, exc: BaseException) -> tuple[int, str]:
        if isinstance(exc, pb_utils.TritonError):
            return exc.code(), exc.message()
        detail = describe_exception(exc, self.model_dir or None)
        return (
            pb_utils.TritonError.INTERNAL,
            f"Failed to process the request(s) for model instance '{self.instance_name}', "
            f"message: {detail}",
        )

    def _encode_response(
        self,
        packer: Packer,
        response: pb_utils.InferenceResponse,
        targets: dict[str, tuple[int, int, int]] | None = None,
    ) -> tuple:
        """(descriptors, error, parameters, outputs written into clients' regions)."""
        add = packer.add
        error = response._error
        written: list[str] = []
        if targets and error is None:
            descriptors = []
            for t in response._tensors:
                target = targets.get(t._name)
                if target is not None and self._write_to_region(target, t._datatype, t._array):
                    array = t._array
                    descriptors.append((t._name, t._datatype, array.shape, 0, array.nbytes))
                    written.append(t._name)
                else:
                    descriptors.append(add(t._name, t._datatype, t._array))
        else:
            descriptors = [add(t._name, t._datatype, t._array) for t in response._tensors]
        return (
            tuple(descriptors),
            None if error is None else (error.code(), error.message()),
            response._parameters or None,
            tuple(written) or None,
        )

    def _write_to_region(self, target: tuple[int, int, int], datatype: str, array: Any) -> bool:
        """Write an output into the client's region it was asked into, when it is numbers
        in the wire's byte order (else the server converts and writes it)."""
        if datatype == "BYTES" or type(array) is not np.ndarray:
            return False
        dtype = array.dtype
        if dtype.kind not in "biuf" or dtype.byteorder == ">":
            return False
        return self.regions.write(*target, array)

    def _answer_readiness(self, ident: int) -> None:
        """Call the model's ``is_ready()`` (awaited when a coroutine), answer
        (ready, None) or (False, why it failed), as Triton's stub does."""
        answer: tuple[bool, str | None]
        try:
            result = self.model.is_ready()
            if asyncio.iscoroutine(result):
                result = asyncio.run_coroutine_threadsafe(result, self._coroutines()).result()
            if isinstance(result, bool):
                answer = (result, None)
            else:
                answer = (False, "is_ready() must return a boolean value")
        except BaseException as exc:
            answer = (False, describe_exception(exc, self.model_dir or None))
        with contextlib.suppress(ipc.PeerClosed):
            self.calls.events.send(ipc.READINESS_ANSWER, ident, answer, None)


def _rescheduled(requests: list[pb_utils.InferenceRequest]) -> list[int]:
    """The positions of the requests released with RESCHEDULE."""
    flag = pb_utils.TRITONSERVER_REQUEST_RELEASE_RESCHEDULE
    return [index for index, request in enumerate(requests) if request._release_flags & flag]


def _returned_responses(instance_name: str) -> pb_utils.TritonModelException:
    return pb_utils.TritonModelException(
        f"Python model '{instance_name}' is using the decoupled mode and the execute "
        "function must return None."
    )


def _sent_response(sender: pb_utils.InferenceResponseSender) -> pb_utils.InferenceResponse | None:
    """The response of a request that execute left to its sender (None: it has none and
    never will). Waits while the sender is open: a model may answer after returning."""
    if sender._closed or sender._captured is not None:
        return sender._captured
    sent = threading.Event()
    sender._on_captured = sent.set
    if sender._captured is None and not sender._closed:  # not sent while being registered
        sent.wait()
    return sender._captured


def _close_with_returned(
    sender: pb_utils.InferenceResponseSender, response: pb_utils.InferenceResponse
) -> None:
    """A response returned by execute is its request's last, as if sent with the final
    flag: Triton's rules for its sender apply (one response; none after closing)."""
    pb_utils._check_single_response(
        sender._captured is not None, response, pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
    )
    if sender._closed:
        raise pb_utils.TritonModelException(
            "Unable to send response. Response sender has been closed."
        )
    sender._closed = True
    sender._captured = response  # a later send is a second response


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="triton_core_python.stub")
    # only for `ps`: which model instance this process serves
    parser.add_argument("--instance", default="")
    parser.add_argument("--control-fd", type=int)
    parser.add_argument("--events-fd", type=int)
    parser.add_argument("--shm-size", type=int, default=1 << 20)
    parser.add_argument("--shm-directory", default=None)
    parser.add_argument("--policy", choices=("batch", "normal"), default="normal")
    parser.add_argument("--auto-complete", metavar="MODEL_PY")
    parser.add_argument("--result-fd", type=int)
    parser.add_argument(
        "--version-dir", help="with --auto-complete: MODEL_PY is a Python-based backend's"
    )
    parser.add_argument("--cpus", default="", help="CPU ids to run on (host_policy)")
    parser.add_argument("--spin-us", type=int, default=0, help="poll for the next batch")
    args = parser.parse_args(argv)
    # Triton's embedded interpreter has no command line: a model that parses sys.argv
    # (unittest.main, argparse) must not see the stub's options
    sys.argv = [""]
    if args.auto_complete:
        return run_auto_complete(args.auto_complete, args.result_fd, args.version_dir)
    if args.cpus:
        # before any thread starts, so that every thread of the model runs on these CPUs
        os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})
    if args.policy == "batch":
        # Before any thread starts, so that all inherit it: woken by the server, this
        # process then waits for a CPU instead of preempting the server's event loop, which
        # keeps serving other requests meanwhile (Linux SCHED_BATCH; elsewhere a no-op).
        with contextlib.suppress(AttributeError, OSError):
            os.sched_setscheduler(0, os.SCHED_BATCH, os.sched_param(0))
    control = socket.socket(fileno=args.control_fd)
    events = socket.socket(fileno=args.events_fd)
    Stub(control, events, Arena(args.shm_size, args.shm_directory), args.spin_us).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
