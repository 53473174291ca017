"""Triton's SageMaker endpoint (``--allow-sagemaker``): ``GET /ping``, ``POST /invocations``.

``/invocations`` runs the model ``SAGEMAKER_TRITON_DEFAULT_MODEL_NAME`` names, with a KServe v2
infer body (``SAGEMAKER_TRITON_INFERENCE_TYPE=infer``, the default) or a generate body. A
binary-extension body says its JSON header's size in its Content-Type,
``application/vnd.sagemaker-triton.binary+json;json-header-size=<n>``, and an answer with
binary outputs says it the same way. As Triton, a request that fails while its model runs is
answered 400 (507 when the error says memory ran out); other errors keep their v2 status.
"""

from __future__ import annotations

import logging
import re
from typing import Any, Final
from urllib.parse import quote

from triton_core.errors import TritonError
from triton_core.frontends.cloud import SageMakerOptions
from triton_core.frontends.http.app import InferenceServerAPI, error_body
from triton_core.frontends.http.cloud import CloudEndpoint, respond
from triton_core.frontends.http.codec import HEADER_LENGTH
from triton_core.frontends.http.fast_path import ASGIApp, Receive, Scope, Send

logger = logging.getLogger(__name__)

BINARY_MIME: Final = "application/vnd.sagemaker-triton.binary+json;json-header-size="
#: Triton's multi-model routes: ``/models``, ``/models/<name>``, ``/models/<name>/invoke``
_MODELS: Final = re.compile(r"/models(?:/)?([^/]+)?(/invoke)?")
#: what in an error's message makes Triton answer 507 (Insufficient Storage): memory ran out
_OUT_OF_MEMORY: Final = (
    "CUDA out of memory",
    "CUDA_OUT_OF_MEMORY",
    "Out of memory",
    "Out Of Memory",
    "out of memory",
    "MemoryError",
    "OutOfMemory",
    "OOM",
    "Dst tensor is not initialized",
    "Src tensor is not initialized",
    "CNMEM_STATUS_OUT_OF_MEMORY",
    "CUDNN_STATUS_NOT_INITIALIZED",
    "CUBLAS_STATUS_ALLOC_FAILED",
    "CUBLAS_STATUS_NOT_INITIALIZED",
    "Failed to allocate memory",
    "failed to allocate memory",
    "No space left on device",
)
_JSON_CONTENT_TYPE: Final = (b"content-type", b"application/json")


def is_out_of_memory(message: str) -> bool:
    return any(marker in message for marker in _OUT_OF_MEMORY)


def raw_path(scope: Scope) -> str:
    """The path as the client sent it (Triton matches routes on it, undecoded)."""
    raw = scope.get("raw_path")
    return raw.decode("latin-1") if raw else str(scope["path"])


class SageMakerApp(CloudEndpoint):
    """The SageMaker listener's ASGI app."""

    binary_mime = BINARY_MIME

    def __init__(
        self,
        server: InferenceServerAPI,
        app: ASGIApp,
        options: SageMakerOptions,
        **limits: Any,
    ) -> None:
        super().__init__(server, app, **limits)
        self.options = options

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path = raw_path(scope)
        if path == "/ping":
            await self.health(scope, send, live=self.options.ping_mode == "live")
        elif path == "/invocations":
            await self.invocations(scope, receive, send)
        elif _MODELS.fullmatch(path):
            await self.multi_model(scope, send)
        else:
            logger.debug("SageMaker error: %s %s - 400", scope["method"], path)
            await respond(send, 400)

    async def invocations(self, scope: Scope, receive: Receive, send: Send) -> None:
        model = self.options.default_model
        kind = self.options.inference_type
        if kind == "infer":
            await self.infer(scope, receive, send, model)
            return
        # generate and generate_stream: as the v2 generate routes of the default model
        path = f"/v2/models/{model}/{kind}"
        raw = f"/v2/models/{quote(model, safe='')}/{kind}"
        await self.forward(scope, receive, send, path, scope["method"], raw)

    async def multi_model(self, scope: Scope, send: Send) -> None:
        """Triton's multi-model endpoint: models are loaded into it from archives SageMaker
        unpacks under /opt/ml/models, which this server does not do."""
        await respond(
            send,
            501,
            error_body(
                "SageMaker multi-model endpoints (/models) are not supported; serve one "
                f"model through /invocations ({'SAGEMAKER_TRITON_DEFAULT_MODEL_NAME'})"
            ),
        )

    def execution_failure(self, error: TritonError) -> tuple[int, bytes]:
        status = 507 if is_out_of_memory(error.message) else 400
        return status, error_body(error.message)

    def answer_headers(self, headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
        size = headers.get(HEADER_LENGTH)
        if size is None:
            return [_JSON_CONTENT_TYPE]
        return [(b"content-type", f"{BINARY_MIME}{size}".encode())]
