"""The server's side of one stub process: start it, execute batches on it, serve its calls.

The instance's worker thread drives the *control* socket: it writes a batch's input
tensors into shared memory, sends ``EXECUTE`` and blocks until ``EXECUTE_DONE``, whose
output tensors it hands on as numpy views of the stub's shared memory (no copy; the block
is freed when the last view dies). The *events* socket is read on the server's event loop:
decoupled responses go to their requests' response senders, BLS calls run through
``Server.infer``/``Server.infer_stream`` as tasks (answered on the reply channel the call
names, see :mod:`.replies`), cancellation queries read the senders, the models' log lines go
to the server's log (:mod:`.model_log`). Starting the process (its shared memory, sockets
and command line) and telling how it ended are :mod:`.launch`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import select
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from triton_core import InferenceRequest, InferenceResponse, TritonError, internal, unavailable
from triton_core_python import ipc
from triton_core_python.batches import BatchCodec, EncodedBatch, estimated_bytes, execution_times
from triton_core_python.calls import ModelCalls
from triton_core_python.codes import status_of
from triton_core_python.launch import StubDied, StubSettings, exit_description, launch
from triton_core_python.metrics import ModelMetricBudget, StubMetrics
from triton_core_python.model_log import log_model_line
from triton_core_python.regions import RegionAnnouncer
from triton_core_python.replies import ReplyOutbox
from triton_core_python.shm import SharedMemoryError

if TYPE_CHECKING:
    from triton_core import Server

logger = logging.getLogger("triton_core_python")


#: events handled per loop callback, so that a chatty stub cannot starve the loop
_EVENTS_PER_CALLBACK = 64
#: batches with more tensor bytes than this are copied into shared memory off the loop; up to
#: it the copy (about 0.1 ms per MiB) costs the loop less than the hop to a thread and back,
#: and no more than sending the answer of that size, which the loop does anyway
_OFFLOAD_BYTES = 4 << 20
#: batches with more tensor bytes than this are waited for asleep, never by polling
_SPIN_BYTES = 64 << 10
#: clients' regions announced in one message at most (their descriptors ride along)
_REGIONS_PER_MESSAGE = 32


class StubProcess:
    """One running stub process and everything in flight with it."""

    def __init__(
        self,
        settings: StubSettings,
        *,
        server: Server | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
        event_driven: bool = False,
        metric_budget: ModelMetricBudget | None = None,
    ) -> None:
        self.settings = settings
        self.decoupled = settings.decoupled
        self._server = server
        self._loop = loop
        self.process: subprocess.Popen[bytes] | None = None
        self.pid = 0
        #: the model defines is_ready() (known once the process is ready)
        self.has_is_ready = False
        #: readiness queries sent and not answered: ident -> callback((ready, error))
        self._readiness_waiters: dict[int, Callable[[tuple[bool, str | None]], None]] = {}
        self.dead = False
        self.closing = False
        #: called once (on any thread) when the process ends unexpectedly
        self.on_death: Any = None
        #: (requests, done, StubDied) of a batch from begin_execute the process never
        #: answered, instead of done(StubDied): the owner retries or fails it
        self.on_batch_died: Any = None
        self._ids = itertools.count(1)
        #: the traces of traced requests sent to the stub, by id: their BLS calls continue them
        self._traces: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        #: BLS and model-management calls the model makes
        self.calls = ModelCalls(server, loop, self._send_event, self._traces, self._send_answer)
        #: the stub's reply channels, by id (see :mod:`.replies`)
        self._replies: dict[int, ReplyOutbox] = {}
        #: batches to the stub's wire form and back; its decoupled requests by key
        self.codec = BatchCodec(settings, self._traces)
        #: the clients' system regions this process maps
        self.regions = RegionAnnouncer(self._region_closed)
        self.codec.may_map = self.regions.can_map
        #: decoupled requests' senders whose cancellation the process is told, and their
        #: watch tokens (a rescheduled request keeps its token; tokens are never reused)
        self._watched: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()
        self._watch_tokens = itertools.count(1)
        self.codec.watch_cancel = self._watch_cancel
        #: ``is_cancelled()`` questions the process asked (watched requests ask none)
        self.cancel_queries = 0
        self._death_lock = threading.Lock()
        self._reader_thread: threading.Thread | None = None
        self._flush_scheduled = False
        self._shut_down = False
        #: batches are sent from the event loop and answered there (else a worker thread
        #: blocks on each one)
        self.event_driven = event_driven and loop is not None
        #: batches sent and not yet answered (event-loop mode): ident -> [keys, done, requests]
        self._in_flight: dict[int, list[Any]] = {}
        #: how long to poll for an answer the server is waiting for alone (event-loop mode)
        self._spin_ns = settings.spin_us * 1000
        #: the last batch's answer came within the spin window
        self._answers_quickly = bool(self._spin_ns)
        self._sent_ns = 0
        self._sent_ident = 0
        #: when the last answer of a BLS call went to this process while its batch was all
        #: the server had to do (0: none since its last batch answer), and whether the batch
        #: answer came within the spin window after such a call's answer
        self._replied_ns = 0
        self._finishes_quickly = bool(self._spin_ns)
        self._poller: Any = None
        #: (ident, requests) of the batch a worker thread waits for (worker-thread mode)
        self._running: tuple[int, list[InferenceRequest]] | None = None
        self.memory: ipc.Memory | None = None
        self.control: ipc.Channel | None = None
        self.events: ipc.Channel | None = None
        #: the pb_utils.MetricFamily / Metric handles of this process
        self.metrics = StubMetrics(
            getattr(server, "custom_metrics", None),
            metric_budget or ModelMetricBudget(settings.model_name),
        )

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the process and run the model's ``initialize``; blocks until it is ready.

        Raises :class:`TritonError` when shared memory cannot be had, the process does not
        start, or the model fails to import or initialize.
        """
        settings = self.settings
        self.process, memory, control, events = launch(settings)
        memory.leases.on_pending = self._maybe_flush
        self.memory = self.calls.memory = self.codec.memory = memory
        self.control = ipc.Channel(control, memory, 0)
        self.events = ipc.Channel(events, memory, 1)
        self._watch_events()
        try:
            self.control.send(ipc.INIT, 0, settings.init_body(), None)
            message = self.control.recv()
        except ipc.PeerClosed:
            message = None
        if message is None or message.kind != ipc.READY:
            if message is not None and message.kind == ipc.INIT_FAILED:
                detail = message.body[0]
            else:
                detail = (
                    f"Stub process '{settings.instance_name}' is not healthy. "
                    f"(the Python process {self.exit_description(5.0)} during startup)"
                )
            self.closing = True
            self._shutdown(kill=True)
            raise internal(
                f"Failed to initialize Python stub for model '{settings.model_name}' instance "
                f"'{settings.instance_name}': {detail}"
            )
        self.pid, self.has_is_ready = message.body
        if self.event_driven:
            assert self._loop is not None
            self._loop.call_soon_threadsafe(
                self._loop.add_reader, self.control.fileno(), self._on_control
            )

    def stop(self, timeout: float = 30.0) -> None:
        """Run the model's ``finalize``, end the process, free the shared memory."""
        if self.closing:
            return
        self.closing = True
        if self.event_driven and self.control is not None:
            self._unwatch(self.control)  # the answer to FINALIZE is read here
        if not self.dead and self.control is not None:
            try:
                self.control.sock.settimeout(timeout)
                self.control.send(ipc.FINALIZE, 0, None, None)
                while True:
                    message = self.control.recv()
                    if message is None or message.kind == ipc.FINALIZED:
                        break
            except (ipc.PeerClosed, TimeoutError, OSError):
                logger.warning(
                    "model '%s' instance '%s' did not finalize in %.0f s; stopping it",
                    self.settings.model_name,
                    self.settings.instance_name,
                    timeout,
                )
        self._shutdown(kill=False, timeout=timeout)

    def kill(self) -> None:
        """End the process at once (SIGKILL), from any thread; the rest is left to exit."""
        process = self.process
        if process is not None and process.returncode is None:
            with contextlib.suppress(OSError):
                process.kill()

    def _shutdown(self, *, kill: bool, timeout: float = 5.0) -> None:
        if self._shut_down:
            return
        self._shut_down = True
        if self.event_driven and self.control is not None:
            self._unwatch(self.control)
        self._unwatch_events()
        process = self.process
        if process is not None:
            if kill and process.poll() is None:
                process.kill()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for channel in (self.control, self.events):
            if channel is not None:
                channel.close()
        self._close_replies()
        self._fail_pending("the model instance was unloaded")
        self._release_metrics()
        if self.memory is not None:
            self.memory.close()

    def exit_description(self, wait: float = 1.0) -> str:
        """How the process ended: "was killed by signal 9 (SIGKILL)", "exited with status 1"."""
        return exit_description(self.process, wait)

    # -- execute (the instance's worker thread) -------------------------------------------------

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse] | None:
        """Run one batch and wait (worker-thread mode). Raises :class:`StubDied` or the
        batch's TritonError."""
        control = self.control
        assert control is not None
        if self.dead:
            raise StubDied(sent=False)
        batch = self.codec.encode(requests)
        keys = batch.keys
        ident = next(self._ids)
        self._send_batch(ident, batch)
        self._running = (ident, requests)
        try:
            message = control.recv()
        except ipc.PeerClosed:
            self.codec.forget(keys)
            raise StubDied(sent=True, description=self.exit_description()) from None
        finally:
            self._running = None
        assert message is not None
        return self._result(message, keys, requests)

    def begin_execute(self, requests: list[InferenceRequest], done: Any) -> None:
        """Send one batch and return (event-loop mode); ``done`` gets the result on the loop.

        Raises :class:`StubDied` (not sent) when the process is gone. ``done`` receives the
        responses, the batch's TritonError, or :class:`StubDied`, and the batch's
        :class:`ExecutionTimes` as the process measured them. Several batches may be in
        flight: the process runs them in the order they arrive, each answer names its batch.
        """
        if self.dead:
            raise StubDied(sent=False)
        ident = next(self._ids)
        size = estimated_bytes(requests, self.regions.can_map)
        if size < _OFFLOAD_BYTES:
            batch = self.codec.encode(requests, watch=True)
            self._in_flight[ident] = [batch.keys, done, requests]
            # alone: the client waits for this answer before it sends more, so both sides
            # poll instead of sleeping (see stub.Stub._next_command). Not for big tensors:
            # a wake-up is little beside their copies, and a client still sending its next
            # big request (not in flight yet) needs the loop to read it meanwhile.
            alone = self._spin_ns > 0 and size <= _SPIN_BYTES and self._alone(len(requests))
            # The stub polls after a clients' batch only: a nested one (BLS) has its caller
            # waiting, whose stub or the server has the next thing to do, and two processes
            # polling at once on two CPUs starve the server.
            stub_polls = alone and self._server.nested_requests_in_flight == 0
            try:
                self._send_batch(ident, batch, stub_polls)
            except BaseException:
                del self._in_flight[ident]
                raise
            self._sent_ns = time.monotonic_ns()
            self._sent_ident = ident
            self._replied_ns = 0
            if alone and self._answers_quickly:
                self._wait_for_answer(self._sent_ns + self._spin_ns)
            return
        # serializing and copying big tensors would stall the loop: do it on a thread
        assert self._loop is not None
        self._in_flight[ident] = [[], done, requests]
        self._loop.run_in_executor(None, self._send_off_loop, ident, requests)

    def _send_off_loop(self, ident: int, requests: list[InferenceRequest]) -> None:
        assert self._loop is not None
        try:
            batch = self.codec.encode(requests)
            self._loop.call_soon_threadsafe(self._set_keys, ident, batch.keys)
            self._send_batch(ident, batch)
        except BaseException as exc:
            self._loop.call_soon_threadsafe(self._send_failed, ident, exc)

    def _set_keys(self, ident: int, keys: list[int]) -> None:
        entry = self._in_flight.get(ident)
        if entry is not None:
            entry[0] = keys

    def _send_failed(self, ident: int, exc: BaseException) -> None:
        entry = self._in_flight.pop(ident, None)
        if entry is not None:
            self._fail_batch(entry, exc)

    def _send_batch(self, ident: int, batch: EncodedBatch, spin: bool = False) -> None:
        """Send a batch; ``spin``: the stub may poll for the next batch after answering."""
        memory, control = self.memory, self.control
        assert memory is not None and control is not None
        keys = batch.keys
        try:
            block = batch.packer.write(memory.arena)
            if batch.regions:
                self._send_with_regions(control, ident, batch, block, spin)
            else:
                control.send(ipc.EXECUTE, ident, (batch.body, (), spin), block)
        except SharedMemoryError as exc:
            self.codec.forget(keys)
            raise unavailable(
                f"model '{self.settings.model_name}' instance '{self.settings.instance_name}': "
                f"{exc}"
            ) from None
        except ipc.PeerClosed:
            self.codec.forget(keys)
            raise StubDied(sent=False) from None
        except (ValueError, OSError):
            # the process died and its memory was released while this batch was copied
            self.codec.forget(keys)
            if self.dead:
                raise StubDied(sent=False) from None
            raise

    def _send_with_regions(
        self, control: ipc.Channel, ident: int, batch: EncodedBatch, block: Any, spin: bool
    ) -> None:
        """Send a batch that refers to clients' regions, with those the process does not
        map yet (in messages of their own before it when there are many)."""
        with self.regions.lock:
            announcements, fds = self.regions.announce(batch.regions)
            limit = _REGIONS_PER_MESSAGE
            while len(announcements) > limit:
                control.send(ipc.REGIONS, 0, announcements[:limit], None, fds[:limit])
                announcements, fds = announcements[limit:], fds[limit:]
            control.send(ipc.EXECUTE, ident, (batch.body, announcements, spin), block, fds)

    def _region_closed(self, ident: int) -> None:
        """A region the process maps was unregistered and is unused: it lets it go."""
        self._send_event(ipc.REGIONS_CLOSED, 0, (ident,), None)

    def _result(
        self, message: ipc.Message, keys: list[int], requests: list[InferenceRequest]
    ) -> list[InferenceResponse | None] | None:
        status, payload, _ = message.body
        if status:
            self.codec.forget(keys)
            code, text = payload
            raise TritonError(status_of(code), text)
        if self.decoupled:
            # the positions of the requests released with RESCHEDULE; they keep their keys
            for index in payload or ():
                requests[index].reschedule = True
            return None
        responses = self.codec.responses(message.block, payload, requests)
        for index, item in enumerate(payload):
            if item == ipc.RESCHEDULED:
                requests[index].reschedule = True
        return responses

    def _on_control(self) -> None:
        """The answer to the batch in flight (event-loop mode), or the end of the process."""
        control = self.control
        assert control is not None
        try:
            message = control.recv(nonblocking=True)
        except ipc.PeerClosed:
            self._control_ended()
            return
        if message is None:
            return
        self._answered(message)

    def _answered(self, message: ipc.Message) -> None:
        """Hand a batch's answer to its ``done`` (event-loop mode)."""
        if message.ident == self._sent_ident and self._spin_ns:
            now = time.monotonic_ns()
            self._answers_quickly = now - self._sent_ns < self._spin_ns
            if self._replied_ns:
                self._finishes_quickly = now - self._replied_ns < self._spin_ns
                self._replied_ns = 0
        entry = self._in_flight.pop(message.ident, None)
        if entry is None:
            return
        try:
            result: Any = self._result(message, entry[0], entry[2])
        except TritonError as error:
            result = error
        entry[1](result, execution_times(message.body[2]))

    def _alone(self, count: int) -> bool:
        """Whether this batch is all the server has to do: no other batch of this process
        and no other request anywhere is in flight."""
        if len(self._in_flight) != 1:
            return False
        server = self._server
        return server is not None and server.requests_in_flight <= count

    def _poll_after_reply(self) -> None:
        """The last answer of a BLS call went to this process: when its batch is all the
        server has to do, the batch's answer (or its next call) is the next thing to come,
        so poll for it as for a batch just sent, unless the model took longer than the
        window after its last call."""
        if not self._spin_ns or len(self._in_flight) != 1:
            return
        batch = next(iter(self._in_flight.values()))[2]
        if not self._alone(len(batch)) or self._server.nested_requests_in_flight:
            return
        self._replied_ns = time.monotonic_ns()
        if self._finishes_quickly:
            self._wait_for_answer(self._replied_ns + self._spin_ns, after_reply=True)

    def _wait_for_answer(self, deadline: int, after_reply: bool = False) -> None:
        """Poll for the answer of the batch in flight until ``deadline``.

        Called on the event loop only when the batch is all the server has in flight and
        this process's last answer came within the window: the loop would otherwise sleep
        and be woken for the answer, which costs more than the poll (tens of microseconds
        in virtual machines). Anything on the events socket (a BLS call, a log line) ends
        the poll: the loop serves it. The answer found is handed on from the loop's next
        pass, not from inside the caller."""
        control, events, loop = self.control, self.events, self._loop
        assert control is not None and events is not None and loop is not None
        poller = self._poller
        if poller is None:
            poller = self._poller = select.poll()
            poller.register(control.fileno(), select.POLLIN)
            poller.register(events.fileno(), select.POLLIN)
        control_fd = control.fileno()
        while True:
            ready = poller.poll(0)
            if ready:
                if len(ready) > 1 or ready[0][0] != control_fd:
                    return  # events first, or the socket closed: the loop's readers act
                try:
                    message = control.recv(nonblocking=True)
                except ipc.PeerClosed:
                    return  # the loop's reader sees the end of the stream too
                if message is not None:
                    loop.call_soon(self._answered, message)
                return
            if time.monotonic_ns() > deadline:
                if after_reply:
                    self._finishes_quickly = False
                else:
                    self._answers_quickly = False
                return

    def _control_ended(self) -> None:
        assert self.control is not None
        self._unwatch(self.control)
        if self.closing:
            return
        # not on the loop: the exit status comes a moment after the sockets close
        threading.Thread(
            target=self.mark_dead, args=(2.0,), name="python-model-exit", daemon=True
        ).start()

    def _fail_in_flight(self, description: str) -> None:
        """Fail the batches sent to the process when it ended (on the loop)."""
        in_flight, self._in_flight = self._in_flight, {}
        for entry in in_flight.values():
            self.codec.forget(entry[0])
            self._fail_batch(entry, StubDied(sent=True, description=description))

    def _fail_batch(self, entry: list[Any], exc: BaseException) -> None:
        """End a batch sent with :meth:`begin_execute` with ``exc`` (on the loop)."""
        _, done, requests = entry
        if isinstance(exc, StubDied) and self.on_batch_died is not None:
            self.on_batch_died(requests, done, exc)
        else:
            done(exc)

    # -- events (the event loop) ----------------------------------------------------------------

    def _watch_events(self) -> None:
        events = self.events
        assert events is not None
        if self._loop is None:
            # no server loop (tests that drive an instance directly): a thread of our own
            self._reader_thread = threading.Thread(
                target=self._read_events_blocking,
                name=f"stub-events:{self.settings.instance_name}",
                daemon=True,
            )
            self._reader_thread.start()
            return
        self._loop.call_soon_threadsafe(self._loop.add_reader, events.fileno(), self._on_events)

    def _unwatch_events(self) -> None:
        if self.events is not None:
            self._unwatch(self.events)

    def _unwatch(self, channel: ipc.Channel) -> None:
        """Stop reading ``channel`` on the loop; returns once the loop has (any thread)."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        removed = threading.Event()

        def remove() -> None:
            with contextlib.suppress(ValueError, OSError):  # already closed
                loop.remove_reader(channel.fileno())
            removed.set()

        try:
            if _on_loop_thread(loop):
                remove()
            else:
                loop.call_soon_threadsafe(remove)
                removed.wait(5.0)
        except RuntimeError:
            pass  # the loop is closed

    def _read_events_blocking(self) -> None:
        events = self.events
        assert events is not None
        while True:
            try:
                message = events.recv()
            except ipc.PeerClosed:
                self._events_ended()
                return
            if message is not None:
                self._dispatch(message)

    def _on_events(self) -> None:
        events = self.events
        assert events is not None
        for _ in range(_EVENTS_PER_CALLBACK):
            try:
                message = events.recv(nonblocking=True)
            except ipc.PeerClosed:
                self._events_ended()
                return
            if message is None:
                return
            try:
                self._dispatch(message)
            except Exception:
                logger.exception(
                    "handling a message of model '%s' instance '%s' failed",
                    self.settings.model_name,
                    self.settings.instance_name,
                )

    def _dispatch(self, message: ipc.Message) -> None:
        kind = message.kind
        if kind == ipc.RESPONSE:
            self._on_response(message)
        elif kind == ipc.BLS_REQUEST:
            self.calls.start_infer(message)
        elif kind == ipc.BLS_CANCEL:
            self.calls.cancel(message.ident)
        elif kind == ipc.CANCEL_QUERY:
            self.cancel_queries += 1
            cancelled = self._is_cancelled(message.body)
            self._send_event(ipc.CANCEL_ANSWER, message.ident, cancelled, None)
        elif kind == ipc.LOG:
            log_model_line(self.settings.model_name, self.settings.instance_name, *message.body)
        elif kind == ipc.CONTROL:
            self.calls.start_management(message)
        elif kind == ipc.METRIC:
            self._on_metric(message.ident, *message.body)
        elif kind == ipc.READINESS_ANSWER:
            answered = self._readiness_waiters.pop(message.ident, None)
            if answered is not None:
                answered(message.body)
        elif kind == ipc.REPLY_CHANNEL:
            self._open_reply(message.ident, message.fds)

    def _open_reply(self, ident: int, fds: tuple[int, ...]) -> None:
        """The stub made a reply channel: its BLS calls that name it are answered there."""
        memory = self.memory
        if len(fds) != 1 or memory is None or self.dead or self.closing:
            for fd in fds:
                os.close(fd)
            return
        channel = ipc.Channel(socket.socket(fileno=fds[0]), memory, 1 + ident)
        self._replies[ident] = ReplyOutbox(channel, self._loop)

    def _close_replies(self) -> None:
        replies, self._replies = self._replies, {}
        for outbox in replies.values():
            outbox.close()

    def ask_readiness(self, answered: Callable[[tuple[bool, str | None]], None]) -> None:
        """Call the model's ``is_ready()``; ``answered((ready, error or None))`` follows on
        the event loop, also when the process dies first."""
        ident = next(self._ids)
        self._readiness_waiters[ident] = answered
        self._send_event(ipc.READINESS_QUERY, ident, None, None)
        if self.dead:
            self._fail_readiness()

    def _fail_readiness(self) -> None:
        waiters = list(self._readiness_waiters.values())
        self._readiness_waiters.clear()
        answer = (
            False,
            "Stub process is not healthy while waiting for user-defined is_ready() response",
        )
        for answered in waiters:
            answered(answer)

    def _watch_cancel(self, request: InferenceRequest, key: int) -> int:
        """The watch token of a decoupled request (0: its sender cannot be watched): the
        process is sent ``CANCELLED`` with it when the client stops waiting, so that the
        model's ``is_cancelled()`` (asked every step by streaming models) costs no round
        trip. On the event loop, where senders are cancelled."""
        sender = request.response_sender
        if sender is None:
            return 0
        token = self._watched.get(sender)
        if token is not None:
            return token
        listen = getattr(sender, "add_cancel_listener", None)
        if listen is None:
            return 0
        token = next(self._watch_tokens)
        self._watched[sender] = token
        listen(lambda: self._send_event(ipc.CANCELLED, token, None, None))
        return token

    def _is_cancelled(self, key: int) -> bool:
        """``request.is_cancelled()`` in the model; a request already answered or gone is."""
        if self.decoupled:
            request = self.codec.pending.get(key)
            sender = None if request is None else request.response_sender
            return sender is None or sender.is_cancelled()
        ident, position = key >> ipc.BATCH_SHIFT, key & ((1 << ipc.BATCH_SHIFT) - 1)
        running = self._running
        if running is not None and running[0] == ident:
            requests = running[1]
        else:
            entry = self._in_flight.get(ident)
            requests = None if entry is None else entry[2]
        return requests is None or requests[position].is_cancelled()

    def _on_metric(self, ident: int, operation: str, args: Any) -> None:
        """A custom-metrics call; ident 0 is an update that expects no answer."""
        try:
            if ident == 0:
                self.metrics.update(operation, args)
                return
            answer: tuple[bool, Any] = (True, self.metrics.call(operation, args))
        except TritonError as error:
            if ident == 0:
                logger.warning("model '%s': %s", self.settings.model_name, error.message)
                return
            answer = (False, error.message)
        self._send_event(ipc.METRIC_ANSWER, ident, answer, None)

    def _release_metrics(self) -> None:
        loop = self._loop
        if loop is None or _on_loop_thread(loop) or loop.is_closed():
            self.metrics.release_all()
            return
        # handles are used on the loop: release them there
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self.metrics.release_all)

    def _on_response(self, message: ipc.Message) -> None:
        flags, item, room = message.body
        sender = None
        try:
            sender = self._deliver_response(message.ident, flags, item, message.block)
        finally:
            if room:  # the model waits in send: it gets its answer whatever happened
                self._answer_when_room(sender, room)

    def _deliver_response(self, key: int, flags: int, item: Any, block: Any) -> Any:
        """Hand a decoupled response to its request's sender; the sender (None: its stream
        already failed, execute raised or the process restarted)."""
        final = bool(flags & 1)
        request = self.codec.pending.pop(key, None) if final else self.codec.pending.get(key)
        sender = None if request is None else request.response_sender
        if sender is None:
            return None
        response = None
        if item is not None:
            response = self.codec.responses(block, [item])[0]
        try:
            sender.send(response, final=final)
        except TritonError as error:
            logger.warning("model '%s': %s", self.settings.model_name, error.message)
        return sender

    def _answer_when_room(self, sender: Any, room: int) -> None:
        """Let the model's ``send`` return once its response fits the request's pool: the
        loop reads on meanwhile (other requests, cancellation queries) while the model waits,
        as Triton's response sender blocks the model."""
        pool = getattr(sender, "pool", None)
        if pool is None:
            self._send_event(ipc.RESPONSE_ROOM, room, None, None)
        else:
            pool.when_room(lambda: self._send_event(ipc.RESPONSE_ROOM, room, None, None))

    def _send_answer(self, reply: int, ident: int, body: Any, block: Any) -> None:
        """A BLS call's answer, on the reply channel the call named (0: events)."""
        outbox = self._replies.get(reply) if reply else None
        if outbox is None:
            self._send_event(ipc.BLS_RESPONSE, ident, body, block)
            return
        if self.dead:
            return
        with contextlib.suppress(ipc.PeerClosed):  # the end of the stream reports the death
            outbox.send(ipc.BLS_RESPONSE, ident, body, block)
        if body[0]:  # the call's last answer: the model goes on with its batch
            self._poll_after_reply()

    def _send_event(self, kind: int, ident: int, body: Any, block: Any) -> None:
        events = self.events
        if events is None or self.dead:
            return
        with contextlib.suppress(ipc.PeerClosed):  # the end of the stream reports the death
            events.send(kind, ident, body, block)

    def _maybe_flush(self, pending: int) -> None:
        """Send a long queue of frees when no message to the stub is due (decoupled streams)."""
        if pending < 64 or self._flush_scheduled or self.dead or self.closing:
            return
        self._flush_scheduled = True
        if self._loop is not None:
            try:
                self._loop.call_soon_threadsafe(self._flush)
            except RuntimeError:
                self._flush_scheduled = False
        else:
            threading.Thread(target=self._flush, daemon=True).start()

    def _flush(self) -> None:
        self._flush_scheduled = False
        self._send_event(ipc.FREE, 0, None, None)

    def _events_ended(self) -> None:
        """The process is gone (or finalized): fail what waits on it, report a death."""
        self._unwatch_events()
        if self.closing:
            return
        if self._loop is None:
            self.mark_dead(wait=2.0)
            return
        # not on the loop: the exit status comes a moment after the sockets close
        threading.Thread(
            target=self.mark_dead, args=(2.0,), name="python-model-exit", daemon=True
        ).start()

    def mark_dead(self, wait: float = 1.0) -> None:
        """Record an unexpected end of the process (from any thread, once)."""
        with self._death_lock:
            if self.dead:
                return
            self.dead = True
        description = self.exit_description(wait)
        loop = self._loop
        if loop is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed
                if self.event_driven:
                    loop.call_soon_threadsafe(self._fail_in_flight, description)
                loop.call_soon_threadsafe(self._fail_readiness)
                self.calls.cancel_all()
        self._fail_pending(
            f"the Python process of model '{self.settings.model_name}' instance "
            f"'{self.settings.instance_name}' {description}; the instance is restarting"
        )
        self._close_replies()
        self._release_metrics()
        # before READY (pid still 0) start() reports the failure: nothing to restart yet
        if self.on_death is not None and self.pid:
            self.on_death(self)

    def _fail_pending(self, reason: str) -> None:
        pending = list(self.codec.pending.items())
        self.codec.pending.clear()
        if not pending:
            return

        def fail() -> None:
            for _, request in pending:
                sender = request.response_sender
                if sender is None:
                    continue
                with contextlib.suppress(TritonError):  # its final response was already sent
                    sender.send(InferenceResponse(error=unavailable(reason)), final=True)

        if self._loop is None or _on_loop_thread(self._loop):
            fail()
        else:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                self._loop.call_soon_threadsafe(fail)


def _on_loop_thread(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False
