"""HTTP/REST frontend (falcon ASGI): Triton's KServe v2 protocol with its extensions."""

from __future__ import annotations

from triton_core.frontends.http.app import create_app

__all__ = ["create_app"]
