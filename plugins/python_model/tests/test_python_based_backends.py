"""Triton's Python-based backends: ``<--backend-directory>/<name>/model.py`` serves every
model whose config says ``backend: "<name>"``, as Triton's vLLM backend is served (its
``model.py`` imports its own ``utils`` package, completes the config, and reads
``model.json`` from ``pb_utils.get_model_dir()``)."""

from __future__ import annotations

import json
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.http as httpclient
from triton_core_python.backend import PythonBackend, python_based_backends

from triton_core.testing import ServerProcess

pytestmark = pytest.mark.timeout(300)

#: a backend laid out as vLLM's: model.py next to a utils package it imports
BACKEND_MODEL = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils

from utils.greeting import greet


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(config):
        config.add_input({"name": "NAME", "data_type": "TYPE_STRING", "dims": [1]})
        config.add_output({"name": "GREETING", "data_type": "TYPE_STRING", "dims": [1]})
        config.set_max_batch_size(0)
        return config

    def initialize(self, args):
        with open(os.path.join(pb_utils.get_model_dir(), "model.json")) as settings:
            self.salutation = json.load(settings)["salutation"]
        self.where = (args["model_repository"], args["model_version"], __file__)

    def execute(self, requests):
        responses = []
        for request in requests:
            name = pb_utils.get_input_tensor_by_name(request, "NAME").as_numpy()[0].decode()
            text = greet(self.salutation, name) + "|" + "|".join(self.where)
            out = pb_utils.Tensor("GREETING", np.array([text.encode()], dtype=np.object_))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""

GREETING = """
def greet(salutation, name):
    return f"{salutation}, {name}"
"""


def write_backend(folder: Path, name: str) -> Path:
    backend = folder / name
    (backend / "utils").mkdir(parents=True)
    (backend / "model.py").write_text(dedent(BACKEND_MODEL))
    (backend / "utils" / "__init__.py").write_text("")
    (backend / "utils" / "greeting.py").write_text(dedent(GREETING))
    return backend


def write_model(repo: Path, name: str, backend: str, salutation: str) -> Path:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(f'backend: "{backend}"\n')
    (repo / name / "1" / "model.json").write_text(json.dumps({"salutation": salutation}))
    return repo / name


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("python_based")
    backends = root / "backends"
    backend = write_backend(backends, "greeter")
    repo = root / "models"
    write_model(repo, "hello", "greeter", "Hello")
    write_model(repo, "bonjour", "greeter", "Bonjour")
    server = ServerProcess([repo], "--backend-directory", str(backends))
    try:
        server.wait_ready()
        yield server, repo, backend
    finally:
        assert server.stop() == 0


def greet(server: ServerProcess, model: str, name: str) -> list[str]:
    client = httpclient.InferenceServerClient(server.http_url)
    tensor = httpclient.InferInput("NAME", [1], "BYTES")
    tensor.set_data_from_numpy(np.array([name.encode()], dtype=np.object_))
    result = client.infer(model, [tensor])
    return result.as_numpy("GREETING")[0].decode().split("|")


def test_each_model_of_the_backend_runs_the_backends_model_py_with_its_own_folder(served):
    server, repo, backend = served
    assert greet(server, "hello", "Ada") == [
        "Hello, Ada",
        str(repo / "hello"),
        "1",
        str(backend / "model.py"),
    ]
    assert greet(server, "bonjour", "Ada")[0] == "Bonjour, Ada"


def test_the_backends_auto_complete_config_completes_the_models_config(served):
    server, _, _ = served
    config = httpclient.InferenceServerClient(server.http_url).get_model_config("hello")
    assert config["backend"] == "greeter"
    assert [tensor["name"] for tensor in config["input"]] == ["NAME"]
    assert [tensor["name"] for tensor in config["output"]] == ["GREETING"]


def test_names_taken_by_plugins_and_folders_with_a_library_are_not_python_based(tmp_path):
    first, second = tmp_path / "first", tmp_path / "second"
    write_backend(first, "greeter")
    write_backend(second, "greeter")  # the first folder has it already
    write_backend(first, "onnxruntime")  # a plugin provides it
    write_backend(first, "python")  # the python backend itself
    library = write_backend(first, "native")
    (library / "libtriton_native.so").write_bytes(b"")
    (first / "no_model").mkdir()
    (first / "a_file.py").write_text("")
    found = python_based_backends((first, second), taken={"onnxruntime"})
    assert [(backend.name, backend.backend_model_path) for backend in found] == [
        ("greeter", first / "greeter" / "model.py")
    ]
    assert issubclass(found[0], PythonBackend)
