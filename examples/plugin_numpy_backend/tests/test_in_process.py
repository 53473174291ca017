"""The backend in an in-process server: auto-complete, checks at load, batched execution."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import triton_core_example_numpy.plugin

from triton_core import DataType, TritonError
from triton_core.testing import inference_request


@pytest.fixture
def triton_plugins():
    return [triton_core_example_numpy.plugin]


@pytest.fixture
def model_repository(model_repository, model_file):
    # no config.pbtxt: the server finds the backend by its model file, which completes it
    model_repository.add_model("linear", None, versions={1: model_file})
    return model_repository


def test_auto_complete_fills_tensors_max_batch_size_and_dynamic_batching(triton_server):
    config = triton_server.server.model_config("linear")
    assert config.backend == "numpy_linear"
    assert [(t.name, DataType.Name(t.data_type), list(t.dims)) for t in config.input] == [
        ("x", "TYPE_FP32", [3])
    ]
    assert [(t.name, DataType.Name(t.data_type), list(t.dims)) for t in config.output] == [
        ("y", "TYPE_FP32", [2])
    ]
    assert config.max_batch_size == 4  # the default-max-batch-size option's default
    assert config.WhichOneof("scheduling_choice") == "dynamic_batching"


def test_the_default_max_batch_size_option_sets_the_completed_size(triton_server_factory):
    options = {"numpy_linear": {"default-max-batch-size": "8"}}  # --backend-config
    server = triton_server_factory(backend_options=options)
    assert server.server.model_config("linear").max_batch_size == 8


def test_auto_complete_keeps_what_the_config_lists(
    triton_server_factory, model_repository, model_file
):
    # dims with the model's full shape: a model that does not batch (max_batch_size 0)
    config = {"backend": "numpy_linear", "input": [{"name": "x", "dims": [-1, 3]}]}
    model_repository.add_model("unbatched", config, versions={1: model_file})
    completed = triton_server_factory().server.model_config("unbatched")
    assert completed.max_batch_size == 0
    assert completed.WhichOneof("scheduling_choice") is None
    tensors = [*completed.input, *completed.output]
    assert [(t.name, DataType.Name(t.data_type), list(t.dims)) for t in tensors] == [
        ("x", "TYPE_FP32", [-1, 3]),
        ("y", "TYPE_FP32", [-1, 2]),
    ]


def test_a_batch_of_rows_is_one_product(triton_server, layer):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    response = triton_server.infer(inference_request("linear", {"x": x}))
    np.testing.assert_allclose(response.output("y").data, x @ layer.weight + layer.bias)
    assert response.output("y").datatype == "FP32"


def test_requests_batched_together_each_get_their_rows(triton_server, layer):
    rows = [np.full((1, 3), i, dtype=np.float32) for i in range(4)]

    async def together():
        return await asyncio.gather(
            *(triton_server.ainfer(inference_request("linear", {"x": x})) for x in rows)
        )

    for x, response in zip(rows, triton_server.run(together()), strict=True):
        np.testing.assert_allclose(response.output("y").data, x @ layer.weight + layer.bias)


def test_a_config_naming_a_tensor_the_model_lacks_fails_its_load(
    triton_server_factory, model_repository, model_file
):
    config = {"backend": "numpy_linear", "input": [{"name": "z"}]}
    model_repository.add_model("wrong", config, versions={1: model_file})
    with pytest.raises(TritonError, match="model 'wrong': the config lists input 'z'"):
        triton_server_factory()


def test_without_auto_complete_the_config_must_be_whole(
    triton_server_factory, model_repository, model_file
):
    config = {
        "backend": "numpy_linear",
        "max_batch_size": 2,
        "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [3]}],
        "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [2]}],
    }
    model_repository.add_model("whole", config, versions={1: model_file})
    model_repository.remove_model("linear")  # it has no config to load from
    server = triton_server_factory(auto_complete_config=False).server
    assert server.model_ready("whole")
    assert server.model_config("whole").WhichOneof("scheduling_choice") is None
