"""The in-process API, driven with the numpy test backend."""

from __future__ import annotations

import asyncio
import json
import logging

import numpy as np
import pytest

from tests.support import numpy_server, wait_until_async, write_numpy_model
from triton_core import InferenceRequest, RequestedOutput, Status, Tensor, TritonError
from triton_core.errors import unavailable


def request(model="add_sub", shape=(2, 4), dtype="INT32", **kwargs):
    data = np.arange(np.prod(shape), dtype=np.int32).reshape(shape)
    inputs = {
        name: Tensor(name, dtype, data) for name in kwargs.pop("inputs", ("INPUT0", "INPUT1"))
    }
    return InferenceRequest(model, inputs, **kwargs)


@pytest.fixture
async def server(numpy_repo):
    server = numpy_server(numpy_repo)
    await server.start()
    yield server
    await server.stop()


async def test_infer_returns_named_versioned_response(server):
    response = await server.infer(request(id="abc"))
    assert (response.model_name, response.model_version, response.id) == ("add_sub", 1, "abc")
    np.testing.assert_array_equal(response.output("OUTPUT0").data, np.arange(8).reshape(2, 4) * 2)


async def test_requested_outputs_are_selected_in_order(server):
    response = await server.infer(request(outputs=[RequestedOutput("OUTPUT1")]))
    assert [t.name for t in response.outputs] == ["OUTPUT1"]


async def test_classification_returns_top_k_strings(server):
    response = await server.infer(request(outputs=[RequestedOutput("OUTPUT0", classification=2)]))
    tensor = response.output("OUTPUT0")
    assert tensor.datatype == "BYTES" and tensor.shape == (2, 2)
    assert tensor.data[0, 0].startswith(b"6:3")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"model": "nope"}, "Request for unknown model: 'nope' is not found"),
        ({"model_version": 7}, "'add_sub' version 7 is not found"),
        ({"shape": (9, 4)}, "inference request batch-size must be <= 8 for 'add_sub'"),
        (
            {"shape": (2, 5)},
            "unexpected shape for input 'INPUT0' for model 'add_sub'. Expected [-1,4], got [2,5]",
        ),
        (
            {"dtype": "FP32"},
            "inference input 'INPUT0' data-type is 'FP32', but model 'add_sub' expects 'INT32'",
        ),
        ({"inputs": ("INPUT0",)}, "missing required input(s) ['INPUT1']"),
        (
            {"inputs": ("INPUT0", "INPUT1", "EXTRA")},
            "unexpected inference input 'EXTRA' for model 'add_sub'",
        ),
        (
            {"outputs": [RequestedOutput("NOPE")]},
            "unexpected inference output 'NOPE' for model 'add_sub'",
        ),
    ],
)
async def test_invalid_requests_are_rejected_with_the_culprit_named(server, kwargs, message):
    with pytest.raises(TritonError) as info:
        await server.infer(request(**kwargs))
    # as Triton 2.51: an unknown model or version is NOT_FOUND, the rest INVALID_ARG
    expected = Status.NOT_FOUND if "is not found" in message else Status.INVALID_ARG
    assert info.value.status is expected
    assert message in info.value.message
    assert (await server.infer(request())).model_name == "add_sub"


async def test_non_batching_model_takes_full_shape(server):
    response = await server.infer(request("identity", shape=(4,)))
    assert response.output("OUTPUT0").shape == (4,)


async def test_metadata_and_readiness(server):
    metadata = server.model_metadata("add_sub")
    assert metadata.versions == ("1",)
    assert metadata.inputs[0].shape == (-1, 4)
    assert server.model_metadata("identity").inputs[0].shape == (4,)
    assert server.is_ready() and server.model_ready("add_sub")
    assert server.model_ready("add_sub", 1) and not server.model_ready("add_sub", 2)
    assert not server.model_ready("nope")  # as Triton: not ready, not an error
    assert server.metadata().name == "triton"


async def test_a_version_folder_is_given_for_a_model_in_a_local_repository(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "two", versions=(1, 2), extra="version_policy: { all {} }")
    async with numpy_server(repo, model_control_mode="explicit", load_models=["*"]) as server:
        assert server.model_version_path("two") == repo / "two" / "2"
        assert server.model_version_path("two", 1) == repo / "two" / "1"
        with pytest.raises(TritonError, match="'two' version 3 is not found"):
            server.model_version_path("two", 3)
        with pytest.raises(TritonError, match="'nope' is not found"):
            server.model_version_path("nope")
        config = json.dumps(server.model_config_json("two"))
        await server.load_model("two", config, {"1/model.npy": b""})
        assert server.model_version_path("two") is None  # uploaded files: no repository folder


