"""How ``serve`` parses tritonserver's flags: Triton's forms accepted, malformed values refused
naming the flag."""

from __future__ import annotations

import argparse

import pytest

from triton_core.cli import build_parser


def parse(*flags: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", "--model-repository", "/models", *flags])


@pytest.mark.parametrize(
    ("flags", "field", "value"),
    [
        (["--log-verbose", "true"], "log_verbose", 1),
        (["--log-verbose=false"], "log_verbose", 0),
        (["--log-verbose", "2"], "log_verbose", 2),
        (["--log-warning", "off"], "log_warning", False),
        (
            ["--grpc-infer-response-compression-level", "HIGH"],
            "grpc_infer_response_compression_level",
            "high",
        ),
        (["--cuda-memory-pool-byte-size", "0:1024"], "cuda_memory_pool_byte_size", [(0, 1024)]),
        (["--model-load-gpu-limit", "1:0.5"], "model_load_gpu_limit", [(1, 0.5)]),
        (["--host-policy", "gpu0,cpu-cores=0-3"], "host_policy", [("gpu0", "cpu-cores", "0-3")]),
        (["--metrics-interval-ms", "500.5"], "metrics_interval_ms", 500.5),
        (["--model-config-name="], "model_config_name", ""),
        # Triton lowercases these (its QA passes --model-control-mode=EXPLICIT)
        (["--model-control-mode=EXPLICIT"], "model_control_mode", "explicit"),
        (["--rate-limit", "EXECUTION_COUNT"], "rate_limit", "execution_count"),
    ],
)  # fmt: skip
def test_tritons_forms_parse(flags: list[str], field: str, value: object) -> None:
    assert getattr(parse(*flags), field) == value


def test_header_patterns_match_case_insensitively_anywhere() -> None:
    pattern = parse("--http-header-forward-pattern", "tenant").http_header_forward_pattern
    assert pattern.search("X-TENANT-id") and not pattern.search("x-other")


def test_defaults_are_tritons() -> None:
    args = parse()
    assert (args.log_format, args.log_file, args.log_warning, args.log_error) == (
        "default",
        "",
        True,
        True,
    )
    assert (args.model_load_retry_count, args.model_namespacing) == (0, False)
    # not given: Triton's /opt/tritonserver/{backends,repoagents,caches}, where they exist
    assert (args.backend_directory, args.repoagent_directory, args.cache_directory) == (
        None,
        None,
        None,
    )
    assert (args.reuse_http_port, args.reuse_grpc_port) == (False, False)
    assert args.grpc_infer_response_compression_level == "none"
    assert args.metrics_interval_ms == 2000.0
    assert args.http_thread_count is None  # given or not: only a given one is named at start


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--log-format", "xml"], "argument --log-format: invalid argument for --log-format"),
        (["--log-verbose", "-1"], "argument --log-verbose: must be at least 0"),
        (["--grpc-infer-response-compression-level", "max"], "invalid argument for"),
        (["--cuda-memory-pool-byte-size", "1024"], "Cannot parse pair option"),
        (["--host-policy", "gpu0,threads=4"], "Unsupported host policy setting 'threads'"),
        (["--http-header-forward-pattern", "("], "invalid regular expression"),
        (["--http-thread-count", "many"], "argument --http-thread-count: Invalid option value"),
        (["--metrics-interval-ms", "nan"], "argument --metrics-interval-ms"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    ],
)
def test_malformed_values_are_refused_naming_the_flag(
    flags: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        parse(*flags)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
