"""SageMaker's multi-model endpoint contract, as Triton serves it.

SageMaker unpacks each model archive under ``/opt/ml/models/<hash>/model`` and then asks:

- ``POST /models`` ``{"model_name": "<hash>", "url": "/opt/ml/models/<hash>/model"}``: the
  folder is registered as a model repository and its model loaded, under the name in the
  ``X-Amzn-SageMaker-Target-Model`` header (else the hash); an archive of several models
  serves its ensemble. 200; 409 when the name is taken; 400 (507 when memory ran out).
- ``GET /models``: ``{"models": [{"modelName": ..., "modelUrl": ...}]}``, the ready ones.
- ``GET /models/<hash>``: ``{"modelName": ..., "modelUrl": ...}``; 404 when not loaded here.
- ``POST /models/<hash>/invoke``: infer, as ``/invocations``; every error 400 (or 507).
- ``DELETE /models/<hash>``: unload it (and what its ensemble loaded), forget its folder.

The server must run with ``--model-control-mode=explicit`` (Triton's ``serve`` script starts
it so). ``TRITON_CORE_SAGEMAKER_MODEL_ROOT`` moves ``/opt/ml/models`` (beyond Triton).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import orjson

from triton_core.errors import Status, TritonError, invalid_arg
from triton_core.frontends.http.cloud import header, respond
from triton_core.frontends.http.codec import JsonLimits, parse_json
from triton_core.frontends.http.decoding import error_body
from triton_core.frontends.http.fast_path import Receive, Scope, Send, read_body
from triton_core.frontends.server_api import ServerAPI

logger = logging.getLogger(__name__)

TARGET_MODEL_HEADER: Final = b"x-amzn-sagemaker-target-model"
_ENSEMBLE: Final = re.compile(r'platform:(\s)*"ensemble"')
#: what Triton reads of a config.pbtxt to find an archive's ensemble
_CONFIG_READ_BYTES: Final = 1 << 20
#: subfolders of an archive looked at, at most
_MAX_SUBFOLDERS: Final = 1024
_SYSTEM_PREFIXES: Final = ("/dev/", "/proc/", "/sys/")
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


@dataclass(frozen=True, slots=True)
class LoadedArchive:
    """A model loaded through ``POST /models``."""

    #: the model it is served as
    target: str
    #: the repository folder registered for it (Triton's ``modelUrl``)
    repository: str


@dataclass(frozen=True, slots=True)
class ArchiveLayout:
    """Where an archive's model is: the folder to register, and the subfolder to map."""

    repository: str
    subfolder: str


def archive_layout(url: str, root: str) -> ArchiveLayout:
    """Triton's reading of an archive folder (blocking I/O); INVALID_ARG when ``url`` is not
    ``<root>/<hash>/model[/<subfolder>]``."""
    path = os.path.abspath(os.path.normpath(url)) if url else os.path.abspath(".")
    pattern = re.escape(root.rstrip("/")) + r"/[0-9A-Za-z._]+"
    match = re.fullmatch(rf"({pattern})/(model)/?([0-9A-Za-z._]+)?", path)
    if match is None:
        raise invalid_arg(
            f"Invalid \"url\" '{url}': expected a path of the form {root.rstrip('/')}/<hash>/"
            "model[/<subdir>]"
        )
    if os.path.exists(os.path.join(path, "config.pbtxt")):
        # the model itself: its parent is the repository, "model" the folder to map
        return ArchiveLayout(match.group(1), match.group(2))
    return ArchiveLayout(path, _model_subfolder(Path(path)))


def _model_subfolder(folder: Path) -> str:
    """The archive's ensemble, else its (last) model folder."""
    chosen = ensemble = ""
    try:
        entries = sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())
    except OSError:
        return ""
    for name in entries[:_MAX_SUBFOLDERS]:
        chosen = name
        try:
            with open(folder / name / "config.pbtxt", "rb") as handle:
                text = handle.read(_CONFIG_READ_BYTES).decode("utf-8", "replace")
        except OSError:
            continue
        if _ENSEMBLE.search(text):
            logger.info(
                "SageMaker front-end detected an Ensemble config at path: %s", folder / name
            )
            ensemble = name
    return ensemble or chosen


