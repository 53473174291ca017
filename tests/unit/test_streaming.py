"""Decoupled models through the in-process API: Server.infer_stream."""

from __future__ import annotations

import numpy as np
import pytest

from tests.plugins import numpy_backend, stream_backend
from tests.support import wait_until_async, write_numpy_model, write_stream_model
from triton_core import InferenceRequest, Server, ServerOptions, Status, Tensor, TritonError
from triton_core.plugins.manager import create_plugin_manager


def server_for(repo):
    plugins = create_plugin_manager(
        autoload=False,
        extra_plugins=[("numpy", numpy_backend), ("stream", stream_backend)],
    )
    return Server(ServerOptions([repo]), plugins)


def stream_request(model="streamer", request_id="r", **parameters):
    data = np.array([1], dtype=np.int32)
    return InferenceRequest(
        model, {"IN": Tensor("IN", "INT32", data)}, id=request_id, parameters=parameters
    )


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "models"
    write_stream_model(repo, "streamer", count=3)
    write_stream_model(repo, "last", count=2, finish="last")
    write_stream_model(repo, "slow", count=50, delay_ms=20)
    write_numpy_model(repo, "add_sub", kind="add_sub")
    return repo


async def test_every_response_arrives_then_an_empty_final(repo):
    async with server_for(repo) as server:
        responses = [r async for r in server.infer_stream(stream_request())]
        assert [r.final for r in responses] == [False, False, False, True]
        assert [int(r.output("OUT").data[0]) for r in responses[:3]] == [0, 1, 2]
        assert responses[-1].outputs == [] and responses[-1].id == "r"
        assert all(r.model_name == "streamer" and r.model_version == 1 for r in responses)
        stats = server.statistics("streamer")[0]
        assert stats.success.count == 1


async def test_final_flag_on_the_last_response(repo):
    async with server_for(repo) as server:
        responses = [r async for r in server.infer_stream(stream_request("last"))]
        assert [r.final for r in responses] == [False, True]


async def test_plain_infer_refuses_decoupled_models(repo):
    async with server_for(repo) as server:
        with pytest.raises(TritonError) as info:
            await server.infer(stream_request())
        assert info.value.status is Status.UNSUPPORTED


async def test_ordinary_models_answer_once_on_the_stream(repo):
    async with server_for(repo) as server:
        data = np.ones((1, 4), dtype=np.int32)
        request = InferenceRequest(
            "add_sub", {n: Tensor(n, "INT32", data) for n in ("INPUT0", "INPUT1")}
        )
        responses = [r async for r in server.infer_stream(request)]
        assert len(responses) == 1 and responses[0].final


async def test_execute_failure_ends_the_stream_with_its_error(repo):
    async with server_for(repo) as server:
        with pytest.raises(TritonError, match="told to fail"):
            async for _ in server.infer_stream(stream_request(FAIL=True)):
                pass


async def test_leaving_the_stream_cancels_the_request(repo):
    async with server_for(repo) as server:
        stream = server.infer_stream(stream_request("slow", request_id="gone"))
        first = await anext(stream)
        assert not first.final
        await stream.aclose()
        await wait_until_async(lambda: "gone" in stream_backend.CANCELLED, what="the cancel")


async def test_a_response_of_the_wrong_dtype_ends_the_stream_with_an_attributed_error(tmp_path):
    write_stream_model(tmp_path, "floats", count=3, out_dtype="float32")
    write_stream_model(tmp_path, "streamer", count=2)
    async with server_for(tmp_path) as server:
        with pytest.raises(TritonError) as info:
            [r async for r in server.infer_stream(stream_request("floats"))]
        assert info.value.status is Status.INTERNAL
        assert info.value.message.startswith(
            "model 'floats' version 1 instance 'floats_0_0': backend 'stream' (plugin stream) "
            "returned output 'OUT' (INT32) holding numpy float32 values"
        )
        responses = [r async for r in server.infer_stream(stream_request("streamer"))]
        assert [r.final for r in responses] == [False, False, True]
