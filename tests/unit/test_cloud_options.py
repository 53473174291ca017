"""The SageMaker and Vertex AI flags, environment variables and port rule, and the binary
header size these endpoints read from a Content-Type."""

from __future__ import annotations

import argparse

import pytest

from triton_core.errors import TritonError
from triton_core.frontends import cloud
from triton_core.frontends.cloud import Endpoint, check_port_collisions
from triton_core.frontends.http.cloud import header_size_from_mime
from triton_core.frontends.http.sagemaker import BINARY_MIME
from triton_core.frontends.http.sagemaker_mme import is_out_of_memory


def parse(argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    from triton_core.cli import build_parser

    return build_parser(environ=environ).parse_args(["serve", *argv])


def test_the_defaults_are_tritonservers() -> None:
    args = parse(["--model-repository", "m"], {})
    sagemaker, vertex_ai = cloud.options_from(args, {})
    assert (sagemaker.allow, sagemaker.port, sagemaker.safe_port_range) == (False, 8080, None)
    assert sagemaker.default_model == "unspecified_SAGEMAKER_TRITON_DEFAULT_MODEL_NAME"
    assert (sagemaker.ping_mode, sagemaker.inference_type) == ("ready", "infer")
    assert (vertex_ai.allow, vertex_ai.port, vertex_ai.default_model) == (False, 8080, "")
    assert (args.allow_http, args.allow_grpc) == (True, True)


def test_the_flags_parse_in_tritonservers_syntax() -> None:
    args = parse(
        [
            "--model-repository", "m",
            "--allow-sagemaker=true", "--sagemaker-port", "9090",
            "--sagemaker-safe-port-range", "9000-9100", "--sagemaker-thread-count", "4",
            "--allow-vertex-ai", "true", "--vertex-ai-port", "9091",
            "--vertex-ai-default-model", "simple", "--vertex-ai-thread-count", "2",
        ],
        {"AIP_PREDICT_ROUTE": "/p", "AIP_HEALTH_ROUTE": "/h"},
    )  # fmt: skip
    sagemaker, vertex_ai = cloud.options_from(
        args, {"AIP_PREDICT_ROUTE": "/p", "AIP_HEALTH_ROUTE": "/h"}
    )
    assert (sagemaker.allow, sagemaker.port, sagemaker.safe_port_range) == (
        True,
        9090,
        (9000, 9100),
    )
    assert sagemaker.thread_count == 4
    assert (vertex_ai.allow, vertex_ai.port, vertex_ai.default_model) == (True, 9091, "simple")
    assert vertex_ai.thread_count == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--sagemaker-safe-port-range", "9000"],
        ["--sagemaker-safe-port-range", "a-b"],
        ["--sagemaker-safe-port-range", "9100-9000"],
        ["--sagemaker-port", "70000"],
        ["--vertex-ai-thread-count", "0"],
    ],
)
def test_bad_flag_values_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        parse(["--model-repository", "m", *argv], {})


def test_prediction_mode_turns_vertex_ai_on_and_http_and_grpc_off() -> None:
    environ = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "7070", "AIP_STORAGE_URI": "gs://b/m"}
    args = parse([], environ)
    assert (args.allow_vertex_ai, args.allow_http, args.allow_grpc) == (True, False, False)
    assert args.vertex_ai_port == 7070
    assert cloud.model_repositories(args.model_repository, environ) == ["gs://b/m"]
    assert cloud.model_repositories(["local"], environ) == ["local"]
    # flags still win over the environment
    args = parse(["--allow-http=true", "--vertex-ai-port", "1"], environ)
    assert (args.allow_http, args.vertex_ai_port) == (True, 1)


def test_without_aip_storage_uri_a_repository_is_required() -> None:
    with pytest.raises(SystemExit):
        parse([], {})
    with pytest.raises(ValueError, match="--model-repository"):
        cloud.model_repositories(None, {})


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"SAGEMAKER_TRITON_PING_MODE": "sometimes"}, "SAGEMAKER_TRITON_PING_MODE"),
        (
            {"SAGEMAKER_TRITON_INFERENCE_TYPE": "classify"},
            "Invalid SAGEMAKER_TRITON_INFERENCE_TYPE 'classify'. Must be one of: infer, "
            "generate, generate_stream.",
        ),
    ],
)
def test_bad_sagemaker_environment_values_are_refused(
    environ: dict[str, str], message: str
) -> None:
    args = parse(["--model-repository", "m"], environ)
    with pytest.raises(ValueError) as raised:
        cloud.options_from(args, environ)
    assert message in str(raised.value)


