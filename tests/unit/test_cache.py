"""The response cache: key, LRU bounds, and hits that skip execution (in-process)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support import numpy_plugins, write_numpy_model
from triton_core import InferenceRequest, RequestedOutput, Server, ServerOptions, Tensor
from triton_core.cache.base import request_key
from triton_core.cache.local import LocalCache
from triton_core.errors import TritonError
from triton_core.types import InferenceResponse


def add_sub_request(value: int, shape=(1, 4), **kwargs) -> InferenceRequest:
    data = np.full(shape, value, dtype=np.int32)
    return InferenceRequest(
        "cached", {n: Tensor(n, "INT32", data) for n in ("INPUT0", "INPUT1")}, **kwargs
    )


def test_key_covers_model_version_inputs_shapes_and_outputs():
    base = request_key("m", 1, add_sub_request(1))
    assert base == request_key("m", 1, add_sub_request(1, id="other-id"))
    assert base != request_key("m", 2, add_sub_request(1))
    assert base != request_key("n", 1, add_sub_request(1))
    assert base != request_key("m", 1, add_sub_request(2))
    flat = add_sub_request(1, shape=(4,))
    assert base != request_key("m", 1, flat)  # same bytes, another shape
    only_one = add_sub_request(1, outputs=[RequestedOutput("OUTPUT0")])
    assert base != request_key("m", 1, only_one)


def response(nbytes: int) -> InferenceResponse:
    data = np.zeros(nbytes, dtype=np.uint8)
    return InferenceResponse(outputs=[Tensor("O", "UINT8", data)])


async def test_lru_evicts_least_recently_used_within_the_byte_budget():
    cache = LocalCache({"size": "3000"})
    await cache.insert(b"a", response(700))
    await cache.insert(b"b", response(700))
    assert await cache.lookup(b"a") is not None  # a is now the most recent
    await cache.insert(b"c", response(700))  # over budget: b goes
    assert await cache.lookup(b"b") is None
    assert await cache.lookup(b"a") is not None and await cache.lookup(b"c") is not None
    stats = cache.statistics()
    assert stats.entries == 2 and stats.evictions == 1 and stats.used_bytes <= 3000
    await cache.insert(b"huge", response(10_000))  # larger than the cache: not kept
    assert await cache.lookup(b"huge") is None


@pytest.mark.parametrize("settings", [{}, {"size": "x"}, {"size": "0"}, {"size": "9", "y": "1"}])
def test_bad_settings_are_refused(settings):
    with pytest.raises(ValueError, match="local"):
        LocalCache(settings)


async def test_hits_skip_execution_and_show_in_statistics(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "cached", kind="add_sub", extra="response_cache { enable: true }")
    write_numpy_model(repo, "uncached", kind="add_sub")
    options = ServerOptions([repo], cache=("local", {"size": "1048576"}))
    async with Server(options, numpy_plugins()) as server:
        first = await server.infer(add_sub_request(3, id="one"))
        second = await server.infer(add_sub_request(3, id="two"))
        third = await server.infer(add_sub_request(4))
        assert second.id == "two" and first.id == "one"
        np.testing.assert_array_equal(second.output("OUTPUT0").data, [[6, 6, 6, 6]])
        np.testing.assert_array_equal(third.output("OUTPUT0").data, [[8, 8, 8, 8]])
        instance = server.model("cached").pool.instances[0]
        assert len(instance.executions) == 2  # the repeat was answered from the cache
        stats = server.statistics("cached")[0]
        assert stats.cache_hit.count == 1 and stats.cache_miss.count == 2
        assert stats.success.count == 3 and stats.inference_count == 2
        assert stats.queue.count == 3 and stats.compute_infer.count == 2
        request = InferenceRequest(
            "uncached",
            {n: Tensor(n, "INT32", np.ones((1, 4), np.int32)) for n in ("INPUT0", "INPUT1")},
        )
        await server.infer(request)
        await server.infer(request)
        assert server.statistics("uncached")[0].cache_hit.count == 0


async def test_unknown_cache_is_an_error(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "m")
    server = Server(ServerOptions([repo], cache=("nowhere", {})), numpy_plugins())
    with pytest.raises(TritonError, match="cache 'nowhere'"):
        await server.start()
