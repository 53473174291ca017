"""Inference as newline-delimited JSON over TCP: a frontend written against the public API.

``triton-core serve --ndjson-port 9100`` serves it. A client writes one JSON object per
line and reads one back per line, in order::

    {"id": "1", "model": "m", "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 2],
     "data": [1.0, 2.0]}]}
    {"id": "1", "model_name": "m", "outputs": [{"name": "y", "datatype": "FP32", ...}]}

A request that fails is answered ``{"id": ..., "error": "...", "status": "NOT_FOUND"}`` and
the connection goes on. Lines longer than ``--ndjson-max-line-bytes`` close the connection.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
from typing import Any

import numpy as np

from triton_core import (
    NUMPY_DTYPES,
    Endpoint,
    Frontend,
    FrontendRegistry,
    FrontendSettings,
    InferenceRequest,
    InferenceResponse,
    ServerAPI,
    Tensor,
    TritonError,
    hookimpl,
    invalid_arg,
)

logger = logging.getLogger(__name__)

#: the longest request line by default (bytes); a longer one closes the connection
DEFAULT_MAX_LINE_BYTES = 1 << 20
#: most inputs one request may carry
MAX_INPUTS = 64


def _array(spec: Any) -> Tensor:
    """An input tensor from its JSON description, checked before it is built."""
    if not isinstance(spec, dict):
        raise invalid_arg("each input must be an object")
    name, datatype = spec.get("name"), spec.get("datatype")
    shape, data = spec.get("shape"), spec.get("data")
    if not isinstance(name, str) or datatype not in NUMPY_DTYPES:
        raise invalid_arg(f"input {name!r}: a name and a known datatype are required")
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise invalid_arg(f"input '{name}': shape must be a list of counts")
    if not isinstance(data, list) or len(data) != math.prod(shape):
        raise invalid_arg(f"input '{name}': data must hold {math.prod(shape)} values")
    try:
        array = np.array(data, dtype=NUMPY_DTYPES[datatype]).reshape(shape)
    except (TypeError, ValueError) as exc:
        raise invalid_arg(f"input '{name}': {exc}") from None
    return Tensor(name, datatype, array)


def parse_request(line: bytes) -> tuple[str, InferenceRequest]:
    """(id, request) of one line; raises INVALID_ARG for what does not fit."""
    try:
        body = json.loads(line)
    except ValueError as exc:
        raise invalid_arg(f"not JSON: {exc}") from None
    if not isinstance(body, dict) or not isinstance(body.get("model"), str):
        raise invalid_arg("a request is an object naming its 'model'")
    inputs = body.get("inputs", [])
    if not isinstance(inputs, list) or len(inputs) > MAX_INPUTS:
        raise invalid_arg(f"'inputs' must be a list of at most {MAX_INPUTS}")
    tensors = [_array(spec) for spec in inputs]
    request = InferenceRequest(body["model"], {tensor.name: tensor for tensor in tensors})
    return str(body.get("id", "")), request


def _values(array: np.ndarray) -> list[Any]:
    """An output's values as JSON values: BYTES as text."""
    values: list[Any] = array.ravel().tolist()
    if array.dtype == object:
        return [v.decode("utf-8", "replace") if isinstance(v, bytes) else v for v in values]
    return values


def format_response(request_id: str, response: InferenceResponse) -> dict[str, Any]:
    return {
        "id": request_id,
        "model_name": response.model_name,
        "outputs": [
            {
                "name": output.name,
                "datatype": output.datatype,
                "shape": list(output.data.shape),
                "data": _values(output.data),
            }
            for output in response.outputs
        ],
    }


class NdjsonFrontend(Frontend):
    """Serves one connection's lines in order; each line is one inference."""

    name = "NDJSON"

    def __init__(self, address: str, port: int, max_line_bytes: int) -> None:
        self.endpoint = Endpoint(self.name, address, port)
        self.max_line_bytes = max_line_bytes
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

    def endpoints(self) -> list[Endpoint]:
        return [self.endpoint]

    def check(self) -> None:
        if self.max_line_bytes < 1:
            raise ValueError("--ndjson-max-line-bytes must be at least 1")

    async def listen(self, server: ServerAPI, reuse_port: bool) -> None:
        # bound now, served once start() says the models are loaded; reuse_port: the
        # --workers processes share the port
        self._server = await asyncio.start_server(
            lambda reader, writer: self._connection(server, reader, writer),
            self.endpoint.address,
            self.endpoint.port,
            limit=self.max_line_bytes,
            reuse_port=reuse_port,
            start_serving=False,
        )

    async def start(self, server: ServerAPI) -> None:
        assert self._server is not None, "listen() comes before start()"
        await self._server.start_serving()
        logger.info("Started NDJSON service at %s:%d", self.endpoint.address, self._port())

    def _port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    def ports(self) -> dict[str, int]:
        return {} if self._server is None else {self.endpoint.key: self._port()}

    async def stop(self, timeout: float) -> None:
        if self._server is None:
            return
        self._server.close()
        if self._connections:
            _, late = await asyncio.wait(self._connections, timeout=timeout)
            for task in late:
                task.cancel()

    async def _connection(
        self, server: ServerAPI, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while self._server is not None and self._server.is_serving():
                try:
                    line = await reader.readline()
                except ValueError:  # longer than the limit: no way to find the next line
                    break
                if not line:
                    break
                writer.write(json.dumps(await self._answer(server, line)).encode() + b"\n")
                await writer.drain()  # backpressure: read no further while the client lags
        except ConnectionError:
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def _answer(self, server: ServerAPI, line: bytes) -> dict[str, Any]:
        request_id = ""
        try:
            request_id, request = parse_request(line)
            return format_response(request_id, await server.infer(request))
        except TritonError as error:
            return {"id": request_id, "error": error.message, "status": error.status.name}


def _create(settings: FrontendSettings) -> NdjsonFrontend | None:
    port = settings.argument("ndjson_port")
    if port is None:
        return None
    return NdjsonFrontend(
        settings.argument("ndjson_address", "127.0.0.1"),
        port,
        settings.argument("ndjson_max_line_bytes", DEFAULT_MAX_LINE_BYTES),
    )


@hookimpl
def triton_add_serve_arguments(parser: argparse._ArgumentGroup) -> None:
    parser.add_argument("--ndjson-port", type=int, default=None, help="serve NDJSON here")
    parser.add_argument("--ndjson-address", default="127.0.0.1")
    parser.add_argument("--ndjson-max-line-bytes", type=int, default=DEFAULT_MAX_LINE_BYTES)


@hookimpl
def triton_register_frontends(registry: FrontendRegistry) -> None:
    registry.add("ndjson", _create)
