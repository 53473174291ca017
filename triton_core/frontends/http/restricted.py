"""``--http-restricted-api``: which group each route is in, and the 403 for a missing header.

Triton checks a route's restriction before anything else, its method included, so the check
runs as falcon middleware once the route is known and before its responder. Unknown paths
(404) belong to no group.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import falcon.asgi
import orjson

from triton_core.frontends.restricted import Restriction, Restrictions, first_value

#: route prefixes whose routes are all in one group
_PREFIX_GROUPS: Final = (
    ("/v2/health/", "health"),
    ("/v2/repository/", "model-repository"),
    ("/v2/systemsharedmemory/", "shared-memory"),
    ("/v2/cudasharedmemory/", "shared-memory"),
    ("/v2/trace/", "trace"),
    ("/v2/logging", "logging"),
)
#: the group of a ``/v2/models/...`` route by its last segment; the rest are metadata
_MODEL_SUFFIX_GROUPS: Final = {
    "ready": "health",
    "config": "model-config",
    "infer": "inference",
    "generate": "inference",
    "generate_stream": "inference",
    "stats": "statistics",
    "setting": "trace",
}


def api_group(uri_template: str) -> str | None:
    """The restricted-API group of a route, by its URI template; None for no route."""
    if uri_template == "/v2":
        return "metadata"
    for prefix, group in _PREFIX_GROUPS:
        if uri_template.startswith(prefix):
            return group
    if uri_template.startswith("/v2/models/"):
        return _MODEL_SUFFIX_GROUPS.get(uri_template.rsplit("/", 1)[1], "metadata")
    return None


def restricted_message(restriction: Restriction) -> str:
    """Triton's words for a request without the header (or with another value)."""
    return f"This API is restricted, expecting header '{restriction.header}'"


class HeaderCheck:
    """One restriction as the ASGI headers carry it: lowercase name and value, as bytes."""

    __slots__ = ("body", "key", "value")

    def __init__(self, restriction: Restriction) -> None:
        self.key = restriction.key.encode("latin-1")
        self.value = restriction.value.encode("latin-1")
        #: the 403 answer's body
        self.body = orjson.dumps({"error": restricted_message(restriction)})

    def allows(self, headers: Iterable[tuple[bytes, bytes]]) -> bool:
        return first_value(headers, self.key) == self.value


class RestrictedApiMiddleware:
    """falcon middleware answering 403 for a restricted route called without its header."""

    def __init__(self, restrictions: Restrictions) -> None:
        self._checks = {group: HeaderCheck(r) for group, r in restrictions.items()}
        #: the check of each route template seen (a fixed set: the app's routes)
        self._by_template: dict[str, HeaderCheck | None] = {}

    async def process_resource(
        self, req: falcon.asgi.Request, resp: falcon.asgi.Response, resource: Any, params: Any
    ) -> None:
        if resource is None:
            return
        template = req.uri_template or ""
        try:
            check = self._by_template[template]
        except KeyError:
            group = api_group(template)
            check = self._by_template[template] = self._checks.get(group) if group else None
        if check is not None and not check.allows(req.scope["headers"]):
            resp.status = 403
            resp.content_type = "application/json"
            resp.data = check.body
            resp.complete = True
