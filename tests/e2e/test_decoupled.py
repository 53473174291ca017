"""Decoupled models over gRPC streaming, and their refusal on the unary paths."""

from __future__ import annotations

import queue

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, wait_until, write_stream_model

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.stream_backend"}


@pytest.fixture(scope="module")
def stream_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("decoupled")
    write_stream_model(repo, "streamer", count=4, delay_ms=5)
    write_stream_model(repo, "slow", count=200, delay_ms=20)
    process = ServerProcess([repo], env=PLUGINS)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0


def inputs(module=grpcclient):
    tensor = module.InferInput("IN", [1], "INT32")
    tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
    return [tensor]


def collect(client, model, request_id, *, empty_final, expected):
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        client.async_stream_infer(
            model, inputs(), request_id=request_id, enable_empty_final_response=empty_final
        )
        received = [results.get(timeout=30) for _ in range(expected)]
    finally:
        client.stop_stream()
    return received


def test_stream_delivers_every_response_and_the_empty_final(stream_server):
    client = grpcclient.InferenceServerClient(stream_server.grpc_url)
    received = collect(client, "streamer", "s1", empty_final=True, expected=5)
    assert all(error is None for _, error in received)
    responses = [result.get_response() for result, _ in received]
    finals = [r.parameters["triton_final_response"].bool_param for r in responses]
    assert finals == [False, False, False, False, True]
    values = [int(result.as_numpy("OUT")[0]) for result, _ in received[:4]]
    assert values == [0, 1, 2, 3]
    assert responses[-1].id == "s1" and len(responses[-1].outputs) == 0


def test_without_the_flag_no_empty_final_is_sent(stream_server):
    client = grpcclient.InferenceServerClient(stream_server.grpc_url)
    received = collect(client, "streamer", "s2", empty_final=False, expected=4)
    finals = [
        result.get_response().parameters["triton_final_response"].bool_param
        for result, _ in received
    ]
    assert finals == [False] * 4


def test_unary_paths_refuse_decoupled_models(stream_server):
    grpc_client = grpcclient.InferenceServerClient(stream_server.grpc_url)
    with pytest.raises(InferenceServerException) as info:
        grpc_client.infer("streamer", inputs())
    assert info.value.status() == "StatusCode.UNIMPLEMENTED"
    assert "decoupled" in info.value.message()
    http_client = httpclient.InferenceServerClient(stream_server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http_client.infer("streamer", inputs(httpclient))
    assert info.value.status() == "501"
    assert "decoupled transaction policy" in info.value.message()


def test_closing_the_stream_cancels_the_request_and_the_server_serves_on(stream_server):
    client = grpcclient.InferenceServerClient(stream_server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    client.async_stream_infer("slow", inputs(), request_id="cancel-me")
    first, error = results.get(timeout=30)
    assert error is None and first.get_response().id == "cancel-me"
    client.stop_stream(cancel_requests=True)
    # the model sees is_cancelled() and stops early; the server keeps serving
    wait_until(
        lambda: "request 'cancel-me' was cancelled" in stream_server.log(),
        20,
        what=lambda: f"the cancel in the log:\n{stream_server.log()[-2000:]}",
    )
    received = collect(client, "streamer", "after", empty_final=True, expected=5)
    assert all(error is None for _, error in received)
