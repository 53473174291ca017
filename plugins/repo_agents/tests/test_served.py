"""The checksum agent in a server, as a model's config names it, with triton_core.testing."""

from __future__ import annotations

import hashlib
import sys

import numpy as np
import pytest
import triton_core_repo_agents.plugin

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
from triton_core.testing import inference_request

WEIGHTS = b"weights"


class EchoInstance(ModelInstance):
    def execute(self, requests):
        return [InferenceResponse(outputs=[Tensor("OUT", "FP32", r.inputs["IN"].data)])
                for r in requests]  # fmt: skip


class EchoModel(BackendModel):
    def create_instance(self, spec: InstanceSpec) -> ModelInstance:
        return EchoInstance()


class EchoBackend(Backend):
    """The smallest backend that needs a model file: the agent checks that file."""

    name = "echo"
    default_model_filename = "model.bin"

    def load_model(self, context: ModelContext) -> BackendModel:
        return EchoModel()


@hookimpl
def triton_register_backends(registry):
    registry.add(EchoBackend)


@pytest.fixture
def triton_plugins():
    return [triton_core_repo_agents.plugin, ("echo", sys.modules[__name__])]


def add_checked_model(repository, name: str, md5: str) -> None:
    config = {
        "backend": "echo",
        "max_batch_size": 4,
        "input": [{"name": "IN", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "OUT", "data_type": "TYPE_FP32", "dims": [2]}],
        "model_repository_agents": {
            "agents": [{"name": "checksum", "parameters": {"MD5:1/model.bin": md5}}]
        },
    }
    repository.add_model(name, config, versions={1: {"model.bin": WEIGHTS}})


def test_a_verified_model_serves_and_a_tampered_one_fails_alone(
    model_repository, triton_server_factory
):
    add_checked_model(model_repository, "good", hashlib.md5(WEIGHTS).hexdigest())
    add_checked_model(model_repository, "tampered", "0" * 32)
    server = triton_server_factory(exit_on_error=False, strict_readiness=False)

    x = np.ones((1, 2), np.float32)
    response = server.infer(inference_request("good", {"IN": x}))
    np.testing.assert_array_equal(response.output("OUT").data, x)
    (tampered,) = [e for e in server.server.repository_index() if e.name == "tampered"]
    assert tampered.state == "UNAVAILABLE"
    assert "Mismatched MD5 hash for file 1/model.bin" in tampered.reason
