"""``GET/POST /v2[/models/{model}]/trace/setting``: the trace extension over HTTP."""

from __future__ import annotations

from typing import Any, Final

import falcon
import falcon.asgi
import orjson

from triton_core.errors import invalid_arg
from triton_core.frontends.http.routing import routed_name
from triton_core.frontends.tracing import trace_setting

#: a trace setting request is a handful of keys: refuse anything much larger unread
MAX_BODY_BYTES: Final = 64 << 10


class TraceSettingResource:
    """Triton's trace settings, global or of one model (no version form: 404)."""

    def __init__(self, server: object, read_body: Any) -> None:
        self._server = server
        self._read_body = read_body

    async def on_get(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model_name: str = ""
    ) -> None:
        self._answer(resp, trace_setting(self._server, _name(req, model_name), None))

    async def on_post(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, model_name: str = ""
    ) -> None:
        body = await self._read_body(req, MAX_BODY_BYTES)
        update = _update_of(body)
        self._answer(resp, trace_setting(self._server, _name(req, model_name), update))

    @staticmethod
    def _answer(resp: falcon.asgi.Response, settings: dict[str, list[str]]) -> None:
        document: dict[str, Any] = {}
        for key, values in settings.items():
            # trace_level is an array; a mode setting given more than once lists its values
            document[key] = values if key == "trace_level" or len(values) > 1 else values[0]
        resp.content_type = "application/json"
        resp.data = orjson.dumps(document)


def _name(req: falcon.asgi.Request, model_name: str) -> str:
    return routed_name(req, model_name) if model_name else ""


def _update_of(body: bytes) -> dict[str, list[str] | None]:
    """The JSON body as settings: ``null`` clears, a string or an array of strings sets."""
    if not body.strip():
        return {}
    try:
        document = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse the request JSON buffer: {exc}") from None
    if not isinstance(document, dict):
        raise invalid_arg("the trace setting request must be a JSON object")
    update: dict[str, list[str] | None] = {}
    for key, value in document.items():
        if value is None:
            update[key] = None
        elif isinstance(value, str):
            update[key] = [value]
        elif (
            key == "trace_level"
            and isinstance(value, list)
            and all(isinstance(item, str) for item in value)
        ):
            update[key] = value or [""]  # an empty array sets nothing valid: refused below
        elif key == "trace_level":
            raise invalid_arg("trace setting 'trace_level' must be an array of strings or null")
        else:  # Triton's words
            raise invalid_arg("attempt to access JSON non-string as string")
    return update
