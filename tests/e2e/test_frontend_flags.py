"""Frontend flags on real servers: ``--reuse-http-port``/``--reuse-grpc-port``, header
forwarding into a Python model's request parameters, gzipped gRPC answers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, refused_start_log, serve_until_done

pytest.importorskip("triton_core_python")

#: answers with its request's parameters as a JSON string
PARAMETERS_MODEL = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            text = np.array([request.parameters().encode()], dtype=np.object_)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("PARAMETERS", text)]))
        return responses
"""
PARAMETERS_CONFIG = """
backend: "python"
input [ { name: "IN" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "PARAMETERS" data_type: TYPE_STRING dims: [ 1 ] } ]
"""


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("frontend_flags")
    model = root / "parameters"
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(dedent(PARAMETERS_MODEL))
    (model / "config.pbtxt").write_text(PARAMETERS_CONFIG)
    return root


def _http_parameters(url: str, headers: dict[str, str]) -> dict[str, object]:
    client = httpclient.InferenceServerClient(url)
    try:
        tensor = httpclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        result = client.infer("parameters", [tensor], headers=headers)
        return json.loads(result.as_numpy("PARAMETERS")[0])
    finally:
        client.close()


def _grpc_parameters(url: str, headers: dict[str, str], stream: bool = False) -> dict[str, object]:
    client = grpcclient.InferenceServerClient(url)
    try:
        tensor = grpcclient.InferInput("IN", [1], "FP32")
        tensor.set_data_from_numpy(np.zeros(1, np.float32))
        if not stream:
            result = client.infer("parameters", [tensor], headers=headers)
            return json.loads(result.as_numpy("PARAMETERS")[0])
        results: list[tuple] = []
        client.start_stream(
            callback=lambda result, error: results.append((result, error)), headers=headers
        )
        client.async_stream_infer("parameters", [tensor])
        client.stop_stream()  # waits for the answer
        ((result, error),) = results
        assert error is None, error
        return json.loads(result.as_numpy("PARAMETERS")[0])
    finally:
        client.close()


@pytest.fixture(scope="module")
def forwarding(repository: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        [repository],
        "--http-header-forward-pattern", "^x-tenant",
        "--grpc-header-forward-pattern", "tenant|(^priority$)",
        "--grpc-infer-response-compression-level", "high",
    )  # fmt: skip
    yield from serve_until_done(process)


def test_matching_http_headers_become_request_parameters(forwarding: ServerProcess) -> None:
    parameters = _http_parameters(
        forwarding.http_url, {"X-Tenant-Id": "acme", "x-other": "no", "X-TENANT-zone": "eu"}
    )
    # matched case-insensitively, as Triton's (?i) pattern; names as the server received them
    assert parameters == {"x-tenant-id": "acme", "x-tenant-zone": "eu"}


def test_matching_grpc_metadata_becomes_request_parameters(forwarding: ServerProcess) -> None:
    headers = {"my-tenant": "acme", "other": "no"}
    assert _grpc_parameters(forwarding.grpc_url, headers) == {"my-tenant": "acme"}
    assert _grpc_parameters(forwarding.grpc_url, headers, stream=True) == {"my-tenant": "acme"}


def test_reserved_names_are_refused_with_tritons_message(forwarding: ServerProcess) -> None:
    with pytest.raises(InferenceServerException, match="Header 'priority' is reserved"):
        _grpc_parameters(forwarding.grpc_url, {"priority": "1"})


def test_without_a_pattern_no_header_is_forwarded(repository: Path) -> None:
    with ServerProcess([repository]) as process:
        process.wait_ready()
        assert _http_parameters(process.http_url, {"X-Tenant-Id": "acme"}) == {}
        assert _grpc_parameters(process.grpc_url, {"my-tenant": "acme"}) == {}


@pytest.mark.parametrize("transport", ["http2", "grpcio"])
def test_stock_client_reads_compressed_answers(repository: Path, transport: str) -> None:
    """The wire format is checked frame by frame in tests/unit/test_grpc_compression.py."""
    with ServerProcess(
        [repository],
        "--grpc-transport", transport,
        "--grpc-infer-response-compression-level", "medium",
    ) as process:  # fmt: skip
        process.wait_ready()
        assert _grpc_parameters(process.grpc_url, {}) == {}


def test_two_servers_share_ports_with_reuse_port(repository: Path) -> None:
    reuse = ("--reuse-http-port", "true", "--reuse-grpc-port=true")
    # the first binds ports of the system's choosing (no race for a free one); the second
    # binds the same ones
    first = ServerProcess([repository], *reuse)
    second = None
    try:
        first.wait_ready()
        http_port, grpc_port = first.http_port, first.grpc_port
        flags = ("--http-port", str(http_port), "--grpc-port", str(grpc_port), *reuse)
        second = ServerProcess([repository], *flags)
        second.wait_ready()
        assert first.http_port == second.http_port == http_port
        assert first.grpc_port == second.grpc_port == grpc_port
        assert first.stop() == 0, first.log()[-4000:]
        # the port still answers: the second server listens on it too
        url = f"127.0.0.1:{http_port}"
        assert _http_parameters(url, {}) == {}
        assert _grpc_parameters(f"127.0.0.1:{grpc_port}", {}) == {}
    finally:
        first.stop()
        if second is not None:
            assert second.stop() == 0, second.log()[-4000:]


def test_without_reuse_port_a_taken_port_is_an_error(repository: Path) -> None:
    with ServerProcess([repository]) as first:
        first.wait_ready()
        second = ServerProcess([repository], "--http-port", str(first.http_port))
        assert second.process.wait(timeout=60) != 0
        second.stop()
        assert "failed to bind the HTTP endpoint" in second.log()


def test_header_patterns_take_re2_syntax_with_tritons_case_rule(repository: Path) -> None:
    # Triton's L0_parameters flag: (?-i) turns off the case-insensitive (?i) Triton puts first
    with ServerProcess(
        [repository],
        "--grpc-header-forward-pattern", "(?-i)MY_HEADER.*",
        "--http-header-forward-pattern", "(?-i)x-tenant|(?i:ZONE)",
    ) as process:  # fmt: skip
        process.wait_ready()
        # gRPC metadata names are lower case: a case-sensitive MY_HEADER matches none
        assert _grpc_parameters(process.grpc_url, {"my_header_1": "v", "other": "w"}) == {}
        headers = {"X-Tenant-Id": "acme", "X-Zone": "eu", "X-Region": "no"}
        assert _http_parameters(process.http_url, headers) == {
            "x-tenant-id": "acme",
            "x-zone": "eu",
        }


@pytest.mark.parametrize(
    ("pattern", "words"),
    [("a(?=b)", "invalid perl operator: (?="), ("(\\w)\\1", "invalid escape sequence: \\1")],
)
def test_a_pattern_re2_refuses_stops_the_start_naming_the_flag(
    tmp_path: Path, pattern: str, words: str
) -> None:
    log = refused_start_log([tmp_path], "--grpc-header-forward-pattern", pattern)
    assert "--grpc-header-forward-pattern" in log and words in log
