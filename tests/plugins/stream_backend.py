"""A decoupled test backend: answers each request ``count`` times, ``delay_ms`` apart.

Model config parameters: ``count`` (responses per request, taken from input COUNT when the
model has it), ``delay_ms``; the output OUT carries the response index. ``finish`` selects how
the stream ends: ``flag`` (a flag-only final send, Triton's usual pattern) or ``last`` (the
last response carries the final flag). Cancellation is observed between responses.
``out_dtype`` (a numpy dtype name, default int32) lets a model send OUT values of a dtype its
config does not declare, for the server's output checks. ``out_bytes`` (default 0: off) makes
OUT a UINT8 tensor of that many bytes, :func:`pattern` of the response index. With
``progress_dir``, the count of sends that returned is kept in ``<dir>/<request id>.sent``
and how the stream ended (``finished`` or ``cancelled``) in ``<dir>/<request id>.ended``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import numpy as np

from triton_core import (
    Backend,
    BackendModel,
    InferenceRequest,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    Tensor,
    hookimpl,
)
from triton_core.errors import internal

logger = logging.getLogger(__name__)

#: request ids whose streams saw is_cancelled() become true (for the tests to check)
CANCELLED: set[str] = set()


def pattern(index: int, size: int) -> np.ndarray:
    """The bytes of response ``index``: different for each index and each position."""
    return ((np.arange(size, dtype=np.uint32) * 7 + index) % 251).astype(np.uint8)


def write_progress(folder: str, name: str, text: str) -> None:
    """``folder/name`` holds ``text``, replaced whole (a reader never sees a partial one)."""
    partial = Path(folder, f".{name}.partial")
    partial.write_text(text)
    os.replace(partial, Path(folder, name))


def read_progress(folder: Path, request_id: str, what: str) -> str:
    """What ``progress_dir`` holds about a request: ``sent`` or ``ended`` ("" before)."""
    try:
        return Path(folder, f"{request_id}.{what}").read_text()
    except FileNotFoundError:
        return ""


def _parameter(context: ModelContext, key: str, default: str) -> str:
    parameters = context.config.parameters
    return parameters[key].string_value if key in parameters else default


class StreamInstance(ModelInstance):
    def __init__(self, context: ModelContext) -> None:
        self.count = int(_parameter(context, "count", "3"))
        self.delay = float(_parameter(context, "delay_ms", "10")) / 1000
        self.finish = _parameter(context, "finish", "flag")
        self.out_dtype = np.dtype(_parameter(context, "out_dtype", "int32"))
        self.out_bytes = int(_parameter(context, "out_bytes", "0"))
        self.progress_dir = _parameter(context, "progress_dir", "")

    def execute(self, requests: list[InferenceRequest]) -> None:
        for request in requests:
            if "FAIL" in request.parameters:
                raise internal("stream backend was told to fail")
            count = self.count
            if "COUNT" in request.inputs:
                count = int(request.inputs["COUNT"].data.reshape(-1)[0])
            # answer from a thread of the model's own, after execute returned, as Python
            # models often do
            threading.Thread(target=self._answer, args=(request, count), daemon=True).start()

    def _answer(self, request: InferenceRequest, count: int) -> None:
        sender = request.response_sender
        assert sender is not None
        for index in range(count):
            if sender.is_cancelled():
                CANCELLED.add(request.id)
                logger.warning("request '%s' was cancelled after %d responses", request.id, index)
                self._progress(request, "ended", "cancelled")
                sender.send(final=True)
                return
            time.sleep(self.delay)
            last = index == count - 1 and self.finish == "last"
            if self.out_bytes:
                out = Tensor("OUT", "UINT8", pattern(index, self.out_bytes))
            else:
                out = Tensor("OUT", "INT32", np.array([index], dtype=self.out_dtype))
            sender.send(InferenceResponse(outputs=[out]), final=last)
            self._progress(request, "sent", str(index + 1))
        self._progress(request, "ended", "finished")
        if self.finish != "last" or count == 0:
            sender.send(final=True)

    def _progress(self, request: InferenceRequest, what: str, text: str) -> None:
        if self.progress_dir:
            write_progress(self.progress_dir, f"{request.id}.{what}", text)


class StreamModel(BackendModel):
    def __init__(self, context: ModelContext) -> None:
        self.context = context

    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return StreamInstance(self.context)


class StreamBackend(Backend):
    name = "stream"
    default_model_filename = "model.stream"

    def load_model(self, context: ModelContext) -> BackendModel:
        return StreamModel(context)


@hookimpl
def triton_register_backends(registry) -> None:  # type: ignore[no-untyped-def]
    registry.add(StreamBackend)
