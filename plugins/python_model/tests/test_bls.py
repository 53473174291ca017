"""BLS: Python models calling other models (ONNX, Python, decoupled) through the server."""

from __future__ import annotations

import numpy as np
import pytest

from triton_core import InferenceRequest, Tensor
from triton_core.errors import Status, TritonError

pytestmark = pytest.mark.timeout(120)

builders = pytest.importorskip("triton_core_onnx.model_builders")

BLS_SYNC = """
import json

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            target = json.loads(request.parameters()).get("target", "onnx_add_sub")
            bls = pb_utils.InferenceRequest(
                model_name=target,
                requested_output_names=["OUTPUT0", "OUTPUT1"],
                inputs=[
                    pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                    pb_utils.get_input_tensor_by_name(request, "INPUT1"),
                ],
            )
            result = bls.exec()
            if result.has_error():
                responses.append(pb_utils.InferenceResponse(error=result.error()))
                continue
            out0 = pb_utils.get_output_tensor_by_name(result, "OUTPUT0").as_numpy()
            out1 = pb_utils.get_output_tensor_by_name(result, "OUTPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", out0), pb_utils.Tensor("OUTPUT1", out1)
            ]))
        return responses
"""

#: async execute: both targets at once with async_exec; OUTPUT0 from ONNX, OUTPUT1 from Python
BLS_ASYNC = """
import asyncio

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    async def execute(self, requests):
        responses = []
        for request in requests:
            inputs = [
                pb_utils.get_input_tensor_by_name(request, "INPUT0"),
                pb_utils.get_input_tensor_by_name(request, "INPUT1"),
            ]
            calls = [
                pb_utils.InferenceRequest(
                    model_name=name, requested_output_names=[output], inputs=inputs
                ).async_exec()
                for name, output in (("onnx_add_sub", "OUTPUT0"), ("py_add_sub", "OUTPUT1"))
            ]
            onnx_result, python_result = await asyncio.gather(*calls)
            for result in (onnx_result, python_result):
                if result.has_error():
                    raise pb_utils.TritonModelException(result.error().message())
            out0 = pb_utils.get_output_tensor_by_name(onnx_result, "OUTPUT0").as_numpy()
            out1 = pb_utils.get_output_tensor_by_name(python_result, "OUTPUT1").as_numpy()
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT0", out0), pb_utils.Tensor("OUTPUT1", out1)
            ]))
        return responses
"""

#: calls the decoupled repeat model and reports how many responses it saw and their sum
BLS_STREAM = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            count = pb_utils.get_input_tensor_by_name(request, "COUNT")
            bls = pb_utils.InferenceRequest(
                model_name="repeat", requested_output_names=["OUT"], inputs=[count]
            )
            seen, total, finals = 0, 0, 0
            for result in bls.exec(decoupled=True):
                if result.has_error():
                    raise pb_utils.TritonModelException(result.error().message())
                out = pb_utils.get_output_tensor_by_name(result, "OUT")
                if out is None:
                    finals += 1  # the empty final response
                    continue
                seen += 1
                total += int(out.as_numpy()[0])
            summary = np.array([seen, total, finals], dtype=np.int32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("SUMMARY", summary)]))
        return responses
"""

BLS_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_INT32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_INT32 dims: [ 4 ] }
]
"""


@pytest.fixture
def bls_repo(repo, write_model, models):
    builders.add_sub(repo / "onnx_add_sub" / "1" / "model.onnx", "INT32", 4)
    (repo / "onnx_add_sub" / "config.pbtxt").write_text(
        'backend: "onnxruntime"\nmax_batch_size: 8\n'
        "instance_group [ { count: 1 kind: KIND_CPU } ]\n"
    )
    write_model(
        repo, "py_add_sub", models.ADD_SUB,
        models.ADD_SUB_CONFIG.format(max_batch_size=8, dtype="TYPE_INT32", extra=""),
    )  # fmt: skip
    write_model(repo, "bls_sync", BLS_SYNC, BLS_CONFIG)
    write_model(repo, "bls_async", BLS_ASYNC, BLS_CONFIG)
    write_model(repo, "repeat", models.REPEAT, models.REPEAT_CONFIG)
    write_model(
        repo,
        "bls_stream",
        BLS_STREAM,
        """
        backend: "python"
        max_batch_size: 0
        input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "SUMMARY" data_type: TYPE_INT32 dims: [ 3 ] } ]
        """,
    )
    return repo


def add_sub_request(model: str, **parameters) -> tuple[InferenceRequest, np.ndarray, np.ndarray]:
    a = np.array([[1, 2, 3, 4]], dtype=np.int32)
    b = np.array([[10, 20, 30, 40]], dtype=np.int32)
    request = InferenceRequest(
        model,
        {"INPUT0": Tensor("INPUT0", "INT32", a), "INPUT1": Tensor("INPUT1", "INT32", b)},
        parameters=dict(parameters),
    )
    return request, a, b


@pytest.mark.parametrize("target", ["onnx_add_sub", "py_add_sub"])
async def test_exec_calls_an_onnx_or_python_model(bls_repo, make_server, target):
    async with make_server(bls_repo) as server:
        for _ in range(3):
            request, a, b = add_sub_request("bls_sync", target=target)
            response = await server.infer(request)
            np.testing.assert_array_equal(response.output("OUTPUT0").data, a + b)
            np.testing.assert_array_equal(response.output("OUTPUT1").data, a - b)
        assert server.statistics(target)[0].inference_count == 3


async def test_a_failed_bls_call_comes_back_as_an_error_response(bls_repo, make_server):
    async with make_server(bls_repo) as server:
        request, _, _ = add_sub_request("bls_sync", target="no_such_model")
        with pytest.raises(TritonError) as info:
            await server.infer(request)
    assert "no_such_model" in info.value.message


async def test_async_exec_in_async_execute(bls_repo, make_server):
    async with make_server(bls_repo) as server:
        request, a, b = add_sub_request("bls_async")
        response = await server.infer(request)
    np.testing.assert_array_equal(response.output("OUTPUT0").data, a + b)
    np.testing.assert_array_equal(response.output("OUTPUT1").data, a - b)


async def test_decoupled_bls_iterates_every_response(bls_repo, make_server):
    async with make_server(bls_repo) as server:
        for count in (4, 0):
            request = InferenceRequest(
                "bls_stream", {"COUNT": Tensor("COUNT", "INT32", np.array([count], np.int32))}
            )
            response = await server.infer(request)
            seen, total, finals = response.output("SUMMARY").data.tolist()
            assert (seen, total, finals) == (count, sum(range(count)), 1)


async def test_bls_to_a_decoupled_model_without_decoupled_is_an_error(bls_repo, make_server):
    async with make_server(bls_repo) as server:
        request, _, _ = add_sub_request("bls_sync", target="repeat")
        with pytest.raises(TritonError) as info:
            await server.infer(request)
    assert info.value.status is Status.UNSUPPORTED
    assert "decoupled" in info.value.message
