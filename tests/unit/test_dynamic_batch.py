"""The dynamic batcher, driven in-process with the numpy test backend."""

from __future__ import annotations

import asyncio

import numpy as np

from tests.support import numpy_server, write_numpy_model
from triton_core import InferenceRequest, Tensor


def request(model: str, value: int, rows: int = 1, width: int = 4) -> InferenceRequest:
    data = np.full((rows, width), value, dtype=np.int32)
    return InferenceRequest(
        model, {name: Tensor(name, "INT32", data) for name in ("INPUT0", "INPUT1")}
    )


async def run_concurrently(server, requests):
    return await asyncio.gather(*(server.infer(r) for r in requests))


async def test_concurrent_requests_are_batched_and_each_gets_its_rows(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "batched",
        kind="add_sub",
        extra='dynamic_batching { }\nparameters { key: "sleep_ms" value { string_value: "50" } }',
    )
    async with numpy_server(repo) as server:
        responses = await run_concurrently(server, [request("batched", i) for i in range(20)])
        for index, response in enumerate(responses):
            np.testing.assert_array_equal(response.output("OUTPUT0").data, [[2 * index] * 4])
        executions = server.model("batched").pool.instances[0].executions
        assert sum(executions) == 20
        assert len(executions) < 20 and max(executions) > 1


async def test_max_batch_size_and_preferred_sizes_bound_batches(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "preferred",
        max_batch_size=8,
        extra="dynamic_batching { preferred_batch_size: [ 2, 4 ] }\n"
        'parameters { key: "sleep_ms" value { string_value: "30" } }',
    )
    async with numpy_server(repo) as server:
        await run_concurrently(server, [request("preferred", i) for i in range(13)])
        executions = server.model("preferred").pool.instances[0].executions
        assert sum(executions) == 13
        assert all(size in (1, 2, 4) for size in executions[:-1]), executions


async def test_queue_delay_gathers_requests_that_arrive_spread_out(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "delayed",
        max_batch_size=4,
        extra="dynamic_batching { max_queue_delay_microseconds: 300000 }",
    )
    async with numpy_server(repo) as server:

        async def late(index):
            await asyncio.sleep(0.02 * index)
            return await server.infer(request("delayed", index))

        await asyncio.gather(*(late(i) for i in range(4)))
        assert server.model("delayed").pool.instances[0].executions == [4]


async def test_requests_with_different_shapes_are_not_batched_together(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "shapes",
        dims=(-1,),
        extra='dynamic_batching { }\nparameters { key: "sleep_ms" value { string_value: "30" } }',
    )
    async with numpy_server(repo) as server:
        mixed = [request("shapes", i, width=2 + i % 2) for i in range(8)]
        responses = await run_concurrently(server, mixed)
        for index, response in enumerate(responses):
            assert response.output("OUTPUT0").shape == (1, 2 + index % 2)
