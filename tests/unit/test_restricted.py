"""Restricted APIs: the flags, the group of every HTTP route and gRPC RPC, HTTP's 403."""

from __future__ import annotations

import re
from typing import Any

import falcon.inspect
import numpy as np
import orjson
import pytest

from tests.unit.test_http_app import StubServer, asgi_exchange, asgi_scope, binary_infer_body
from tests.unit.test_http_infer_route import Spy
from tests.unit.test_http_protocol import Served, infer_request, json_infer, read_answer
from triton_core.frontends.grpc.servicer import HEALTH_CHECK_GROUP, RPC_GROUPS
from triton_core.frontends.http import create_app
from triton_core.frontends.http.fast_path import InferRoute, create_asgi_app
from triton_core.frontends.http.infer import HttpInfer
from triton_core.frontends.http.restricted import api_group
from triton_core.frontends.restricted import (
    API_GROUPS,
    GRPC_HEADER_PREFIX,
    Restriction,
    parse_restrictions,
)
from triton_core.protos import grpc_service_pb2, health_pb2

# -- the flags ---------------------------------------------------------------------------------


def test_parse_groups_keys_and_values() -> None:
    restrictions = parse_restrictions(
        ["model-repository:admin-key=admin-value", "inference,health:infer-key=a=b:c"],
        "--http-restricted-api",
    )
    assert restrictions == {
        "model-repository": Restriction("admin-key", "admin-value"),
        "inference": Restriction("infer-key", "a=b:c"),  # the value is the rest, as Triton
        "health": Restriction("infer-key", "a=b:c"),
    }


def test_grpc_keys_carry_tritons_prefix() -> None:
    restrictions = parse_restrictions(
        ["inference:Infer-Key=v"], "--grpc-restricted-protocol", GRPC_HEADER_PREFIX
    )
    assert restrictions["inference"].header == "triton-grpc-protocol-Infer-Key"
    assert restrictions["inference"].key == "triton-grpc-protocol-infer-key"


@pytest.mark.parametrize(
    ("flag", "specs", "message"),
    [
        (
            "--grpc-restricted-protocol",
            ["model-repository,health:k1=v1", "metadata,health:k2=v2"],
            "--grpc-restricted-protocol: restricted protocol 'health' can not be specified in "
            "multiple config groups",
        ),
        (
            "--grpc-restricted-protocol",
            ["model-reposit,health:k1=v1"],
            "--grpc-restricted-protocol: unknown restricted protocol 'model-reposit'",
        ),
        (
            "--http-restricted-api",
            ["inference:k=v", "inference:k=v"],
            "--http-restricted-api: restricted api 'inference' can not be specified in "
            "multiple config groups",
        ),
        (
            "--http-restricted-api",
            ["health,:k=v"],
            "--http-restricted-api: unknown restricted api ''",
        ),
    ],
)
def test_refuses_what_tritonserver_refuses(flag: str, specs: list[str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message)):
        parse_restrictions(specs, flag)


