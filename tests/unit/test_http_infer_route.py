"""The HTTP infer route: every ``POST .../infer`` goes through the one infer path whatever its
encoding, body or name, and answers as the falcon app (the same path, reached through falcon)
does; everything else reaches falcon."""

from __future__ import annotations

import asyncio
import gzip
from typing import Any

import numpy as np
import orjson
import pytest

from tests.unit.test_http_app import StubServer, asgi_exchange, asgi_scope, binary_infer_body
from triton_core.frontends.http import create_app
from triton_core.frontends.http.fast_path import InferRoute
from triton_core.frontends.http.infer import HttpInfer, infer_target


@pytest.mark.parametrize(
    ("path", "target"),
    [
        ("/v2/models/simple/infer", ("simple", "")),
        ("/v2/models/simple/versions/2/infer", ("simple", "2")),
        ("/v2/models/my model/infer", ("my model", "")),
        ("/v2/models/a%2Fb/infer", ("a/b", "")),
        ("/v2/models//infer", None),
        ("/v2/models/simple/versions/x/infer", None),
        ("/v2/models/simple/versions/\u0663/infer", None),  # a non-ASCII digit
        ("/v2/models/a/b/infer", None),
        ("/v2/models/simple/ready", None),
        ("/v2/models/simple/generate", None),
    ],
)
def test_infer_target(path: str, target: tuple[str, str] | None) -> None:
    assert infer_target(path) == target


def route(spy: Any, max_input_size: int = 1 << 26) -> InferRoute:
    return InferRoute(spy, HttpInfer(StubServer(), max_input_size=max_input_size))


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
    fast = route(spy)
    expected = asyncio.run(call(falcon_only, "POST", path, body, headers))
    got = asyncio.run(call(fast, "POST", path, body, headers))
    assert spy.calls == 0  # answered on the fast path
    assert got[0] == expected[0]
    assert got[2] == expected[2]
    for name in ("content-type", "content-length", "inference-header-content-length"):
        assert got[1].get(name) == expected[1].get(name), name


@pytest.mark.parametrize(
    ("method", "path"),
    [("GET", "/v2/models/simple/infer"), ("POST", "/v2/models/simple/ready")],
    ids=["get", "other-route"],
)
def test_everything_but_infer_goes_to_falcon(method: str, path: str) -> None:
    spy = Spy(create_app(StubServer()))
    asyncio.run(call(route(spy), method, path, json_body(), {}))
    assert spy.calls == 1


@pytest.mark.parametrize(
    "headers",
    [{}, {"Accept-Encoding": "identity"}, {"Transfer-Encoding": "chunked"}],
    ids=["plain", "identity-answer", "chunked"],
)
def test_every_infer_is_answered_on_the_one_path(headers: dict[str, str]) -> None:
    spy = Spy(create_app(StubServer()))
    status, _, _ = asyncio.run(
        call(route(spy), "POST", "/v2/models/simple/infer", json_body(), headers)
    )
    assert (status, spy.calls) == (200, 0)


def test_a_compressed_body_and_a_compressed_answer_on_the_one_path() -> None:
    spy = Spy(create_app(StubServer()))
    headers = {"Content-Encoding": "gzip", "Accept-Encoding": "gzip"}
    body = gzip.compress(json_body(id="zipped"))
    status, headers_out, data = asyncio.run(
        call(route(spy), "POST", "/v2/models/simple/infer", body, headers)
    )
    assert (status, spy.calls) == (200, 0)
    assert headers_out["content-encoding"] == "gzip"
    assert orjson.loads(gzip.decompress(data))["id"] == "zipped"


def test_an_unknown_encoding_is_refused_naming_the_ones_taken() -> None:
    spy = Spy(create_app(StubServer()))
    headers = {"Content-Encoding": "br"}
    status, headers_out, data = asyncio.run(
        call(route(spy), "POST", "/v2/models/simple/infer", json_body(), headers)
    )
    assert spy.calls == 0 and status >= 400
    assert headers_out["accept-encoding"] == "gzip, deflate"
    assert orjson.loads(data)["error"] == "Unsupported compression type"


def test_a_percent_encoded_name_is_decoded() -> None:
    spy = Spy(create_app(StubServer()))
    status, _, data = asyncio.run(
        call(route(spy), "POST", "/v2/models/a%2Fb/infer", json_body(), {})
    )
    assert spy.calls == 0 and status == 400
    assert "'a/b'" in orjson.loads(data)["error"]


def test_an_oversized_body_is_refused_with_the_flag_named() -> None:
    spy = Spy(create_app(StubServer(), max_input_size=10))
    status, _, body = asyncio.run(
        call(route(spy, max_input_size=10), "POST", "/v2/models/simple/infer", json_body(), {})
    )
    assert spy.calls == 0 and status == 400
    assert "--http-max-input-size" in orjson.loads(body)["error"]


def test_a_small_body_that_inflates_large_is_inflated_off_the_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gzip body of a few KiB can inflate to the input limit: the loop inflates only up
    to a budget, and a thread does the rest."""
    import threading

    from triton_core.frontends.http import compression

    inflated_in: list[str] = []
    decompress = compression.decompress

    def recording(*args: Any) -> Any:
        inflated_in.append(threading.current_thread().name)
        return decompress(*args)

    monkeypatch.setattr(compression, "decompress", recording)
    spy = Spy(create_app(StubServer()))
    headers = {"Content-Encoding": "gzip"}
    small = gzip.compress(json_body(id="small"))
    large = gzip.compress(json_body(id="large") + b" " * (1 << 20))  # a few KiB gzipped
    assert len(large) < 8192
    for body, request_id in ((small, "small"), (large, "large")):
        status, _, data = asyncio.run(
            call(route(spy), "POST", "/v2/models/simple/infer", body, headers)
        )
        assert status == 200 and orjson.loads(data)["id"] == request_id
    (thread,) = inflated_in  # only the large one went to decompress, in a thread
    assert thread != threading.main_thread().name