class MultiModelEndpoint:
    """The ``/models`` routes' state: the models loaded through them, by hash."""

    def __init__(self, server: ServerAPI, root: str, json_limits: JsonLimits) -> None:
        self.server = server
        self.root = root
        self.json_limits = json_limits
        self.models: dict[str, LoadedArchive] = {}
        #: loads and unloads one at a time: each changes the repositories and the list
        self.lock = asyncio.Lock()

    def target(self, scope: Scope, name: str) -> str:
        return header(scope, TARGET_MODEL_HEADER) or name

    async def list_models(self, send: Send) -> None:
        models = [
            {"modelName": name, "modelUrl": archive.repository}
            for name, archive in self.models.items()
            if self.server.model_ready(archive.target)
        ]
        await respond(send, 200, orjson.dumps({"models": models}), _json_headers())

    async def get_model(self, send: Send, name: str) -> None:
        archive = self.models.get(name)
        if archive is None:
            await respond(send, 404)
            return
        body = orjson.dumps({"modelName": name, "modelUrl": archive.repository})
        await respond(send, 200, body, _json_headers())

    async def load(self, scope: Scope, receive: Receive, send: Send, limit: int) -> None:
        try:
            name, url = await self._load_request(receive, limit)
        except TritonError as error:
            await respond(send, 400, error_body(error.message))
            return
        if os.path.abspath(url).startswith(_SYSTEM_PREFIXES):
            logger.error('Invalid URL: %s. "url" cannot start with /dev/, /proc/, or /sys/.', url)
            await respond(send, 400)
            return
        target = self.target(scope, name)
        logger.info("Loading SageMaker TargetModel: %s", target)
        async with self.lock:
            status, body = await self._load(name, url, target)
        await respond(send, status, body)

    async def _load_request(self, receive: Receive, limit: int) -> tuple[str, str]:
        body = await read_body(receive, limit)
        if not body:
            return "", ""
        request = parse_json(body, self.json_limits, "the load model request")
        if not isinstance(request, dict):
            raise invalid_arg("the load model request must be a JSON object")
        name, url = request.get("model_name", ""), request.get("url", "")
        if not isinstance(name, str) or not isinstance(url, str):
            raise invalid_arg("'model_name' and 'url' must be strings in a load model request")
        return name, url

    async def _load(self, name: str, url: str, target: str) -> tuple[int, bytes]:
        server = self.server
        try:
            layout = await asyncio.to_thread(archive_layout, url, self.root)
            server.register_model_repository(layout.repository, {target: layout.subfolder})
        except TritonError as error:
            status = 409 if error.status is Status.ALREADY_EXISTS else 400
            return status, error_body(error.message)
        try:
            await server.load_model(target)
        except TritonError as error:
            self._forget_repository(layout.repository)
            if error.status is Status.ALREADY_EXISTS:
                return 409, error_body(error.message)
            return out_of_memory_status(error.message), error_body(error.message)
        self.models[name] = LoadedArchive(target, layout.repository)
        return 200, b""

    def _forget_repository(self, repository: str) -> None:
        try:
            self.server.unregister_model_repository(repository)
        except TritonError as error:
            logger.error("Unable to unregister model repository %s: %s", repository, error)

    async def unload(self, scope: Scope, send: Send, name: str) -> None:
        archive = self.models.get(name)
        if archive is None:
            logger.debug("Model %s is not loaded.", name)
            await respond(send, 404)
            return
        target = self.target(scope, name)
        logger.info("Unloading SageMaker TargetModel: %s", target)
        async with self.lock:
            try:
                # always with dependents: an ensemble's steps go with it
                await self.server.unload_model(target, unload_dependents=True)
            except TritonError as error:
                logger.error("Error when unloading SageMaker Model: %s", target)
                await respond(send, 400, error_body(error.message))
                return
            try:
                self.server.unregister_model_repository(archive.repository)
            except TritonError as error:
                await respond(send, 400, error_body(error.message))
                return
            finally:
                self.models.pop(name, None)
        await respond(send, 200)


def is_out_of_memory(message: str) -> bool:
    return any(marker in message for marker in _OUT_OF_MEMORY)


def out_of_memory_status(message: str) -> int:
    """Triton's SageMaker status for a failure: 507 when memory ran out, else 400."""
    return 507 if is_out_of_memory(message) else 400


def _json_headers() -> list[tuple[bytes, bytes]]:
    return [(b"content-type", b"application/json")]
