"""The infer fast path: which requests it answers itself, and that it answers as falcon does."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import orjson
import pytest

from tests.unit.test_http_app import StubServer, asgi_exchange, asgi_scope, binary_infer_body
from triton_core.frontends.http import create_app
from triton_core.frontends.http.fast_path import InferFastPath, infer_target


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/v2/models/simple/infer", ("simple", -1)),
        ("/v2/models/simple/versions/2/infer", ("simple", 2)),
        ("/v2/models/my model/infer", ("my model", -1)),
        ("/v2/models//infer", None),
        ("/v2/models/simple/versions/x/infer", None),
        ("/v2/models/simple/versions/\u0663/infer", None),  # a non-ASCII digit
        ("/v2/models/a/b/infer", None),
        ("/v2/models/simple/ready", None),
        ("/v2/models/simple/generate", None),
    ],
)
def test_infer_target(path: str, target: tuple[str, int] | None) -> None:
    assert infer_target(path) == target


class Spy:
    """The inner (falcon) app, counting the requests that reach it."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.calls = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        await self.app(scope, receive, send)


async def call(app: Any, method: str, path: str, body: bytes, headers: dict[str, str]) -> Any:
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    if "transfer-encoding" not in {k.lower() for k in headers}:
        raw_headers.append((b"content-length", str(len(body)).encode()))
    scope = asgi_scope(method, path, raw_headers, path.replace(" ", "%20").encode())
    sent = await asgi_exchange(app, scope, [{"type": "http.request", "body": body}])
    start = sent[0]
    headers_out = {k.decode().lower(): v.decode() for k, v in start["headers"]}
    return start["status"], headers_out, b"".join(m.get("body", b"") for m in sent[1:])


def json_body(**extra: Any) -> bytes:
    doc = {"inputs": [{"name": "INPUT0", "shape": [2], "datatype": "FP32", "data": [1, 2]}]}
    return orjson.dumps({**doc, **extra})


CASES = {
    "json": ("/v2/models/simple/infer", json_body(id="r1"), {}),
    "versioned": ("/v2/models/simple/versions/1/infer", json_body(), {}),
    "binary": ("/v2/models/simple/infer", *binary_infer_body(np.ones((1, 4), np.float32))),
    "unknown model": ("/v2/models/nope/infer", json_body(), {}),
    "decoupled": ("/v2/models/streamer/infer", json_body(), {}),
    "bad json": ("/v2/models/simple/infer", b"{not json", {}),
    "bad header length": (
        "/v2/models/simple/infer",
        json_body(),
        {"Inference-Header-Content-Length": "999999"},
    ),
    "unknown version": ("/v2/models/simple/versions/7/infer", json_body(), {}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_answers_as_falcon_does_without_falcon(case: str) -> None:
    path, body, headers = CASES[case]
    falcon_only = create_app(StubServer())
    spy = Spy(create_app(StubServer()))
    fast = InferFastPath(spy, StubServer(), 1 << 26)
    expected = asyncio.run(call(falcon_only, "POST", path, body, headers))
    got = asyncio.run(call(fast, "POST", path, body, headers))
    assert spy.calls == 0  # answered on the fast path
    assert got[0] == expected[0]
    assert got[2] == expected[2]
    for name in ("content-type", "content-length", "inference-header-content-length"):
        assert got[1].get(name) == expected[1].get(name), name


@pytest.mark.parametrize(
    ("method", "path", "headers"),
    [
        ("GET", "/v2/models/simple/infer", {}),
        ("POST", "/v2/models/simple/ready", {}),
        ("POST", "/v2/models/simple/infer", {"Content-Encoding": "gzip"}),
        ("POST", "/v2/models/simple/infer", {"Accept-Encoding": "gzip"}),
        ("POST", "/v2/models/simple/infer", {"Transfer-Encoding": "chunked"}),
        ("POST", "/v2/models/a%2Fb/infer", {}),
    ],
    ids=["get", "other-route", "compressed", "compressed-answer", "chunked", "encoded-name"],
)
def test_everything_else_goes_to_falcon(method: str, path: str, headers: dict[str, str]) -> None:
    spy = Spy(create_app(StubServer()))
    fast = InferFastPath(spy, StubServer(), 1 << 26)
    asyncio.run(call(fast, method, path, json_body(), headers))
    assert spy.calls == 1


def test_identity_accept_encoding_stays_on_the_fast_path() -> None:
    spy = Spy(create_app(StubServer()))
    fast = InferFastPath(spy, StubServer(), 1 << 26)
    status, _, _ = asyncio.run(
        call(fast, "POST", "/v2/models/simple/infer", json_body(), {"Accept-Encoding": "identity"})
    )
    assert (status, spy.calls) == (200, 0)


def test_oversized_bodies_go_to_falcon_for_its_message() -> None:
    spy = Spy(create_app(StubServer(), max_input_size=10))
    fast = InferFastPath(spy, StubServer(), 10)
    status, _, body = asyncio.run(call(fast, "POST", "/v2/models/simple/infer", json_body(), {}))
    assert spy.calls == 1 and status == 400
    assert "--http-max-input-size" in orjson.loads(body)["error"]
