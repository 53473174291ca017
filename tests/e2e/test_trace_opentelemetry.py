"""``--trace-config mode=opentelemetry``: the spans a real server exports over OTLP/HTTP, as
Triton's L0_trace opentelemetry tests check them, received by an OTLP endpoint the test runs.
"""

from __future__ import annotations

import http.server
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.e2e.test_trace import build_repository, inputs
from tests.support import ServerProcess

trace_service = pytest.importorskip(
    "opentelemetry.proto.collector.trace.v1.trace_service_pb2",
    reason="the opentelemetry extra (pip install 'triton-core[otel]')",
)
pytestmark = pytest.mark.timeout(180)

TRACEPARENT = "00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01"
_SENT = ["INFER_RESPONSE_COMPLETE", "{0}_SEND_START", "{0}_SEND_END"]
ROOT_EVENTS = {
    "http": ["HTTP_RECV_START", "HTTP_RECV_END", *(name.format("HTTP") for name in _SENT)],
    "grpc": ["GRPC_WAITREAD_START", "GRPC_WAITREAD_END", *(name.format("GRPC") for name in _SENT)],
}
MODEL_EVENTS = ["REQUEST_START", "QUEUE_START", "REQUEST_END"]
COMPUTE_EVENTS = ["COMPUTE_START", "COMPUTE_INPUT_END", "COMPUTE_OUTPUT_START", "COMPUTE_END"]
#: an export is a few spans; refuse a body larger than this unread
MAX_EXPORT_BYTES = 4 << 20


class OtlpReceiver:
    """An OTLP/HTTP trace endpoint: decodes each ExportTraceServiceRequest it is sent."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.resources: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if self.path != "/v1/traces" or not 0 < length <= MAX_EXPORT_BYTES:
                    self.send_error(400)
                    return
                request = trace_service.ExportTraceServiceRequest.FromString(
                    self.rfile.read(length)
                )
                receiver.add(request)
                body = trace_service.ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1/traces"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def add(self, request: Any) -> None:
        with self._lock:
            for resource_spans in request.resource_spans:
                attributes = {
                    a.key: a.value.string_value for a in resource_spans.resource.attributes
                }
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        self.resources.append(attributes)
                        self.spans.append(_span(span, scope_spans.scope.name))

    def take(self, count: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        """The next ``count`` spans received (waits for them, within ``timeout``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.spans) >= count:
                    taken, self.spans = self.spans[:count], self.spans[count:]
                    return taken
            time.sleep(0.05)
        with self._lock:
            raise AssertionError(f"expected {count} spans, received {self.spans}")

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _span(span: Any, scope: str) -> dict[str, Any]:
    attributes = {}
    for attribute in span.attributes:
        value = attribute.value
        attributes[attribute.key] = getattr(value, value.WhichOneof("value"))
    return {
        "name": span.name,
        "scope": scope,
        "kind": span.kind,
        "trace_id": span.trace_id.hex(),
        "span_id": span.span_id.hex(),
        "parent": span.parent_span_id.hex(),
        "events": [event.name for event in span.events],
        "event_times": [event.time_unix_nano for event in span.events],
        "attributes": attributes,
        "start": span.start_time_unix_nano,
        "end": span.end_time_unix_nano,
    }


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    otlp = OtlpReceiver()
    try:
        yield otlp
    finally:
        otlp.close()


@pytest.fixture(scope="module")
def otel_server(
    receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerProcess]:
    repository = build_repository(tmp_path_factory.mktemp("otel_models"), python=True)
    flags = []
    for setting in (
        "mode=opentelemetry",
        "rate=1",
        "level=TIMESTAMPS",
        f"opentelemetry,url={receiver.url}",
        "opentelemetry,resource=test.key=test.value",
        "opentelemetry,resource=service.name=test_triton",
        "opentelemetry,bsp_schedule_delay=50",
    ):
        flags += ["--trace-config", setting]
    process = ServerProcess([repository], *flags)
    try:
        process.wait_ready()
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-3000:]


