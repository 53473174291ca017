"""What a model asks of the server, from its stub process, and the events thread.

A model's ``pb_utils`` calls reach the server through the stub's :class:`ServerCalls`
(``pb_utils._runtime``): decoupled responses, BLS calls (``exec``, ``async_exec``, each
answered on a reply channel the calling thread reads itself, see :mod:`.replies`, or
relayed by the events thread), cancellation queries, model management, logs and custom
metrics, all sent on the *events* socket, from any of the model's threads; and frees of
shared memory, when many are due. The events thread reads that socket: the answers to those
calls, the server's readiness queries (answered by the stub, which asks the model) and its
notices of clients' regions closed.

Like the stub, imports only the standard library, numpy and ``triton_python_backend_utils``.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import queue
import socket
import sys
import threading
from collections.abc import Callable
from typing import Any

import triton_python_backend_utils as pb_utils

from triton_core_python import ipc
from triton_core_python.regions import MappedRegions
from triton_core_python.replies import Reply, ReplyPool
from triton_core_python.wire import Packer, unpack

_Deliver = Callable[[Any, bool], None]
#: watched requests (and cancellations told) kept at most
_MAX_WATCHED = 1 << 16


class ServerCalls:
    """The model's calls to the server, from any thread, and the events thread that reads
    their answers (see the module)."""

    def __init__(
        self,
        events: socket.socket,
        memory: ipc.Memory,
        regions: MappedRegions,
        *,
        encode_response: Callable[[Packer, Any], tuple],
        answer_readiness: Callable[[int], None],
        exit_process: Callable[[int], None],
    ) -> None:
        self.memory = memory
        self.events = ipc.Channel(events, memory, 1)
        #: sockets on which a waiting thread reads its BLS call's answers itself
        self.replies = ReplyPool(memory, self.events)
        self._regions = regions
        #: (packer, response) -> the response's wire form, its tensors added to the packer
        self._encode_response = encode_response
        #: answers a readiness query (its ident): asks the model, on a thread of its own
        self._answer_readiness = answer_readiness
        #: ends the process (the server is gone)
        self._exit = exit_process
        self._waiters: dict[int, _Deliver] = {}
        self._ids = itertools.count(1)
        #: the model asked the server something (a BLS call ...) since the stub last cleared it
        self.called = False
        #: BLS is refused outside the execute phase (in initialize and finalize), as in Triton
        self.serving = False
        #: finalize runs: the end of *events* is no reason to exit
        self.finalizing = False
        self._flush_scheduled = False
        #: decoupled requests whose cancellation the server tells (``CANCELLED``): key ->
        #: watch token, and the tokens told, both bounded (see :meth:`is_cancelled`)
        self._watch_tokens: dict[int, int] = {}
        self._cancelled_tokens: dict[int, None] = {}
        #: stale tokens filled the bound: every answer is asked of the server again
        self._trust_watch = True
        #: deleted metric objects whose release is not sent yet
        self._released_metrics: list[int] = []
        self._release_scheduled = False
        # a model that holds many responses' worth of BLS outputs frees them in bursts;
        # send long queues of frees without waiting for the next message
        memory.leases.on_pending = self._maybe_flush

    def send_response(self, key: int, response: Any, flags: int, wait: bool = False) -> None:
        """A decoupled model's response (and/or final flag), from any thread. ``wait``: the
        request's responses are pooled (``--grpc-max-response-pool-size``): return once the
        server says this one fits, as Triton's sender blocks while the pool is full."""
        if flags & pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL:
            self.unwatch(key)
        packer = Packer()
        item = None if response is None else self._encode_response(packer, response)
        block = packer.write(self.memory.arena)
        if not wait:
            try:
                self.events.send(ipc.RESPONSE, key, (flags, item, 0), block)
            except ipc.PeerClosed:
                raise pb_utils.TritonModelException("the server is gone") from None
            return
        room: queue.SimpleQueue[bool] = queue.SimpleQueue()
        ident = next(self._ids)
        self._waiters[ident] = lambda item, final: room.put(True)
        try:
            self.events.send(ipc.RESPONSE, key, (flags, item, ident), block)
        except ipc.PeerClosed:
            self._waiters.pop(ident, None)
            raise pb_utils.TritonModelException("the server is gone") from None
        room.get()

    def _call(self, kind: int, body: Any, block: Any, deliver: _Deliver | None) -> int:
        """Send a call; its answers go to ``deliver`` on the events thread (None: they
        come on a reply channel the caller reads)."""
        self.called = True
        ident = next(self._ids)
        if deliver is not None:
            self._waiters[ident] = deliver
        try:
            self.events.send(kind, ident, body, block)
        except ipc.PeerClosed:
            self._waiters.pop(ident, None)
            raise pb_utils.TritonModelException("the server is gone") from None
        return ident

    def _bls_body(
        self, request: pb_utils.InferenceRequest, decoupled: bool, reply: int = 0
    ) -> tuple[Any, Any]:
        """A BLS_REQUEST's body and block; ``reply``: the reply channel of its answers
        (0: *events*)."""
        if not self.serving:
            raise pb_utils.TritonModelException(
                "BLS is only supported during the 'execute' function."
            )
        packer = Packer()
        inputs = tuple(packer.add(t._name, t._datatype, t._array) for t in request._inputs)
        body = (
            request._model_name,
            request._model_version,
            request._id,
            request._correlation_id,
            request._flags,
            request._timeout,
            request._parameters or None,
            request._output_names or None,
            inputs,
            decoupled,
            request._trace._trace_id,
            reply,
        )
        return body, packer.write(self.memory.arena)

    def infer(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """BLS ``exec``: the response, or an iterator over a decoupled model's responses.

        The calling thread reads the answers from a reply channel itself, so that an
        answer wakes it alone rather than the events thread first (see :mod:`.replies`)."""
        try:
            reply = self.replies.take()
        except ipc.PeerClosed:
            raise pb_utils.TritonModelException("the server is gone") from None
        if reply is None:  # as many calls wait as the pool holds: answers come on events
            return self._infer_relayed(request, decoupled)
        try:
            body, block = self._bls_body(request, decoupled, reply.ident)
            ident = self._call(ipc.BLS_REQUEST, body, block, None)
        except BaseException:
            self.replies.give(reply)  # nothing was sent: no answer will come
            raise
        source = _ReplySource(self, reply)
        if decoupled:
            return pb_utils.ResponseIterator(source, lambda: self._cancel_bls(ident))
        response, _ = source()
        return response

    def _infer_relayed(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """:meth:`infer` with the answers relayed by the events thread."""
        if decoupled:
            return self._stream(request, lambda iterator: None)
        answers: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()
        body, block = self._bls_body(request, False)
        self._call(ipc.BLS_REQUEST, body, block, lambda item, final: answers.put((item, final)))
        response, _ = answers.get()
        return response

    def _stream(
        self, request: pb_utils.InferenceRequest, on_first: Callable[[Any], None]
    ) -> pb_utils.ResponseIterator:
        """A decoupled BLS call answered on events: the iterator over its responses;
        ``on_first(iterator)`` runs (on the events thread) once the first response or the
        final flag is in."""
        answers: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()
        idents: list[int] = []
        iterator = pb_utils.ResponseIterator(answers.get, lambda: self._cancel_bls(idents[0]))
        waiting = [True]

        def deliver(item: Any, final: bool) -> None:
            answers.put((item, final))
            if waiting[0]:
                waiting[0] = False
                on_first(iterator)

        body, block = self._bls_body(request, True)
        idents.append(self._call(ipc.BLS_REQUEST, body, block, deliver))
        return iterator

    def infer_async(self, request: pb_utils.InferenceRequest, decoupled: bool) -> Any:
        """BLS ``async_exec``: an awaitable of what :meth:`infer` returns."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise pb_utils.TritonModelException(
                "async_exec() must be awaited in a coroutine (async def execute)"
            ) from None
        future = loop.create_future()
        if decoupled:
            # Triton's resolves with the first response in: iterating must not block the
            # loop that runs the other coroutines
            self._stream(
                request, lambda iterator: loop.call_soon_threadsafe(_resolve, future, iterator)
            )
            return future

        def deliver(item: Any, final: bool) -> None:
            loop.call_soon_threadsafe(_resolve, future, item)

        body, block = self._bls_body(request, False)
        self._call(ipc.BLS_REQUEST, body, block, deliver)
        return future

    def _cancel_bls(self, ident: int) -> None:
        with contextlib.suppress(ipc.PeerClosed):
            self.events.send(ipc.BLS_CANCEL, ident, None, None)

    def _ask(self, kind: int, body: Any) -> Any:
        answers: queue.SimpleQueue[tuple[Any, bool]] = queue.SimpleQueue()
        self._call(kind, body, None, lambda item, final: answers.put((item, final)))
        answer, _ = answers.get()
        return answer

    def watch(self, key: int, token: int) -> None:
        """The server tells this request's cancellation with ``token`` (main thread)."""
        tokens = self._watch_tokens
        if len(tokens) >= _MAX_WATCHED and key not in tokens:
            # requests whose batch failed are never unwatched: the oldest go back to asking
            del tokens[next(iter(tokens))]
        tokens[key] = token

    def unwatch(self, key: int) -> None:
        """The request is answered (its final response sent)."""
        token = self._watch_tokens.pop(key, None)
        if token is not None:
            self._cancelled_tokens.pop(token, None)

    def _told_cancelled(self, token: int) -> None:
        """``CANCELLED`` (events thread). A token told after its request's final response
        stays; past the bound, watches are no longer trusted (answers are asked again)."""
        told = self._cancelled_tokens
        if len(told) >= _MAX_WATCHED:
            self._trust_watch = False
            told.clear()
        told[token] = None

    def is_cancelled(self, key: int) -> bool:
        """A watched request's answer is known here (the server tells its cancellation as it
        happens); any other is asked of the server."""
        token = self._watch_tokens.get(key)
        if token is not None and self._trust_watch:
            return token in self._cancelled_tokens
        return bool(self._ask(ipc.CANCEL_QUERY, key))

    def control(self, operation: str, *args: Any) -> Any:
        ok, value = self._ask(ipc.CONTROL, (operation, args))
        if not ok:
            raise pb_utils.TritonModelException(value)
        return value

    def log(self, level: int, message: str, filename: str = "", line: int = 0) -> None:
        """``pb_utils.Logger``: level is a ``pb_utils.LogLevel``."""
        try:
            self.events.send(ipc.LOG, 0, (level, message, filename, line), None)
        except ipc.PeerClosed:
            print(message, file=sys.stderr)

    def metric_call(self, operation: str, args: tuple[Any, ...]) -> Any:
        """A custom-metrics call that answers (create a family or metric, read a value)."""
        ok, value = self._ask(ipc.METRIC, (operation, args))
        if not ok:
            raise pb_utils.TritonModelException(value)
        return value

    def metric_release(self, ident: int) -> None:
        """A deleted MetricFamily or Metric. Called from ``__del__``, which the garbage
        collector may run inside a send holding the channel's lock: sent from a thread."""
        self._released_metrics.append(ident)
        if not self._release_scheduled:
            self._release_scheduled = True
            threading.Thread(target=self._send_releases, daemon=True).start()

    def _send_releases(self) -> None:
        self._release_scheduled = False
        released = self._released_metrics
        with contextlib.suppress(ipc.PeerClosed, IndexError):
            while released:
                self.events.send(ipc.METRIC, 0, ("release", (released.pop(0), 0.0)), None)

    def metric_update(self, ident: int, operation: str, value: float) -> None:
        """increment / set / observe: sent without waiting, in order with the
        calls above, so a later ``value()`` sees it."""
        try:
            self.events.send(ipc.METRIC, 0, (operation, (ident, value)), None)
        except ipc.PeerClosed:
            raise pb_utils.TritonModelException("the server is gone") from None

    def _maybe_flush(self, pending: int) -> None:
        if pending < 64 or self._flush_scheduled:
            return
        self._flush_scheduled = True
        # not here: the last view may have died inside a send, holding the channel's lock
        threading.Thread(target=self._flush, daemon=True).start()

    def _flush(self) -> None:
        self._flush_scheduled = False
        with contextlib.suppress(ipc.PeerClosed):
            self.events.send(ipc.FREE, 0, None, None)

    def read_events(self) -> None:
        """The events thread: reads *events* until the server goes away."""
        while True:
            try:
                message = self.events.recv()
            except ipc.PeerClosed:
                if self.finalizing:
                    return
                self._exit(0)  # the server is gone
            assert message is not None
            kind = message.kind
            if kind == ipc.BLS_RESPONSE:
                final, item = message.body
                deliver = (
                    self._waiters.pop(message.ident, None)
                    if final
                    else self._waiters.get(message.ident)
                )
                if deliver is not None:
                    deliver(self._response(message.block, item), final)
            elif kind == ipc.CANCELLED:
                self._told_cancelled(message.ident)
            elif kind == ipc.REGIONS_CLOSED:
                self._regions.drop(message.body)
            elif kind == ipc.READINESS_QUERY:
                # on a thread: a slow is_ready() holds up neither BLS answers nor execute
                threading.Thread(
                    target=self._answer_readiness, args=(message.ident,), daemon=True
                ).start()
            elif kind in (
                ipc.CANCEL_ANSWER,
                ipc.CONTROL_ANSWER,
                ipc.METRIC_ANSWER,
                ipc.RESPONSE_ROOM,
            ):
                deliver = self._waiters.pop(message.ident, None)
                if deliver is not None:
                    deliver(message.body, True)

    def _response(self, block: Any, item: Any) -> pb_utils.InferenceResponse:
        descriptors, error, parameters = item
        owner = self.memory.take_block(block)
        tensor = pb_utils.Tensor._of
        tensors = [tensor(d[0], d[1], unpack(owner, d)) for d in descriptors]
        return pb_utils.InferenceResponse._received(
            tensors,
            None if error is None else pb_utils.TritonError(error[1], error[0]),
            parameters,
        )


class _ReplySource:
    """What a BLS call's caller reads its answers with, from its reply channel; a
    decoupled call's response iterator holds it. Dropped before the final answer, it
    leaves the rest to be drained."""

    __slots__ = ("_calls", "_reply")

    def __init__(self, calls: ServerCalls, reply: Reply) -> None:
        self._calls = calls
        self._reply: Reply | None = reply

    def __call__(self) -> tuple[Any, bool]:
        """The next answer: (response, final). The channel goes back to the pool after the
        final one."""
        reply = self._reply
        assert reply is not None, "read after the final answer"
        try:
            message = reply.recv()
        except ipc.PeerClosed:
            self._reply = None
            raise pb_utils.TritonModelException("the server is gone") from None
        assert message is not None and message.kind == ipc.BLS_RESPONSE
        final, item = message.body
        if final:
            self._reply = None
            self._calls.replies.give(reply)
        return self._calls._response(message.block, item), final

    def __del__(self) -> None:
        if self._reply is not None:
            with contextlib.suppress(RuntimeError):  # the interpreter is exiting
                self._calls.replies.abandon(self._reply)


def _resolve(future: asyncio.Future[Any], value: Any) -> None:
    if not future.done():
        future.set_result(value)
