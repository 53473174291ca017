"""Errors as the OpenAI frontend answers them: OpenAI's error object, with Triton's status
codes and, where Triton's FastAPI frontend answers ``{"detail": ...}``, that field too.

An answer looks like::

    {"error": {"message": "Unknown model: m", "type": "invalid_request_error",
               "param": null, "code": null},
     "detail": "Unknown model: m"}

``error`` is what the official ``openai`` client reads; ``detail`` is what clients of
Triton's frontend (and Triton's tests) read: the message, or for a request that does not
fit the schema (422) the list of problems in pydantic's shape.
"""

from __future__ import annotations

from typing import Any

import orjson

#: the ``type`` of an error object by HTTP status
_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    422: "invalid_request_error",
    431: "invalid_request_error",
    503: "server_error",
}


class OpenAIError(Exception):
    """An answer with an error: ``status``, a message, and what else the body carries."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        detail: Any = None,
        with_detail: bool = True,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.detail = message if detail is None else detail
        self.with_detail = with_detail

    def body(self) -> dict[str, Any]:
        error = {
            "message": self.message,
            "type": _TYPES.get(self.status, "server_error"),
            "param": self.param,
            "code": self.code,
        }
        return {"error": error, "detail": self.detail} if self.with_detail else {"error": error}

    def encode(self) -> bytes:
        return orjson.dumps(self.body())


def client_error(message: str) -> OpenAIError:
    """400: the request asks for something this frontend or model does not do."""
    return OpenAIError(400, message)


def server_error(message: str) -> OpenAIError:
    """500: the server or the model failed."""
    return OpenAIError(500, message)


def not_found(message: str) -> OpenAIError:
    return OpenAIError(404, message)


def schema_error(problems: list[dict[str, Any]]) -> OpenAIError:
    """422: the body does not fit the request's schema; ``problems`` in pydantic's shape
    (``type``, ``loc``, ``msg``, ``input``), as FastAPI reports them."""
    first = problems[0]
    where = ".".join(str(part) for part in first["loc"][1:]) or "body"
    param = where if len(first["loc"]) > 1 else None
    return OpenAIError(422, f"{where}: {first['msg']}", param=param, detail=problems)


def refusal_body(status: int, message: str) -> bytes:
    """The body of a refusal that the HTTP protocol answers before the app sees the request
    (413 body too large, 431 headers, 408 deadlines, 503 connections)."""
    code = "content_too_large" if status == 413 else None
    return OpenAIError(status, message, code=code, with_detail=False).encode()
