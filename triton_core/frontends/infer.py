"""One way to answer an inference request, whatever the protocol.

A protocol decodes its request into an :class:`~triton_core.types.InferenceRequest` and
hands it to :meth:`InferPath.answer` with the headers it came with and a :class:`Reply`: its
way to encode and send an answer or an error. Everything between is here, once: header
forwarding, the refusal of decoupled models on one-answer calls, tracing (receive, response
and send timestamps), submission, cancellation when the caller goes away, and turning any
failure into a :class:`~triton_core.TritonError` answer.

Streams (``ModelStreamInfer``, generate_stream) answer many times per request; they share
:meth:`InferPath.prepare` (forwarding, tracing) and send as the server streams.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from time import monotonic_ns
from typing import TYPE_CHECKING, Final, Protocol

from triton_core.errors import TritonError, internal, unsupported
from triton_core.frontends.tracing import sent, start_trace, tracer_of

if TYPE_CHECKING:
    from triton_core.frontends.header_forwarding import HeaderForwarder
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.observability.tracing import Trace, Tracer
    from triton_core.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

#: Triton's refusal of a decoupled model on a call that takes one answer, by protocol
#: (clients test for these words)
DECOUPLED_MESSAGES: Final = {
    "HTTP": "HTTP end point doesn't support models with decoupled transaction policy",
    "GRPC": "ModelInfer RPC doesn't support models with decoupled transaction policy",
}
#: the timestamps a protocol's receive adds to a trace, by protocol
_RECEIVE: Final = {
    "HTTP": ("HTTP_RECV_START", "HTTP_RECV_END"),
    "GRPC": ("GRPC_WAITREAD_START", "GRPC_WAITREAD_END"),
}

#: the request's headers as (name, value) text pairs, or a function that gives them
Headers = Iterable[tuple[str, str]] | Callable[[], Iterable[tuple[str, str]]]


class Reply(Protocol):
    """What a protocol contributes to answering one request."""

    def respond(self, response: InferenceResponse, request: InferenceRequest) -> None:
        """Encode ``response`` and send it. Raising instead sends the error (:meth:`fail`)."""

    def fail(self, error: TritonError) -> None:
        """Send ``error`` as this protocol's error answer."""


def unexpected(exc: BaseException) -> TritonError:
    """A failure as the answer it becomes: a :class:`TritonError` as it is, anything else
    as INTERNAL (logged with its traceback: it is a bug)."""
    if isinstance(exc, TritonError):
        return exc
    logger.error("unexpected error answering an inference request", exc_info=exc)
    return internal(str(exc) or type(exc).__name__)


class InferPath:
    """Answers a protocol's inference requests on ``server``.

    ``protocol`` ("HTTP" or "GRPC") names the trace timestamps; ``forwarder`` turns the
    matching headers into request parameters (``--*-header-forward-pattern``).
    """

    __slots__ = ("_forwarder", "_receive", "_server", "_tracer", "protocol")

    def __init__(
        self,
        server: ServerAPI,
        protocol: str,
        *,
        forwarder: HeaderForwarder | None = None,
    ) -> None:
        self._server = server
        self.protocol = protocol
        self._receive = _RECEIVE[protocol]
        self._forwarder = forwarder
        # tracing may be switched on and off while serving (the trace extension)
        self._tracer: Tracer = tracer_of(server)

    def refuse_decoupled(self, model_name: str, model_version: int) -> None:
        """Raise this protocol's refusal when the model is decoupled (a one-answer call)."""
        if self._server.model_is_decoupled(model_name, model_version):
            raise unsupported(DECOUPLED_MESSAGES[self.protocol])

    def received(self) -> int:
        """Call when a request starts arriving: its receive time while tracing, else 0."""
        return monotonic_ns() if self._tracer.enabled else 0

    def prepare(
        self,
        request: InferenceRequest,
        headers: Headers,
        since: int,
        *,
        one_answer: bool,
    ) -> Trace | None:
        """Forward headers, refuse a decoupled model on a one-answer call, start the trace
        (``since`` from :meth:`received`); raises the :class:`TritonError` to answer."""
        if self._forwarder is not None:
            pairs = headers() if callable(headers) else headers
            request.parameters.update(self._forwarder.parameters(pairs))
        if one_answer:
            self.refuse_decoupled(request.model_name, request.model_version)
        if not since:
            return None
        start, end = self._receive
        pairs = headers() if callable(headers) else headers
        trace = start_trace(
            self._tracer, request.model_name, pairs, ((start, since), (end, monotonic_ns()))
        )
        request.trace = trace
        return trace

    def answer(
        self,
        request: InferenceRequest,
        headers: Headers,
        since: int,
        reply: Reply,
        *,
        checked: bool = False,
    ) -> asyncio.Future[InferenceResponse] | None:
        """Submit ``request`` and answer it through ``reply`` once it is done: no task, the
        answer is sent from the response future's callback. The future is returned so that
        the protocol cancels it when its caller goes away (None: already answered).
        ``checked``: the protocol refused a decoupled model already (before decoding)."""
        trace = None
        try:
            if since or not checked or self._forwarder is not None:
                trace = self.prepare(request, headers, since, one_answer=not checked)
            future = self._server.submit(request)
        except Exception as exc:
            self._fail(reply, unexpected(exc), trace)
            return None

        def done(future: asyncio.Future[InferenceResponse]) -> None:
            self._finish(future, request, reply, trace)

        future.add_done_callback(done)
        return future

    def _finish(
        self,
        future: asyncio.Future[InferenceResponse],
        request: InferenceRequest,
        reply: Reply,
        trace: Trace | None,
    ) -> None:
        if future.cancelled():
            if trace is not None:
                trace.end()  # written as far as it got
            return  # the caller went away: nobody to answer
        if trace is not None:
            trace.timestamp("INFER_RESPONSE_COMPLETE")
        send_start = monotonic_ns() if trace is not None else 0
        try:
            response = future.result()
            if response.error is not None:
                raise response.error
            reply.respond(response, request)
        except Exception as exc:
            reply.fail(unexpected(exc))
        if trace is not None:
            sent(trace, self.protocol, send_start)

    def _fail(self, reply: Reply, error: TritonError, trace: Trace | None) -> None:
        send_start = monotonic_ns() if trace is not None else 0
        reply.fail(error)
        if trace is not None:
            sent(trace, self.protocol, send_start)