async def test_the_model_ready_endpoints_ask_instances_that_check_readiness(server, caplog):
    """Triton's TRITONBACKEND_ModelInstanceReady: an instance may say it cannot serve now."""
    instance = server.models.get("identity").pool.instances[0]
    assert await server.check_model_ready("identity")

    async def not_ready() -> None:
        raise unavailable("warming up")

    instance.checks_readiness = True
    instance.check_ready = not_ready
    with caplog.at_level(logging.DEBUG, logger="triton_core.server.core"):
        assert not await server.check_model_ready("identity")
    assert "Model 'identity' version 1 is not ready: warming up" in caplog.text
    assert server.model_ready("identity")  # its lifecycle state is unchanged
    assert not await server.check_model_ready("nope")


async def test_execution_errors_fail_only_their_request(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "broken", kind="fail")
    write_numpy_model(repo, "add_sub", kind="add_sub")
    async with numpy_server(repo) as server:
        with pytest.raises(TritonError) as info:
            await server.infer(request("broken"))
        assert info.value.status is Status.INTERNAL
        assert "told to fail" in info.value.message
        await server.infer(request())


async def test_instances_execute_concurrently(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "slow",
        extra="instance_group [{ count: 3 kind: KIND_CPU }]\n"
        'parameters { key: "sleep_ms" value { string_value: "200" } }',
    )
    async with numpy_server(repo) as server:
        loop = asyncio.get_running_loop()
        started = loop.time()
        await asyncio.gather(*(server.infer(request("slow")) for _ in range(3)))
        elapsed = loop.time() - started
        model = server.model("slow")
        assert [len(i.executions) for i in model.pool.instances] == [1, 1, 1]
        assert elapsed < 0.6  # three 200 ms executions side by side, not one after another


async def test_failed_model_stops_start_with_exit_on_error(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "good")
    (repo / "bad").mkdir()
    (repo / "bad" / "config.pbtxt").write_text("max_batch_size: oops")
    server = numpy_server(repo)
    with pytest.raises(TritonError, match=r"bad/config.pbtxt"):
        await server.start()


async def test_failed_model_is_reported_and_others_serve_without_exit_on_error(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "add_sub", kind="add_sub")
    (repo / "bad").mkdir()
    (repo / "bad" / "config.pbtxt").write_text("max_batch_size: oops")
    async with numpy_server(repo, exit_on_error=False) as server:
        assert not server.is_ready()  # strict readiness: a model failed
        await server.infer(request())
        entries = {entry.name: entry for entry in server.repository_index()}
        assert entries["bad"].state == "UNAVAILABLE" and "oops" in entries["bad"].reason
    async with numpy_server(repo, exit_on_error=False, strict_readiness=False) as server:
        assert server.is_ready()


async def test_same_model_in_two_repositories_is_unavailable(tmp_path):
    from tests.support import numpy_plugins
    from triton_core.server.core import Server, ServerOptions

    first, second = tmp_path / "a", tmp_path / "b"
    write_numpy_model(first, "twin")
    write_numpy_model(second, "twin")
    write_numpy_model(second, "solo")
    options = ServerOptions([first, second], exit_on_error=False)
    async with Server(options, numpy_plugins()) as server:
        assert server.model_ready("solo")
        assert not server.model_ready("twin")


async def test_stop_waits_for_requests_in_flight(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo, "slow", extra='parameters { key: "sleep_ms" value { string_value: "300" } }'
    )
    server = numpy_server(repo)
    await server.start()
    pending = asyncio.ensure_future(server.infer(request("slow")))
    pool = server.model("slow").pool
    await wait_until_async(lambda: pool.outstanding == 1, what="the request to execute")
    await server.stop()
    assert (await pending).model_name == "slow"
    with pytest.raises(TritonError) as info:
        await server.infer(request("slow"))
    assert info.value.status is Status.UNAVAILABLE


async def test_a_submitted_request_is_cancelled_once_its_answer_is(server):
    submitted = request()
    assert not submitted.is_cancelled()
    answer = server.submit(submitted)
    assert not submitted.is_cancelled()
    answer.cancel()  # what a frontend does when its client goes away
    assert submitted.is_cancelled()
