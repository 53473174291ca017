"""``POST /v2/models/<name>[/versions/<n>]/infer``: the HTTP side of the one infer path.

Whoever read the request (the HTTP/1.1 protocol from its parser's callbacks, or any ASGI
server) hands the whole body to :meth:`HttpInfer.answer` with the request's headers and a
function that writes the answer. Everything else happens here, for every request alike:
the restricted-API check, the decoupled refusal, the bounded inflate of a compressed body,
decoding (in a thread when large), then :class:`~triton_core.frontends.infer.InferPath`
(header forwarding, tracing, submission), encoding, and a compressed answer when the client
accepts one. No feature belongs to one way in only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import unquote

from triton_core.errors import TritonError
from triton_core.frontends.common import parse_version
from triton_core.frontends.http import compression
from triton_core.frontends.http.codec import (
    DEFAULT_JSON_LIMITS,
    HEADER_LENGTH,
    DecodedRequest,
    JsonLimits,
)
from triton_core.frontends.http.decoding import (
    decode_in_thread,
    decode_infer_body,
    decode_threads,
    decodes_off_loop,
    encode_infer_answer_parts,
    error_body,
)
from triton_core.frontends.http.restricted import HeaderCheck
from triton_core.frontends.infer import InferPath, unexpected

if TYPE_CHECKING:
    from triton_core.frontends.header_forwarding import HeaderForwarder
    from triton_core.frontends.restricted import Restrictions
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.threads import OffloadThreads
    from triton_core.types import InferenceRequest, InferenceResponse

logger = logging.getLogger(__name__)

_PREFIX: Final = "/v2/models/"
_SUFFIX: Final = "/infer"
#: (de)compressing more than this (in or out) runs in a thread, not on the event loop
_OFFLOAD_BYTES: Final = 64 << 10
_HEADER_LENGTH: Final = HEADER_LENGTH.lower().encode()
#: the headers of an error answer
JSON_CONTENT: Final = {"Content-Type": "application/json"}

#: the request headers an infer answer depends on, which the protocol notes as they are
#: parsed (``connection``: whether an HTTP/1.0 client asked to keep the connection)
DECIDING_HEADERS: Final = frozenset(
    (
        b"content-length",
        b"inference-header-content-length",
        b"accept-encoding",
        b"content-encoding",
        b"transfer-encoding",
        b"connection",
    )
)
#: the (status, body) of a failed request, where a platform answers errors its own way
Failure = Callable[[TritonError], tuple[int, bytes]]
#: writes an answer: (status, header lines without content-length, body parts)
Write = Callable[[int, dict[str, str], list[bytes | memoryview]], None]


def infer_target(path: str) -> tuple[str, str] | None:
    """(model name, version text) of an infer path as sent (percent-encoded); None for any
    other path. The name is percent-decoded as a routed segment is; "" names no version."""
    if not path.startswith(_PREFIX) or not path.endswith(_SUFFIX):
        return None
    parts = path[len(_PREFIX) : -len(_SUFFIX)].split("/")
    if not parts[0]:
        return None
    if len(parts) == 1:
        version = ""
    elif len(parts) == 3 and parts[1] == "versions" and parts[2].isascii() and parts[2].isdigit():
        version = parts[2]  # a version past int64 is refused with Triton's message later
    else:
        return None
    name = unquote(parts[0]) if "%" in parts[0] else parts[0]
    return name, version


def deciding_headers(headers: Iterable[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """The headers an infer answer depends on, by lowercase name (the first of each)."""
    found: dict[bytes, bytes] = {}
    for name, value in headers:
        if name in DECIDING_HEADERS and name not in found:
            found[name] = value
    return found


def _text(value: bytes | None) -> str | None:
    return None if value is None else value.decode("latin-1")


class HttpInfer:
    """Answers the infer requests of one HTTP endpoint."""

    __slots__ = ("_threads", "inference_check", "json_limits", "max_input_size", "path", "server")

    def __init__(
        self,
        server: ServerAPI,
        *,
        max_input_size: int = 1 << 26,
        json_limits: JsonLimits = DEFAULT_JSON_LIMITS,
        restrictions: Restrictions | None = None,
        header_forwarder: HeaderForwarder | None = None,
        threads: OffloadThreads | None = None,
    ) -> None:
        self.server = server
        self.path = InferPath(server, "HTTP", forwarder=header_forwarder)
        self.max_input_size = max_input_size
        self.json_limits = json_limits
        inference = (restrictions or {}).get("inference")
        #: the header ``--http-restricted-api inference:...`` requires (None: open)
        self.inference_check = None if inference is None else HeaderCheck(inference)
        #: the threads that decode large bodies (None: the HTTP endpoint's)
        self._threads = threads

    def received(self) -> int:
        """Call as the request's headers arrive: its receive time while tracing, else 0."""
        return self.path.received()

    def answer(
        self,
        target: tuple[str, str],
        headers: list[tuple[bytes, bytes]],
        body: bytes | memoryview,
        since: int,
        write: Write,
        failure: Failure | None = None,
        deciding: dict[bytes, bytes] | None = None,
    ) -> InferExchange:
        """Answer one request whose body is read; ``write`` is called once, on the loop.
        ``headers``: lowercase names, as read; ``deciding``: :func:`deciding_headers` of
        them, when the caller has it already. Cancel the exchange when the client goes.
        ``failure``: the (status, body) of an error instead of Triton's (SageMaker's)."""
        if deciding is None:
            deciding = deciding_headers(headers)
        exchange = InferExchange(self, target[0], headers, deciding, since, write, failure)
        exchange.begin(target[1], body)
        return exchange

    async def answered(
        self,
        target: tuple[str, str],
        headers: list[tuple[bytes, bytes]],
        body: bytes | memoryview,
        since: int,
        failure: Failure | None = None,
    ) -> tuple[int, dict[str, str], list[bytes | memoryview]]:
        """:meth:`answer` awaited, as (status, headers, body parts): the way in of ASGI apps.
        Cancelling the awaiting task cancels the work."""
        done: asyncio.Future[tuple[int, dict[str, str], list[bytes | memoryview]]] = (
            asyncio.get_running_loop().create_future()
        )

        def write(status: int, headers: dict[str, str], parts: list[bytes | memoryview]) -> None:
            if not done.done():
                done.set_result((status, headers, parts))

        exchange = self.answer(target, headers, body, since, write, failure)
        try:
            return await done
        except asyncio.CancelledError:
            exchange.cancel()
            raise


