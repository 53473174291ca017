"""Dynamic batching end to end: a real server process driven by the stock tritonclient.

The numpy test backend comes in through ``TRITON_CORE_PLUGINS``; the ``max_input_bytes``
strategy comes from the separately installed ``triton-core-test-batch-strategy`` distribution,
through its entry point, as a third-party plugin would. Ordering is asserted through the order
of responses, with executions long enough (hundreds of ms) that every request is queued
before the one executing finishes.
"""

from __future__ import annotations

import threading
import time
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, wait_until, write_numpy_model

pytest.importorskip("triton_core_test_batch_strategy")

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
SLOW = 'parameters {{ key: "sleep_ms" value {{ string_value: "{ms}" }} }}'
#: the numpy backend appends a line here per execute: a test sees a batch begin
STARTED = 'parameters {{ key: "started_file" value {{ string_value: "{path}" }} }}'


@pytest.fixture(scope="module")
def batching_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("batching_models")
    started = tmp_path_factory.mktemp("batching_started")
    write_numpy_model(
        repo,
        "batched",
        kind="add_sub",
        extra="dynamic_batching { max_queue_delay_microseconds: 2000 }\n" + SLOW.format(ms=20),
    )
    write_numpy_model(
        repo,
        "prio",
        max_batch_size=1,
        extra="dynamic_batching { priority_levels: 2 default_priority_level: 2 }\n"
        + SLOW.format(ms=500)
        + STARTED.format(path=started / "prio"),
    )
    write_numpy_model(
        repo,
        "timeout",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { allow_timeout_override: true } }\n"
        + SLOW.format(ms=2000)
        + STARTED.format(path=started / "timeout"),
    )
    write_numpy_model(
        repo,
        "bounded",
        max_batch_size=1,
        extra="dynamic_batching { default_queue_policy { max_queue_size: 1 } }\n"
        + SLOW.format(ms=2000)
        + STARTED.format(path=started / "bounded"),
    )
    write_numpy_model(
        repo,
        "bytes",
        kind="add_sub",
        extra="dynamic_batching { }\n"
        'parameters { key: "batch_strategy" value { string_value: "max_input_bytes" } }\n'
        'parameters { key: "max_batch_input_bytes" value { string_value: "64" } }\n'
        + SLOW.format(ms=50),
    )
    write_numpy_model(
        repo,
        "broken",
        extra="dynamic_batching { preserve_ordering: true priority_levels: 2 "
        "default_priority_level: 1 }",
    )
    process = ServerProcess(
        [repo], "--exit-on-error=false", "--strict-readiness=false", env=NUMPY_PLUGIN
    )
    try:
        process.wait_ready()
        process.started = started  # type: ignore[attr-defined]
        yield process
    finally:
        assert process.stop() == 0, process.log()[-4000:]


def inputs(value: int, module=httpclient, rows: int = 1):  # type: ignore[no-untyped-def]
    data = np.full((rows, 4), value, dtype=np.int32)
    tensors = [module.InferInput(n, [rows, 4], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(data)
    return tensors


def executions_started(server: ServerProcess, model: str) -> int:
    path = server.started / model  # type: ignore[attr-defined]
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_executing(server: ServerProcess, model: str, before: int) -> None:
    """Until the model began an execution after ``before`` had begun."""
    wait_until(lambda: executions_started(server, model) > before, what=f"{model} to execute")


def wait_pending(server: ServerProcess, model: str, count: int) -> None:
    """Until ``count`` requests of the model wait in its queue (the pending metric)."""

    def pending() -> bool:
        with urllib.request.urlopen(server.metrics_url, timeout=5) as reply:
            lines = reply.read().decode().splitlines()
        family = "nv_inference_pending_request_count{"
        samples = [x for x in lines if x.startswith(family) and f'model="{model}"' in x]
        return bool(samples) and float(samples[0].rsplit(" ", 1)[1]) == count

    wait_until(pending, what=f"{count} pending requests of {model}")


class Responses:
    """Collects gRPC async_infer callbacks in arrival order (called on client threads)."""

    def __init__(self) -> None:
        self.order: list[str] = []
        self.results: dict[str, object] = {}
        self.lock = threading.Lock()
        self.events: dict[str, threading.Event] = {}

    def callback(self, label: str):  # type: ignore[no-untyped-def]
        self.events[label] = threading.Event()

        def done(result, error) -> None:  # type: ignore[no-untyped-def]
            with self.lock:
                self.order.append(label)
                self.results[label] = error if error is not None else result
            self.events[label].set()

        return done

    def wait(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        for label, event in self.events.items():
            assert event.wait(max(0.0, deadline - time.monotonic())), f"{label}: no response"


def test_requests_are_batched_and_each_gets_its_own_rows(batching_server):
    client = httpclient.InferenceServerClient(batching_server.http_url, concurrency=32)
    pending = [(v, client.async_infer("batched", inputs(v, rows=1 + v % 3))) for v in range(48)]
    for value, request in pending:
        result = request.get_result()
        np.testing.assert_array_equal(
            result.as_numpy("OUTPUT0"), np.full((1 + value % 3, 4), 2 * value)
        )
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1 + value % 3, 4)))
    entry = client.get_inference_statistics("batched")["model_stats"][0]
    assert entry["inference_count"] == sum(1 + v % 3 for v in range(48))
    assert entry["execution_count"] < 48  # fewer executions than requests: batching happened
    assert max(b["batch_size"] for b in entry["batch_stats"]) > 3