@pytest.mark.parametrize("spec", ["health", "health:k", "health:=v", ":k=v", "health:k=", ""])
def test_refuses_malformed_values(spec: str) -> None:
    with pytest.raises(ValueError, match="--http-restricted-api option format is"):
        parse_restrictions([spec], "--http-restricted-api")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("health:a key=v", "'a key' cannot be a header name"),
        ("health:k\u00e9=v", "'k\u00e9' cannot be a header name"),
        ("health:k=caf\u00e9", "the value of 'k' must be printable ASCII"),
        ("health:k= v", "the value of 'k' must be printable ASCII"),
        ("health:k=a\r\nb", "the value of 'k' must be printable ASCII"),
    ],
)
def test_refuses_headers_no_client_could_send(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_restrictions([spec], "--grpc-restricted-protocol")


# -- which group each endpoint is in --------------------------------------------------------

#: the endpoint table of the protocol notes (1.1), with the group of each endpoint
HTTP_ENDPOINTS = [
    ("GET", "/v2/health/live", "health"),
    ("GET", "/v2/health/ready", "health"),
    ("GET", "/v2/models/simple/ready", "health"),
    ("GET", "/v2/models/simple/versions/1/ready", "health"),
    ("GET", "/v2", "metadata"),
    ("GET", "/v2/models/simple", "metadata"),
    ("GET", "/v2/models/simple/versions/1", "metadata"),
    ("GET", "/v2/models/ready", "metadata"),  # a model named 'ready'
    ("POST", "/v2/models/simple/infer", "inference"),
    ("POST", "/v2/models/simple/versions/1/infer", "inference"),
    ("POST", "/v2/models/simple/generate", "inference"),
    ("POST", "/v2/models/simple/generate_stream", "inference"),
    ("GET", "/v2/models/simple/config", "model-config"),
    ("GET", "/v2/models/simple/versions/1/config", "model-config"),
    ("GET", "/v2/models/stats", "statistics"),
    ("GET", "/v2/models/simple/stats", "statistics"),
    ("GET", "/v2/models/simple/versions/1/stats", "statistics"),
    ("POST", "/v2/repository/index", "model-repository"),
    ("POST", "/v2/repository/models/simple/load", "model-repository"),
    ("POST", "/v2/repository/models/simple/unload", "model-repository"),
    ("POST", "/v2/repository/other/models/simple/load", "model-repository"),
    ("GET", "/v2/systemsharedmemory/status", "shared-memory"),
    ("GET", "/v2/systemsharedmemory/region/r/status", "shared-memory"),
    ("POST", "/v2/systemsharedmemory/region/r/register", "shared-memory"),
    ("POST", "/v2/systemsharedmemory/unregister", "shared-memory"),
    ("POST", "/v2/systemsharedmemory/region/r/unregister", "shared-memory"),
    ("GET", "/v2/cudasharedmemory/status", "shared-memory"),
    ("POST", "/v2/cudasharedmemory/region/r/register", "shared-memory"),
    ("POST", "/v2/cudasharedmemory/region/r/unregister", "shared-memory"),
    ("GET", "/v2/trace/setting", "trace"),
    ("POST", "/v2/models/simple/trace/setting", "trace"),
    ("GET", "/v2/logging", "logging"),
    ("POST", "/v2/logging", "logging"),
]


def test_every_http_route_is_in_a_group() -> None:
    """A route added later without a group would be open while its group is restricted."""
    app = create_app(StubServer())
    templates = {route.path for route in falcon.inspect.inspect_compiled_router(app._router)}
    assert len(templates) > 30
    assert {
        template: api_group(template) for template in templates if not api_group(template)
    } == {}
    assert {api_group(template) for template in templates} == set(API_GROUPS)


def test_every_grpc_rpc_is_in_a_group() -> None:
    service = grpc_service_pb2.DESCRIPTOR.services_by_name["GRPCInferenceService"]
    assert set(RPC_GROUPS) == {method.name for method in service.methods}
    assert set(RPC_GROUPS.values()) == set(API_GROUPS)
    assert [m.name for m in health_pb2.DESCRIPTOR.services_by_name["Health"].methods] == ["Check"]
    assert HEALTH_CHECK_GROUP == "health"


# -- HTTP: 403 without the header, as before with it -----------------------------------------

#: every group restricted, each with its own header
EVERY_GROUP = [f"{group}:key-{group}=secret-{group}" for group in API_GROUPS]


async def request(
    app: Any, method: str, path: str, headers: dict[str, str], body: bytes = b"{}"
) -> tuple[int, bytes]:
    raw = [(name.lower().encode(), value.encode()) for name, value in headers.items()]
    raw.append((b"content-length", str(len(body)).encode()))
    sent = await asgi_exchange(
        app, asgi_scope(method, path, raw), [{"type": "http.request", "body": body}]
    )
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent[1:])


def forbidden(group: str) -> bytes:
    return orjson.dumps({"error": f"This API is restricted, expecting header 'key-{group}'"})


