"""Latency metrics of decoupled models' streams on ``/metrics``: Triton's time to first
response, and (beyond Triton) the time between responses and the responses per request, on
every streaming path (gRPC streams, HTTP generate_stream)."""

from __future__ import annotations

import json
import queue
import re
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

from tests.support import ServerProcess, write_stream_model

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.stream_backend"}
RESPONSES = 4
LABELS = 'model="streamer",version="1"'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("stream_metrics")
    write_stream_model(repo, "streamer", count=RESPONSES, delay_ms=2)
    write_stream_model(repo, "paced", count=RESPONSES, delay_ms=40)
    process = ServerProcess([repo], "--metrics-config", "histogram_latencies=true", env=PLUGINS)
    try:
        process.wait_ready()
        yield process
    finally:
        assert process.stop() == 0


def scrape(server: ServerProcess) -> str:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        return reply.read().decode()


def sample(text: str, name: str, extra: str = "") -> float:
    """The value of ``name{model="streamer",version="1"<extra>}``; 0 when absent."""
    pattern = rf"^{re.escape(name)}\{{{re.escape(LABELS + extra)}\}} (\S+)$"
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def stream_over_grpc(server: ServerProcess, model: str = "streamer") -> None:
    client = grpcclient.InferenceServerClient(server.grpc_url)
    results: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: results.put((result, error)))
    try:
        tensor = grpcclient.InferInput("IN", [1], "INT32")
        tensor.set_data_from_numpy(np.array([1], dtype=np.int32))
        client.async_stream_infer(model, [tensor], enable_empty_final_response=True)
        received = [results.get(timeout=30) for _ in range(RESPONSES + 1)]  # + the empty final
    finally:
        client.stop_stream()
    assert all(error is None for _, error in received)


def stream_over_generate(server: ServerProcess) -> None:
    body = json.dumps({"IN": [1]}).encode()
    request = urllib.request.Request(
        f"http://{server.http_url}/v2/models/streamer/generate_stream", data=body
    )
    with urllib.request.urlopen(request, timeout=30) as reply:
        events = [line for line in reply.read().decode().splitlines() if line.startswith("data:")]
    assert len(events) == RESPONSES


@pytest.mark.parametrize("stream", [stream_over_grpc, stream_over_generate])
def test_each_stream_adds_its_first_response_intervals_and_response_count(server, stream):
    before = scrape(server)
    stream(server)
    after = scrape(server)

    def added(name: str, extra: str = "") -> float:
        return sample(after, name, extra) - sample(before, name, extra)

    # Triton's family: one observation per request, of its first response
    assert added("nv_inference_first_response_histogram_ms_count") == 1
    # the gaps between the responses with outputs (the flag-only final is not one)
    interval = "nv_inference_response_interval_histogram_ms"
    assert added(f"{interval}_count") == RESPONSES - 1
    assert added(f"{interval}_sum") > 0
    assert added(f"{interval}_bucket", ',le="+Inf"') == RESPONSES - 1
    counts = "nv_inference_responses_per_request"
    assert added(f"{counts}_count") == 1
    assert added(f"{counts}_sum") == RESPONSES
    assert added(f"{counts}_bucket", ',le="4"') == 1
    assert added(f"{counts}_bucket", ',le="2"') == 0
    assert "# TYPE nv_inference_response_interval_histogram_ms histogram" in after


def test_the_first_response_histogram_times_the_first_response_not_the_stream(server):
    """A stream whose responses leave 40 ms apart: its first response comes before its
    last, so the first-response time is less than the request's whole duration."""
    labels = 'model="paced",version="1"'

    def value(text: str, name: str) -> float:
        match = re.search(rf"^{name}\{{{labels}\}} (\S+)$", text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    before = scrape(server)
    stream_over_grpc(server, "paced")
    after = scrape(server)
    first_ms = value(after, "nv_inference_first_response_histogram_ms_sum") - value(
        before, "nv_inference_first_response_histogram_ms_sum"
    )
    whole_us = value(after, "nv_inference_request_duration_us") - value(
        before, "nv_inference_request_duration_us"
    )
    assert 0 < first_ms * 1000 < whole_us