def test_the_sagemaker_environment_is_read() -> None:
    environ = {
        "SAGEMAKER_TRITON_DEFAULT_MODEL_NAME": "m1",
        "SAGEMAKER_TRITON_PING_MODE": "live",
        "SAGEMAKER_TRITON_INFERENCE_TYPE": "generate_stream",
    }
    sagemaker, _ = cloud.options_from(parse(["--model-repository", "m"], environ), environ)
    assert (sagemaker.default_model, sagemaker.ping_mode) == ("m1", "live")
    assert sagemaker.inference_type == "generate_stream"


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"AIP_HEALTH_ROUTE": "/h"}, "API_PREDICT_ROUTE is not defined for Vertex AI endpoint"),
        ({"AIP_PREDICT_ROUTE": "/p"}, "AIP_HEALTH_ROUTE is not defined for Vertex AI endpoint"),
        (
            {"AIP_PREDICT_ROUTE": "/p(", "AIP_HEALTH_ROUTE": "/h"},
            "AIP_PREDICT_ROUTE '/p(' is not a valid regular expression",
        ),
    ],
)
def test_vertex_ai_routes_are_required_and_checked(environ: dict[str, str], message: str) -> None:
    args = parse(["--model-repository", "m", "--allow-vertex-ai"], environ)
    with pytest.raises(ValueError) as raised:
        cloud.options_from(args, environ)
    assert message in str(raised.value)


# ------------------------------------------------------------------------------------------
# ports


def test_endpoints_on_one_address_and_port_collide() -> None:
    with pytest.raises(ValueError) as raised:
        check_port_collisions(
            [Endpoint("HTTP", "0.0.0.0", 8080), Endpoint("SageMaker", "0.0.0.0", 8080)]
        )
    assert str(raised.value) == (
        "The server cannot listen to HTTP requests and SageMaker requests at the same address "
        "and port 0.0.0.0:8080"
    )


def test_a_wildcard_address_overlaps_every_address() -> None:
    with pytest.raises(ValueError, match="HTTP requests and Vertex AI requests"):
        check_port_collisions(
            [Endpoint("HTTP", "127.0.0.1", 8080), Endpoint("Vertex AI", "0.0.0.0", 8080)]
        )


def test_distinct_addresses_or_ports_or_port_zero_do_not_collide() -> None:
    check_port_collisions(
        [
            Endpoint("HTTP", "127.0.0.1", 8080),
            Endpoint("GRPC", "127.0.0.2", 8080),
            Endpoint("metrics", "127.0.0.1", 8002),
            Endpoint("SageMaker", "127.0.0.1", 0),
            Endpoint("Vertex AI", "127.0.0.1", 0),
        ]
    )


def test_the_sagemaker_safe_range_bounds_every_other_endpoint() -> None:
    inside = [
        Endpoint("HTTP", "0.0.0.0", 9001),
        Endpoint("SageMaker", "0.0.0.0", 8080, (9000, 9010)),
        Endpoint("metrics", "0.0.0.0", 9010),
    ]
    check_port_collisions(inside)
    outside = [*inside, Endpoint("GRPC", "0.0.0.0", 8001)]
    with pytest.raises(ValueError) as raised:
        check_port_collisions(outside)
    assert str(raised.value) == (
        "The server cannot listen to GRPC requests at port 8001, allowed port range is [9000, 9010]"
    )


# ------------------------------------------------------------------------------------------
# the binary header's size from a Content-Type


@pytest.mark.parametrize(
    ("content_type", "size"),
    [
        (None, None),
        ("application/json", None),
        (f"{BINARY_MIME}12", "12"),
        (f"{BINARY_MIME}0", "0"),
        (f"{BINARY_MIME} 12abc", "12"),  # read as C's stoi reads it
        (f"{BINARY_MIME}+7", "7"),
    ],
)
def test_the_header_size_comes_from_the_mime_type(content_type: str | None, size: str) -> None:
    assert header_size_from_mime(content_type, BINARY_MIME, 100) == size


@pytest.mark.parametrize(
    ("content_type", "message"),
    [
        (f"x;{BINARY_MIME}1", f"expect MIME type for binary data starts with '{BINARY_MIME}'"),
        (f"{BINARY_MIME}", "Unable to parse inference header size, got: "),
        (f"{BINARY_MIME}x1", "Unable to parse inference header size, got: x1"),
        (f"{BINARY_MIME}2147483648", "value is out of range, got: 2147483648"),
        (f"{BINARY_MIME}{'9' * 5000}", "value is out of range"),
        (f"{BINARY_MIME}-1", "inference header size should be in range (0, 100), got: -1"),
        (f"{BINARY_MIME}101", "inference header size should be in range (0, 100), got: 101"),
    ],
)
def test_bad_header_sizes_are_refused_in_tritons_words(content_type: str, message: str) -> None:
    with pytest.raises(TritonError) as raised:
        header_size_from_mime(content_type, BINARY_MIME, 100)
    assert raised.value.status.http_status == 400
    assert message in raised.value.message


def test_out_of_memory_is_found_as_triton_finds_it() -> None:
    assert is_out_of_memory("RuntimeError: CUDA out of memory. Tried to allocate")
    assert is_out_of_memory("std::bad_alloc: Failed to allocate memory")
    assert not is_out_of_memory("input 'X' has the wrong shape")