def test_higher_priority_requests_run_first(batching_server):
    client = grpcclient.InferenceServerClient(batching_server.grpc_url)
    responses = Responses()
    before = executions_started(batching_server, "prio")
    client.async_infer("prio", inputs(0, grpcclient), responses.callback("busy"))
    wait_executing(batching_server, "prio", before)  # for 500 ms: the rest queues behind it
    for i in range(3):
        client.async_infer("prio", inputs(1, grpcclient), responses.callback(f"low{i}"), priority=2)
    for i in range(3):
        client.async_infer(
            "prio", inputs(2, grpcclient), responses.callback(f"high{i}"), priority=1
        )
    responses.wait()
    assert responses.order[0] == "busy"
    assert sorted(responses.order[1:4]) == ["high0", "high1", "high2"], responses.order
    assert not any(isinstance(r, Exception) for r in responses.results.values())


def test_a_queue_timeout_is_enforced_while_a_batch_executes(batching_server):
    grpc = grpcclient.InferenceServerClient(batching_server.grpc_url)
    responses = Responses()
    before = executions_started(batching_server, "timeout")
    grpc.async_infer("timeout", inputs(0, grpcclient), responses.callback("busy"))
    wait_executing(batching_server, "timeout", before)  # "busy" executes for 2 s
    http = httpclient.InferenceServerClient(batching_server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http.infer("timeout", inputs(1), timeout=50_000)  # µs, Triton's request parameter
    assert info.value.status() == "503"
    assert "Request timeout expired" in info.value.message()
    with pytest.raises(InferenceServerException) as info:
        grpc.infer("timeout", inputs(1, grpcclient), timeout=50_000)
    assert info.value.status() == "StatusCode.UNAVAILABLE"
    assert "Request timeout expired" in info.value.message()
    assert not responses.events["busy"].is_set()  # both answered while "busy" still ran
    responses.wait()
    stats = http.get_inference_statistics("timeout")["model_stats"][0]["inference_stats"]
    assert stats["fail"]["count"] == 2 and stats["success"]["count"] == 1


def test_a_full_queue_rejects_at_once_with_503(batching_server):
    grpc = grpcclient.InferenceServerClient(batching_server.grpc_url)
    responses = Responses()
    before = executions_started(batching_server, "bounded")
    grpc.async_infer("bounded", inputs(0, grpcclient), responses.callback("busy"))
    wait_executing(batching_server, "bounded", before)  # "busy" executes for 2 s
    grpc.async_infer("bounded", inputs(1, grpcclient), responses.callback("queued"))
    wait_pending(batching_server, "bounded", 1)
    http = httpclient.InferenceServerClient(batching_server.http_url)
    with pytest.raises(InferenceServerException) as info:
        http.infer("bounded", inputs(2))
    assert info.value.status() == "503"
    assert "Exceeds maximum queue size" in info.value.message()
    assert "'bounded'" in info.value.message()
    assert not responses.events["busy"].is_set()
    responses.wait()
    assert not any(isinstance(r, Exception) for r in responses.results.values())
    failures = metric_line(batching_server, "nv_inference_request_failure", "bounded", "REJECTED")
    assert float(failures.rsplit(" ", 1)[1]) == 1


def test_a_strategy_plugin_from_an_entry_point_limits_batches(batching_server):
    client = httpclient.InferenceServerClient(batching_server.http_url, concurrency=16)
    pending = [(v, client.async_infer("bytes", inputs(v))) for v in range(16)]
    for value, request in pending:
        np.testing.assert_array_equal(
            request.get_result().as_numpy("OUTPUT0"), np.full((1, 4), 2 * value)
        )
    entry = client.get_inference_statistics("bytes")["model_stats"][0]
    # two INT32 inputs of 1x4 are 32 bytes: a 64-byte limit allows two requests per batch
    assert max(b["batch_size"] for b in entry["batch_stats"]) == 2
    dispatched = metric_line(
        batching_server, "nv_inference_batch_dispatch", "bytes", "batch_strategy"
    )
    assert float(dispatched.rsplit(" ", 1)[1]) >= 1


def test_an_invalid_batching_config_fails_that_model_naming_the_field(batching_server):
    client = httpclient.InferenceServerClient(batching_server.http_url)
    assert not client.is_model_ready("broken")
    assert client.is_model_ready("batched")
    log = batching_server.log()
    assert "model 'broken': dynamic_batching 'preserve_ordering'" in log, log[-3000:]


def metric_line(server: ServerProcess, family: str, model: str, reason: str) -> str:
    """The sample of ``family`` for ``model`` with label ``reason``, as the server prints it."""
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if (
            line.startswith(family + "{")
            and f'model="{model}"' in line
            and f'reason="{reason}"' in line
        ):
            return line
    raise AssertionError(f"no {family} sample for {model} / {reason}:\n{text[:3000]}")
