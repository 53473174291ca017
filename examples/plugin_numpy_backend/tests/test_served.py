"""The backend in a real ``triton-core serve`` process, with the stock Triton clients."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
from functools import partial

import numpy as np
import pytest
import triton_core_example_numpy.plugin

from triton_core.testing import ModelRepository, ServerProcess, grpc_inputs, http_inputs

#: a batch closes when it reaches max_batch_size (4) or when its oldest request waited this
#: long: four requests in flight together are then one execution, whatever the timing
HOLD_FOR_A_FULL_BATCH = {"dynamic_batching": {"max_queue_delay_microseconds": 60_000_000}}


@pytest.fixture(scope="module")
def served(tmp_path_factory, model_file):
    """One process for the module: ``linear`` has no config, ``held`` only its batching."""
    repository = ModelRepository(tmp_path_factory.mktemp("models"))
    repository.add_model("linear", None, versions={1: model_file})
    repository.add_model("held", HOLD_FOR_A_FULL_BATCH, versions={1: model_file})
    with ServerProcess([repository], plugins=[triton_core_example_numpy.plugin]) as process:
        process.wait_ready()
        yield process


def test_http_and_grpc_clients_infer(served, layer):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    with served.http_client() as http, served.grpc_client() as grpc:
        from_http = http.infer("linear", http_inputs({"x": x})).as_numpy("y")
        from_grpc = grpc.infer("linear", grpc_inputs({"x": x})).as_numpy("y")
    np.testing.assert_allclose(from_http, x @ layer.weight + layer.bias)
    np.testing.assert_array_equal(from_grpc, from_http)


def test_the_completed_config_is_served(served):
    with served.http_client() as http:
        config = http.get_model_config("linear")
    assert config["backend"] == "numpy_linear"
    assert config["max_batch_size"] == 4
    assert "dynamic_batching" in config
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["input"]] == [
        ("x", "TYPE_FP32", [3])
    ]
    assert [(t["name"], t["data_type"], t["dims"]) for t in config["output"]] == [
        ("y", "TYPE_FP32", [2])
    ]


def test_requests_in_flight_together_run_as_one_batch(served, layer):
    rows = [np.full((1, 3), i, dtype=np.float32) for i in range(4)]
    answers: queue.Queue = queue.Queue()
    with served.grpc_client() as grpc:
        for i, x in enumerate(rows):
            # the client calls back with result= and error= on its own thread
            grpc.async_infer("held", grpc_inputs({"x": x}), partial(collect, answers, i))
        results = [answers.get(timeout=120) for _ in rows]  # beyond the delay: fails, not hangs
    for i, result, error in results:
        assert error is None, error
        np.testing.assert_allclose(result.as_numpy("y"), rows[i] @ layer.weight + layer.bias)
    with served.http_client() as http:
        (stats,) = http.get_inference_statistics("held")["model_stats"]
    assert (stats["inference_count"], stats["execution_count"]) == (4, 1)
    assert [(b["batch_size"], b["compute_infer"]["count"]) for b in stats["batch_stats"]] == [
        (4, 1)
    ]


def collect(answers: queue.Queue, index: int, result: object, error: object) -> None:
    answers.put((index, result, error))


def test_triton_core_plugins_lists_the_installed_distribution():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_CORE_PLUGINS"}
    listing = subprocess.run(
        [sys.executable, "-m", "triton_core", "plugins"],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        timeout=300,
    ).stdout
    rows = [line.split() for line in listing.splitlines()]
    row = ["example_numpy", "triton-core-example-numpy", "0.1.0", "backend:numpy_linear"]
    assert row in rows, (
        "the entry point is missing: pip install -e examples/plugin_numpy_backend\n" + listing
    )