def nesting(spans: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Parent span name -> sorted child span names (as Triton's _verify_nesting)."""
    names = {span["span_id"]: span["name"] for span in spans}
    children: dict[str, list[str]] = {}
    for span in spans:
        if span["parent"] in names:
            children.setdefault(names[span["parent"]], []).append(span["name"])
    return {parent: sorted(names) for parent, names in children.items()}


def check_events(spans: list[dict[str, Any]], frontend: str) -> None:
    for span in spans:
        expected = {"InferRequest": ROOT_EVENTS[frontend], "compute": COMPUTE_EVENTS}
        assert span["events"] == expected.get(span["name"], MODEL_EVENTS), span
        assert span["event_times"] == sorted(span["event_times"]), span
        assert span["scope"] == "triton-server" and span["kind"] == 2  # SPAN_KIND_SERVER


def test_http_request_continues_the_client_traceparent(
    otel_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    with httpclient.InferenceServerClient(otel_server.http_url) as client:
        client.infer(
            "simple", inputs(httpclient), headers={"traceparent": TRACEPARENT}, request_id="r1"
        )
    spans = receiver.take(3)
    check_events(spans, "http")
    assert nesting(spans) == {"InferRequest": ["simple"], "simple": ["compute"]}
    (root,) = [span for span in spans if span["name"] == "InferRequest"]
    _, trace_id, parent_span, _ = TRACEPARENT.split("-")
    assert root["parent"] == parent_span
    assert {span["trace_id"] for span in spans} == {trace_id}
    (model,) = [span for span in spans if span["name"] == "simple"]
    assert model["attributes"] == {
        "triton.model_name": "simple",
        "triton.model_version": 1,
        "triton.trace_id": model["attributes"]["triton.trace_id"],
        "triton.trace_parent_id": 0,
        "triton.request_id": "r1",
    }
    assert receiver.resources[-1]["test.key"] == "test.value"
    assert receiver.resources[-1]["service.name"] == "test_triton"


def test_grpc_request_without_context_starts_a_trace(
    otel_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    with grpcclient.InferenceServerClient(otel_server.grpc_url) as client:
        client.infer("simple", inputs(grpcclient))
    spans = receiver.take(3)
    check_events(spans, "grpc")
    assert nesting(spans) == {"InferRequest": ["simple"], "simple": ["compute"]}
    (root,) = [span for span in spans if span["name"] == "InferRequest"]
    assert root["parent"] == ""
    assert len({span["trace_id"] for span in spans}) == 1


def test_grpc_metadata_traceparent_is_continued(
    otel_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    with grpcclient.InferenceServerClient(otel_server.grpc_url) as client:
        client.infer("simple", inputs(grpcclient), headers={"traceparent": TRACEPARENT})
    spans = receiver.take(3)
    (root,) = [span for span in spans if span["name"] == "InferRequest"]
    assert root["parent"] == TRACEPARENT.split("-")[2]


def test_bls_call_is_a_child_of_the_calling_model(
    otel_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    with httpclient.InferenceServerClient(otel_server.http_url) as client:
        result = client.infer("bls", inputs(httpclient))
    assert result.as_numpy("OUTPUT0").tolist() == [list(range(0, 32, 2))]
    spans = receiver.take(5)
    check_events(spans, "http")
    assert nesting(spans) == {
        "InferRequest": ["bls"],
        "bls": ["compute", "simple"],
        "simple": ["compute"],
    }
    assert len({span["trace_id"] for span in spans}) == 1
    (bls,) = [span for span in spans if span["name"] == "bls"]
    (child,) = [span for span in spans if span["name"] == "simple"]
    assert child["attributes"]["triton.trace_parent_id"] == bls["attributes"]["triton.trace_id"]


def test_ensemble_steps_are_children_of_the_ensemble(
    otel_server: ServerProcess, receiver: OtlpReceiver
) -> None:
    with httpclient.InferenceServerClient(otel_server.http_url) as client:
        client.infer("ens", inputs(httpclient, ("A", "B")))
    spans = receiver.take(4)
    assert nesting(spans) == {"InferRequest": ["ens"], "ens": ["simple"], "simple": ["compute"]}


def test_settings_report_the_opentelemetry_mode(otel_server: ServerProcess) -> None:
    with httpclient.InferenceServerClient(otel_server.http_url) as client:
        settings = client.get_trace_settings()
    assert settings["trace_mode"] == "opentelemetry"
    assert "trace_file" not in settings and "log_frequency" not in settings
    assert settings["resource"] == ["test.key=test.value", "service.name=test_triton"]
    assert settings["bsp_schedule_delay"] == "50"
    assert settings["bsp_max_queue_size"] == "2048"


def test_rate_zero_traces_only_requests_with_a_context(
    receiver: OtlpReceiver, tmp_path: Path
) -> None:
    repository = build_repository(tmp_path / "models")
    flags = []
    for setting in ("mode=opentelemetry", "rate=0", "level=TIMESTAMPS"):
        flags += ["--trace-config", setting]
    flags += ["--trace-config", f"opentelemetry,url={receiver.url}"]
    flags += ["--trace-config", "opentelemetry,bsp_schedule_delay=50"]
    with ServerProcess([repository], *flags) as process:
        process.wait_ready()
        with httpclient.InferenceServerClient(process.http_url) as client:
            client.infer("simple", inputs(httpclient), request_id="untraced")
            client.infer(
                "simple", inputs(httpclient), headers={"traceparent": TRACEPARENT}, request_id="c"
            )
        spans = receiver.take(3)
        assert process.stop() == 0
    requests = [span["attributes"].get("triton.request_id") for span in spans]
    assert [request for request in requests if request] == ["c"]
    assert receiver.spans == []
    assert np.all([span["trace_id"] == TRACEPARENT.split("-")[1] for span in spans])
