"""How the HTTP frontend routes: on the raw path where it holds an encoded '/', model names
percent-decoded, versions as digits only, and OPTIONS answered 405 like any other method a
route lacks (as Triton)."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

import falcon
import falcon.asgi
from falcon.routing import BaseConverter, CompiledRouter


class RawPathRequest(falcon.asgi.Request):
    """Routes on the raw path when it holds an encoded '/', as Triton matches its raw path.

    The ASGI server decodes ``%2F`` into a segment separator, so ``/v2/models/a%2Fb/ready``
    would not route; Triton answers it as model ``a/b`` (unknown: 400, never a file path).
    """

    #: True when ``path`` is the raw path, so routed fields are still percent-encoded
    encoded_path = False

    def __init__(
        self,
        scope: dict[str, Any],
        receive: Any,
        first_event: dict[str, Any] | None = None,
        options: falcon.request.RequestOptions | None = None,
    ) -> None:
        super().__init__(scope, receive, first_event=first_event, options=options)
        raw_path = scope.get("raw_path")
        if raw_path and b"%2" in raw_path and (b"%2F" in raw_path or b"%2f" in raw_path):
            self.path = raw_path.decode("latin-1")
            self.encoded_path = True


def routed_name(req: falcon.asgi.Request, model_name: str) -> str:
    """A name routed from the path (a model's, a region's), percent-decoded."""
    return unquote(model_name) if getattr(req, "encoded_path", False) else model_name


class DigitsConverter(BaseConverter):
    """``{version:digits}``: versions in URLs are ``[0-9]+``; anything else does not route."""

    def convert(self, value: str) -> str | None:
        return value if value.isascii() and value.isdigit() else None


class Router(CompiledRouter):
    """falcon's router, but OPTIONS is 405 like any other method a resource lacks (Triton)."""

    def map_http_methods(self, resource: object, **kwargs: Any) -> dict[str, Any]:
        method_map: dict[str, Any] = super().map_http_methods(resource, **kwargs)
        if "OPTIONS" not in method_map:
            method_map["OPTIONS"] = falcon.responders.create_method_not_allowed(
                sorted(method_map), asgi=True
            )
        return method_map
