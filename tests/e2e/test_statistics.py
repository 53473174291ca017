"""Statistics extension (HTTP and gRPC) and Prometheus metrics, checked against what was sent."""

from __future__ import annotations

import re
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_numpy_model

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}


@pytest.fixture(scope="module")
def stats_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("stats_models")
    write_numpy_model(repo, "plain", kind="add_sub")
    write_numpy_model(
        repo,
        "batched",
        kind="add_sub",
        extra='dynamic_batching { }\nparameters { key: "sleep_ms" value { string_value: "20" } }',
    )
    process = ServerProcess(
        [repo], "--metrics-config", "histogram_latencies=true", env=NUMPY_PLUGIN
    )
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0


def add_sub_inputs(rows: int, module=httpclient):
    data = np.ones((rows, 4), dtype=np.int32)
    inputs = [module.InferInput(n, [rows, 4], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    return inputs


def scrape(server) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        assert reply.headers["Content-Type"].startswith("text/plain")
        return reply.read().decode()


def metric(text: str, name: str, **labels: str) -> float:
    """A series' value; its labels written in name order, then ``le`` or ``quantile``, as
    Triton (prometheus-cpp) writes them."""
    last = ("le", "quantile")
    ordered = sorted((k, v) for k, v in labels.items() if k not in last)
    ordered += [(k, labels[k]) for k in last if k in labels]
    label_text = ",".join(f'{key}="{value}"' for key, value in ordered)
    pattern = rf"^{re.escape(name)}\{{{re.escape(label_text)}\}} (\S+)$"
    match = re.search(pattern, text, flags=re.MULTILINE)
    assert match, f"{name}{{{label_text}}} not in metrics:\n{text[:3000]}"
    return float(match.group(1))


def test_statistics_count_what_was_sent(stats_server):
    client = httpclient.InferenceServerClient(stats_server.http_url)
    for rows in (1, 2, 3):
        client.infer("plain", add_sub_inputs(rows))
    with pytest.raises(InferenceServerException):
        client.infer("plain", add_sub_inputs(9))  # over max_batch_size 8
    stats = client.get_inference_statistics("plain")["model_stats"]
    assert len(stats) == 1
    entry = stats[0]
    assert (entry["name"], entry["version"]) == ("plain", "1")
    assert entry["inference_count"] == 6 and entry["execution_count"] == 3
    inference = entry["inference_stats"]
    assert inference["success"]["count"] == 3 and inference["fail"]["count"] == 1
    for key in ("queue", "compute_input", "compute_infer", "compute_output"):
        assert inference[key]["count"] == 3 and inference[key]["ns"] > 0, key
    assert inference["success"]["ns"] >= inference["compute_infer"]["ns"]
    assert sorted(b["batch_size"] for b in entry["batch_stats"]) == [1, 2, 3]
    assert entry["last_inference"] > 0

    grpc = grpcclient.InferenceServerClient(stats_server.grpc_url)
    same = grpc.get_inference_statistics("plain", as_json=True)["model_stats"][0]
    assert int(same["inference_count"]) == 6 and int(same["execution_count"]) == 3
    every = client.get_inference_statistics()["model_stats"]
    assert {e["name"] for e in every} == {"plain", "batched"}
    with pytest.raises(InferenceServerException, match="requested model 'nope' is not"):
        client.get_inference_statistics("nope")


def test_batching_shows_in_statistics_and_metrics(stats_server):
    client = httpclient.InferenceServerClient(stats_server.http_url, concurrency=16)
    pending = [client.async_infer("batched", add_sub_inputs(1)) for _ in range(48)]
    for request in pending:
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT0"), np.full((1, 4), 2))
    entry = client.get_inference_statistics("batched")["model_stats"][0]
    assert entry["inference_count"] == 48
    assert entry["execution_count"] < 48
    text = scrape(stats_server)
    labels = {"model": "batched", "version": "1"}
    assert metric(text, "nv_inference_count", **labels) == 48
    assert metric(text, "nv_inference_exec_count", **labels) == entry["execution_count"]
    assert metric(text, "nv_inference_batch_size_count", **labels) == entry["execution_count"]
    assert metric(text, "nv_inference_batch_size_sum", **labels) == 48
    assert "nv_inference_batch_dispatch{" in text


def test_metrics_use_triton_names_and_labels(stats_server):
    client = httpclient.InferenceServerClient(stats_server.http_url)
    before = scrape(stats_server)
    success_before = metric(before, "nv_inference_request_success", model="plain", version="1")
    client.infer("plain", add_sub_inputs(2))
    with pytest.raises(InferenceServerException):
        client.infer("plain", add_sub_inputs(9))
    text = scrape(stats_server)
    labels = {"model": "plain", "version": "1"}
    assert metric(text, "nv_inference_request_success", **labels) == success_before + 1
    assert metric(text, "nv_inference_request_failure", **labels, reason="OTHER") >= 1
    assert metric(text, "nv_inference_request_failure", **labels, reason="BACKEND") == 0
    assert metric(text, "nv_inference_pending_request_count", **labels) == 0
    for name in (
        "nv_inference_request_duration_us",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_input_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_compute_output_duration_us",
    ):
        assert metric(text, name, **labels) >= 0
    assert "# TYPE nv_inference_count counter" in text
    assert "nv_inference_count_total" not in text
    assert re.search(r'^nv_inference_first_response_histogram_ms_bucket\{.*le="\+Inf"', text,
                     flags=re.MULTILINE)  # fmt: skip
    assert 0.0 <= float(re.search(r"^nv_cpu_utilization (\S+)", text, re.M).group(1)) <= 1.0
    assert float(re.search(r"^nv_cpu_memory_total_bytes (\S+)", text, re.M).group(1)) > 0


def test_metrics_can_be_turned_off(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "plain")
    with ServerProcess([repo], "--allow-metrics=false", env=NUMPY_PLUGIN) as process:
        process.wait_ready()
        assert set(process.ports) == {"http", "grpc"}
        assert "Metrics Service" not in process.log()
        with pytest.raises(LookupError, match="no metrics endpoint"):
            urllib.request.urlopen(process.metrics_url, timeout=2)
