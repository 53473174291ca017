"""The frontend in a real ``triton-core serve`` process: its flags, its port in the ports
file, ``--disable-plugin``, and a linear layer of the numpy example backend inferred."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import triton_core_example_ndjson.plugin
import triton_core_example_numpy.plugin
from triton_core_example_ndjson.client import LineClient, infer_line
from triton_core_example_numpy.linear import LinearLayer

from triton_core.testing import ModelRepository, ServerProcess

LAYER = LinearLayer(
    "x", "y", np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32), np.zeros(2, np.float32)
)
PLUGINS = [triton_core_example_ndjson.plugin, triton_core_example_numpy.plugin]


@pytest.fixture(scope="module")
def repository(tmp_path_factory):
    repository = ModelRepository(tmp_path_factory.mktemp("models"))
    repository.add_model("linear", None, versions={1: {"model.json": LAYER.to_json()}})
    return repository


def test_served_beside_http_and_grpc(repository, tmp_path):
    flags = ("--ndjson-port", "0", "--ndjson-address", "127.0.0.1")
    with ServerProcess([repository], *flags, plugins=PLUGINS, workdir=tmp_path) as process:
        process.wait_ready()
        assert set(process.ports) == {"http", "grpc", "metrics", "ndjson"}
        x = np.array([[3.0, 4.0]], dtype=np.float32)
        with LineClient(process.port("ndjson")) as client:
            answer = client.ask(infer_line("linear", {"x": ("FP32", x)}))
        assert answer["outputs"][0]["data"] == [3.0, 8.0]
        assert "Started NDJSON service at 127.0.0.1" in process.log()
        assert process.stop() == 0


def test_off_unless_its_port_is_given(repository, tmp_path):
    with ServerProcess([repository], plugins=PLUGINS, workdir=tmp_path) as process:
        process.wait_ready()
        assert "ndjson" not in process.ports
        assert process.stop() == 0


def test_listed_and_disabled_by_its_entry_point_name():
    listed = subprocess.run(
        [sys.executable, "-m", "triton_core", "plugins"], capture_output=True, text=True, check=True
    ).stdout
    assert any(
        line.startswith("example_ndjson ") and "frontend:ndjson" in line
        for line in listed.splitlines()
    )
    refused = subprocess.run(
        [sys.executable, "-m", "triton_core", "--disable-plugin", "example_ndjson", "serve",
         "--model-repository", "/nonexistent", "--ndjson-port", "0"],
        capture_output=True, text=True,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "unrecognized arguments: --ndjson-port" in refused.stderr
