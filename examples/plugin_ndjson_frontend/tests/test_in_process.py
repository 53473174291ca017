"""The frontend on an in-process server (``InProcessServer.serve_frontend``), serving a
doubling backend defined here."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest
from triton_core_example_ndjson.client import LineClient, infer_line
from triton_core_example_ndjson.plugin import NdjsonFrontend

from triton_core import (
    Backend,
    BackendModel,
    InferenceResponse,
    InstanceSpec,
    ModelContext,
    ModelInstance,
    Tensor,
    hookimpl,
)

DOUBLER = {
    "backend": "doubler",
    "max_batch_size": 8,
    "input": [{"name": "x", "data_type": "TYPE_FP32", "dims": [2]}],
    "output": [{"name": "y", "data_type": "TYPE_FP32", "dims": [2]}],
}


class _Doubling(ModelInstance):
    def execute(self, requests: Any) -> list[InferenceResponse]:
        return [
            InferenceResponse(outputs=[Tensor("y", "FP32", r.inputs["x"].data * 2)])
            for r in requests
        ]


class _DoublerModel(BackendModel):
    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return _Doubling()


class _DoublerBackend(Backend):
    name = "doubler"
    default_model_filename = "model.txt"

    def load_model(self, context: ModelContext) -> BackendModel:
        return _DoublerModel()


@hookimpl
def _register(registry: Any) -> None:
    registry.add(_DoublerBackend)


@pytest.fixture
def triton_plugins():
    return [("doubler", types.SimpleNamespace(triton_register_backends=_register))]


@pytest.fixture
def model_repository(model_repository):
    model_repository.add_model("double", DOUBLER, versions={1: {"model.txt": ""}})
    return model_repository


@pytest.fixture
def client(triton_server):
    ports = triton_server.serve_frontend(NdjsonFrontend("127.0.0.1", 0, max_line_bytes=4096))
    with LineClient(ports["ndjson"]) as client:
        yield client


def x(*values: float) -> dict[str, tuple[str, np.ndarray]]:
    return {"x": ("FP32", np.array([values], dtype=np.float32))}


def test_lines_are_inferred_in_order(client):
    for i in range(3):
        answer = client.ask(infer_line("double", x(i, 0.5), request_id=str(i)))
        assert answer["id"] == str(i)
        assert answer["outputs"] == [
            {"name": "y", "datatype": "FP32", "shape": [1, 2], "data": [2.0 * i, 1.0]}
        ]


def test_errors_are_answers_with_the_status_and_the_connection_goes_on(client):
    missing = client.ask(infer_line("nope", x(1, 2)))
    assert missing["status"] == "NOT_FOUND" and "nope" in missing["error"]
    short = infer_line("double", x(1, 2))
    short["inputs"][0]["data"] = [1.0]
    answer = client.ask(short)
    assert answer["status"] == "INVALID_ARG" and "2 values" in answer["error"]
    client.send_line(b"{not json")
    assert client.read()["status"] == "INVALID_ARG"
    assert client.ask(infer_line("double", x(1, 2)))["outputs"][0]["data"] == [2.0, 4.0]


def test_a_line_over_the_limit_closes_the_connection(client):
    client.send_line(b"[" + b"1," * 4096 + b"1]")
    assert client.read() is None  # closed: there is no line boundary to go on from


def test_a_bad_limit_is_refused_before_it_serves(triton_server):
    with pytest.raises(ValueError, match="--ndjson-max-line-bytes"):
        triton_server.serve_frontend(NdjsonFrontend("127.0.0.1", 0, max_line_bytes=0))