@pytest.mark.parametrize(("method", "path", "group"), HTTP_ENDPOINTS)
async def test_http_endpoint_needs_its_groups_header(method: str, path: str, group: str) -> None:
    app = create_asgi_app(
        StubServer(), restrictions=parse_restrictions(EVERY_GROUP, "--http-restricted-api")
    )
    assert await request(app, method, path, {}) == (403, forbidden(group))
    wrong_value = {f"key-{group}": "guess"}
    assert await request(app, method, path, wrong_value) == (403, forbidden(group))
    other = next(g for g in API_GROUPS if g != group)
    other_header = {f"key-{other}": f"secret-{other}"}
    assert await request(app, method, path, other_header) == (403, forbidden(group))
    status, _ = await request(app, method, path, {f"KEY-{group}": f"secret-{group}"})
    assert status != 403


async def test_unrestricted_groups_and_unknown_paths_stay_open() -> None:
    app = create_asgi_app(
        StubServer(),
        restrictions=parse_restrictions(["model-repository:k=v"], "--http-restricted-api"),
    )
    assert (await request(app, "GET", "/v2/health/ready", {}))[0] == 200
    assert (await request(app, "GET", "/v2/models/simple/config", {}))[0] == 200
    assert (await request(app, "GET", "/v2/nothing/here", {}))[0] == 404
    assert (await request(app, "POST", "/v2/repository/index", {}))[0] == 403


async def test_restriction_comes_before_the_method_check() -> None:
    """Triton answers 403, not 405, for a restricted route called with the wrong method."""
    app = create_asgi_app(
        StubServer(), restrictions=parse_restrictions(["health:k=v"], "--http-restricted-api")
    )
    status, body = await request(app, "DELETE", "/v2/health/live", {})
    assert (status, orjson.loads(body)) == (
        403,
        {"error": "This API is restricted, expecting header 'k'"},
    )
    assert (await request(app, "DELETE", "/v2/health/live", {"k": "v"}))[0] == 405


async def test_the_infer_route_enforces_the_inference_group() -> None:
    server = StubServer()
    restrictions = parse_restrictions(["inference:infer-key=v1"], "--http-restricted-api")
    falcon_app = Spy(create_app(server, restrictions=restrictions))
    app = InferRoute(falcon_app, HttpInfer(server, restrictions=restrictions))
    body, headers = binary_infer_body(np.ones((1, 4), np.float32))

    status, answer = await request(app, "POST", "/v2/models/simple/infer", headers, body)
    assert (status, orjson.loads(answer)) == (
        403,
        {"error": "This API is restricted, expecting header 'infer-key'"},
    )
    assert falcon_app.calls == 0 and server.requests == []  # refused on the infer path

    allowed = {**headers, "infer-key": "v1"}
    status, _ = await request(app, "POST", "/v2/models/simple/infer", allowed, body)
    assert status == 200 and len(server.requests) == 1
    assert falcon_app.calls == 0


async def test_protocol_fast_path_enforces_the_inference_group() -> None:
    """The plain infer that the HTTP protocol answers itself, on a real HTTP server."""
    restrictions = parse_restrictions(["inference:infer-key=v1"], "--http-restricted-api")
    async with Served(restrictions=restrictions) as served:
        reader, writer = await served.connect()
        writer.write(infer_request(json_infer([1, 2], id="r1")))
        status, _, body = await read_answer(reader)
        assert (status, orjson.loads(body)) == (
            403,
            {"error": "This API is restricted, expecting header 'infer-key'"},
        )
        assert served.asgi_calls == 0 and served.stub.requests == []  # refused on the path
        writer.write(infer_request(json_infer([1, 2], id="r2"), infer_key="v1"))
        status, _, body = await read_answer(reader)
        assert status == 200 and orjson.loads(body)["id"] == "r2"
        assert served.asgi_calls == 0  # answered by the protocol itself
        writer.close()


def test_nothing_restricted_adds_nothing_to_the_hot_path() -> None:
    app = create_asgi_app(StubServer())
    assert app.infer.inference_check is None
    restricted = create_asgi_app(
        StubServer(), restrictions=parse_restrictions(["health:k=v"], "--http-restricted-api")
    )
    # only the inference group costs infer a look
    assert restricted.infer.inference_check is None
