"""Malformed and hostile requests get Triton's status and a message naming the culprit,
and the server keeps serving."""

from __future__ import annotations

import http.client
import json
import struct

import numpy as np
import pytest


def post(server, path, body: bytes, headers=None):
    connection = http.client.HTTPConnection(server.http_url.split(":")[0], server.http_port, 10)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def get(server, path):
    connection = http.client.HTTPConnection("127.0.0.1", server.http_port, timeout=10)
    try:
        connection.request("GET", path)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


def simple_json(data0=None, shape=(1, 16), datatype="INT32", **extra):
    data0 = list(range(16)) if data0 is None else data0
    body = {
        "inputs": [
            {"name": "INPUT0", "shape": list(shape), "datatype": datatype, "data": data0},
            {"name": "INPUT1", "shape": list(shape), "datatype": datatype, "data": data0},
        ]
    }
    body.update(extra)
    return json.dumps(body).encode()


def binary_request(model_inputs, blobs):
    header = json.dumps({"inputs": model_inputs}).encode()
    return header + b"".join(blobs), {"Inference-Header-Content-Length": str(len(header))}


@pytest.fixture(autouse=True)
def still_serving(server):
    yield
    status, body = post(server, "/v2/models/simple/infer", simple_json())
    assert status == 200, body


def error_of(body: bytes) -> str:
    return json.loads(body)["error"]


@pytest.mark.parametrize(
    ("body", "status", "fragments"),
    [
        (b'{"inputs": [', 400, ["simple"]),
        (simple_json(list(range(15))), 400, ["INPUT0", "simple"]),
        (simple_json(datatype="FP32", data0=[0.5] * 16), 400, ["data-type is 'FP32'"]),
        (simple_json(shape=(1, 8), data0=list(range(8))), 400,
         ["unexpected shape for input 'INPUT0' for model 'simple'"]),
        (simple_json(shape=(9, 16), data0=list(range(144))), 400,
         ["batch-size must be <= 8 for 'simple'"]),
        (json.dumps({"inputs": [{"name": "INPUT0", "shape": [1, 16], "datatype": "INT32",
                                 "data": list(range(16))}]}).encode(), 400,
         ["missing required input(s) ['INPUT1']"]),
        (simple_json(outputs=[{"name": "NOPE"}]), 400, ["NOPE", "simple"]),
        (json.dumps({"inputs": [
            {"name": "INPUT0", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "INPUT1", "shape": [1, 16], "datatype": "INT32", "data": list(range(16))},
            {"name": "EXTRA", "shape": [1], "datatype": "INT32", "data": [1]},
        ]}).encode(), 400, ["unexpected inference input 'EXTRA' for model 'simple'"]),
    ],
)  # fmt: skip
def test_bad_json_requests(server, body, status, fragments):
    code, reply = post(server, "/v2/models/simple/infer", body)
    assert code == status, reply
    message = error_of(reply)
    for fragment in fragments:
        assert fragment in message


def test_fp16_in_json_is_rejected(server):
    body = json.dumps(
        {"inputs": [{"name": "INPUT0", "shape": [1, 1], "datatype": "FP16", "data": [1.0]}]}
    ).encode()
    code, reply = post(server, "/v2/models/identity_fp16/infer", body)
    assert code == 400 and "FP16" in error_of(reply)


def test_binary_size_mismatch(server):
    inputs = [
        {"name": n, "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}
        for n in ("INPUT0", "INPUT1")
    ]
    body, headers = binary_request(inputs, [b"\x00" * 64, b"\x00" * 60])
    code, reply = post(server, "/v2/models/simple/infer", body, headers)
    assert code == 400 and "INPUT1" in error_of(reply)


def test_leftover_binary_bytes(server):
    inputs = [
        {"name": n, "shape": [1, 16], "datatype": "INT32", "parameters": {"binary_data_size": 64}}
        for n in ("INPUT0", "INPUT1")
    ]
    body, headers = binary_request(inputs, [b"\x00" * 64, b"\x00" * 64, b"extra"])
    code, reply = post(server, "/v2/models/simple/infer", body, headers)
    assert code == 400 and "unexpected additional input data for model 'simple'" in error_of(reply)


def test_header_length_larger_than_body(server):
    body = simple_json()
    code, reply = post(
        server,
        "/v2/models/simple/infer",
        body,
        {"Inference-Header-Content-Length": str(len(body) + 100)},
    )
    assert code == 400 and error_of(reply)


def test_broken_bytes_length_prefix(server):
    blob = struct.pack("<I", 3) + b"abc" + struct.pack("<I", 50) + b"short"
    inputs = [{"name": "INPUT0", "shape": [1, 2], "datatype": "BYTES",
               "parameters": {"binary_data_size": len(blob)}}]  # fmt: skip
    body, headers = binary_request(inputs, [blob])
    code, reply = post(server, "/v2/models/identity_bytes/infer", body, headers)
    assert code == 400 and "INPUT0" in error_of(reply)


@pytest.mark.parametrize(
    ("path", "status", "fragment"),
    [
        ("/v2/models/nope/infer", 404, "Request for unknown model: 'nope' is not found"),
        ("/v2/models/simple/versions/9/infer", 404, "'simple' version 9 is not found"),
        ("/v2/models/..%2F..%2Fetc/infer", 404, "unknown model"),
        ("/v2/models/%2E%2E/infer", 404, "unknown model"),
    ],
)
def test_unknown_models_versions_and_traversal(server, path, status, fragment):
    code, reply = post(server, path, simple_json())
    assert code == status, reply
    assert fragment in error_of(reply)


def test_oversized_body_is_rejected(server):
    # the server under test runs with --http-max-input-size 1 MiB
    data = np.zeros((4, 70000), dtype=np.float32).tobytes()
    inputs = [{"name": "INPUT0", "shape": [4, 70000], "datatype": "FP32",
               "parameters": {"binary_data_size": len(data)}}]  # fmt: skip
    body, headers = binary_request(inputs, [data])
    code, reply = post(server, "/v2/models/identity_fp32/infer", body, headers)
    # 413 from the Content-Length, before the body is read (Triton reads it, then says 400)
    assert code == 413 and "--http-max-input-size" in error_of(reply)


def test_unknown_path_and_method(server):
    code, reply = get(server, "/v2/nothing/here")
    assert code == 404 and error_of(reply) == "Not Found"
    code, reply = get(server, "/v2/models/simple/infer")
    assert code == 405 and error_of(reply) == "Method Not Allowed"


def test_query_strings_are_ignored(server):
    code, _ = get(server, "/v2/health/ready?verbose=1")
    assert code == 200
    code, reply = get(server, "/v2/models/simple?x=y")
    assert code == 200 and json.loads(reply)["name"] == "simple"