class InferExchange:
    """One HTTP infer request, from its read body to its written answer: callbacks only,
    no task (the answer is written from the response future's callback)."""

    __slots__ = (
        "_deciding",
        "_decoded",
        "_failure",
        "_future",
        "_headers",
        "_infer",
        "_since",
        "_version",
        "_write",
        "cancelled",
        "model_name",
    )

    def __init__(
        self,
        infer: HttpInfer,
        model_name: str,
        headers: list[tuple[bytes, bytes]],
        deciding: dict[bytes, bytes],
        since: int,
        write: Write,
        failure: Failure | None = None,
    ) -> None:
        self._deciding = deciding
        self._infer = infer
        self._failure = failure
        self.model_name = model_name
        self._headers = headers
        self._since = since
        self._write = write
        self._version = -1
        self._future: asyncio.Future[Any] | None = None
        self._decoded: DecodedRequest | None = None
        self.cancelled = False

    def cancel(self) -> None:
        """The client went away: stop the work, answer nothing."""
        self.cancelled = True
        if self._future is not None:
            self._future.cancel()

    def begin(self, version: str, body: bytes | memoryview) -> None:
        infer = self._infer
        try:
            check = infer.inference_check
            if check is not None and not check.allows(self._headers):
                self._write(403, JSON_CONTENT, [check.body])
                return
            if version:
                self._version = parse_version(version)
            infer.path.refuse_decoupled(self.model_name, self._version)
        except Exception as exc:
            self.fail(unexpected(exc))
            return
        content_encoding = self._deciding.get(b"content-encoding")
        if content_encoding is None:
            self._decode(body)
            return
        try:
            encoding = compression.request_encoding(content_encoding.decode("latin-1"))
        except TritonError as error:  # the answer names what the server takes
            headers = {**JSON_CONTENT, "Accept-Encoding": compression.SUPPORTED_ENCODINGS}
            self._write(error.status.http_status, headers, [error_body(error.message)])
            return
        if encoding == compression.IDENTITY:
            self._decode(body)
            return
        limit = infer.max_input_size
        if len(body) < _OFFLOAD_BYTES:
            # a small body may still inflate to the limit: on the loop only up to a budget
            try:
                inflated = compression.decompress_within(
                    bytes(body), encoding, limit, _OFFLOAD_BYTES
                )
            except Exception as exc:
                self.fail(unexpected(exc))
                return
            if inflated is not None:
                self._decode(memoryview(inflated))
                return
        loop = asyncio.get_running_loop()
        inflating = loop.run_in_executor(None, compression.decompress, bytes(body), encoding, limit)
        self._after(inflating, lambda inflated: self._decode(memoryview(inflated)))

    def _after(self, future: asyncio.Future[Any], then: Callable[..., None]) -> None:
        """Go on with ``then(result)`` once ``future`` is done, unless the client is gone."""
        self._future = future

        def done(future: asyncio.Future[object]) -> None:
            if future.cancelled() or self.cancelled:
                return
            try:
                result = future.result()
            except Exception as exc:
                self.fail(unexpected(exc))
                return
            then(result)

        future.add_done_callback(done)

    def _decode(self, body: bytes | memoryview) -> None:
        infer = self._infer
        header_length = _text(self._deciding.get(_HEADER_LENGTH))
        args = (
            infer.server,
            self.model_name,
            self._version,
            body,
            header_length,
            infer.json_limits,
        )
        try:
            if decodes_off_loop(body, header_length):
                threads = infer._threads or decode_threads()
                self._after(decode_in_thread(*args, threads), self._submit)
                return
            decoded = decode_infer_body(*args)
        except Exception as exc:
            self.fail(unexpected(exc))
            return
        self._submit(decoded)

    def _submit(self, decoded: DecodedRequest) -> None:
        self._decoded = decoded
        path = self._infer.path
        submitted = path.answer(
            decoded.request, self._text_headers, self._since, self, checked=True
        )
        self._future = submitted

    def _text_headers(self) -> list[tuple[str, str]]:
        """The headers as text, for forwarding and a trace's parent (only then)."""
        return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in self._headers]

    # -- the Reply of InferPath

    def respond(self, response: InferenceResponse, request: InferenceRequest) -> None:
        assert self._decoded is not None
        parts, headers = encode_infer_answer_parts(response, self._decoded)
        accept = self._deciding.get(b"accept-encoding")
        encoding = (
            compression.response_encoding(accept.decode("latin-1"))
            if accept
            else compression.IDENTITY
        )
        if encoding == compression.IDENTITY:
            self._write(200, headers, parts)
            return
        data = b"".join(parts)
        headers = {**headers, "Content-Encoding": encoding}
        if len(data) < _OFFLOAD_BYTES:
            self._write(200, headers, [compression.compress(data, encoding)])
            return
        compressing = asyncio.get_running_loop().run_in_executor(
            None, compression.compress, data, encoding
        )
        self._after(compressing, lambda data: self._write(200, headers, [data]))

    def fail(self, error: TritonError) -> None:
        if self._failure is not None:
            status, body = self._failure(error)
            self._write(status, JSON_CONTENT, [body])
            return
        self._write(error.status.http_status, JSON_CONTENT, [error_body(error.message)])
