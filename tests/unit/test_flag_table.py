"""The flag table (triton_core/flags): each row's value lands in a real option field, every
option field comes from a flag, and the defaults of the table are those of the options."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Callable
from pathlib import Path

import pytest

from triton_core.cli import build_parser
from triton_core.flags import docs
from triton_core.flags.build import (
    RunOptions,
    ServeOptions,
    converters,
    log_settings,
    serve_flags,
    serve_options,
)
from triton_core.flags.model import OWNERS, Flag, Triton
from triton_core.frontends.options import FrontendOptions
from triton_core.observability.logsettings import LogSettings
from triton_core.server.core import ServerOptions

OPTIONS = {
    "log": LogSettings,
    "server": ServerOptions,
    "frontends": FrontendOptions,
    "run": RunOptions,
}
#: fields no flag sets: the server in-process, or the --workers supervisor, sets them
NOT_FLAGS = {
    "server.repository_cache_dir",
    "frontends.reuse_port",
    "frontends.metrics_app_factory",
}


def parse(*flags: str) -> argparse.Namespace:
    return build_parser(environ={}).parse_args(["serve", "--model-repository", "/m", *flags])


def fields_of(owner: str) -> set[str]:
    return {field.name for field in dataclasses.fields(OPTIONS[owner])}


def test_each_name_is_one_flag() -> None:
    names = [name for flag in serve_flags() for name in flag.names]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("flag", [f for f in serve_flags() if f.field], ids=lambda f: f.name)
def test_a_flag_into_a_field_names_a_real_one(flag: Flag) -> None:
    assert flag.field is not None
    owner, field = flag.field
    assert owner in OWNERS and field in fields_of(owner), flag.into


def test_every_option_field_comes_from_a_flag() -> None:
    parse_flags = parse()
    written = {
        f"{owner}.{field}" for flag in serve_flags() if flag.field for owner, field in [flag.field]
    }
    for converter in converters():
        written |= set(converter.build(parse_flags))
    expected = {f"{owner}.{field}" for owner in OWNERS for field in fields_of(owner)}
    assert written <= expected, written - expected
    assert expected - written == NOT_FLAGS


def test_the_defaults_of_the_table_are_those_of_the_options() -> None:
    options = serve_options(parse())
    assert options.log == LogSettings()
    assert options.run == RunOptions()
    defaults = FrontendOptions()
    for field in ("metrics", "sagemaker", "vertex_ai", "grpc_limits", "http_tls", "grpc_tls"):
        assert getattr(options.frontends, field) == getattr(defaults, field), field
    direct = {flag.field for flag in serve_flags() if flag.field}
    for owner, field in direct:
        default = OPTIONS[owner].__dataclass_fields__[field].default
        if default is not dataclasses.MISSING:
            got = getattr(getattr(options, owner), field)
            assert got == default, f"{owner}.{field}: {got!r} != {default!r}"


def test_the_options_hold_what_the_flags_say() -> None:
    options: ServeOptions = serve_options(
        parse(
            "--id", "me", "--http-port", "1", "--metrics-config", "histogram_latencies=true",
            "--strict-model-config", "--cache-config", "local,size=10", "--workers", "2",
            "--grpc-use-ssl", "--log-verbose", "2",
        )
    )  # fmt: skip
    assert (options.server.id, options.frontends.http_port) == ("me", 1)
    assert options.server.latency_buckets_ms is not None
    assert options.server.auto_complete_config is False
    assert options.server.cache == ("local", {"size": "10"})
    assert options.run.workers == "2"
    assert options.frontends.grpc_tls.use_ssl is True
    assert options.log.verbose == 2 == log_settings(parse("--log-verbose", "2")).verbose


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--inline-execution-budget-us", "-1"], "--inline-execution-budget-us must not be"),
        (["--memory-trim-threshold", "-1"], "--memory-trim-threshold must not be negative"),
        (["--cache-config", "a,x=1", "--cache-config", "b,y=2"], "must name one cache"),
        (["--grpc-transport", "grpcio", "--grpc-infer-thread-count", "4"], "http2 only"),
    ],
)
def test_a_converter_refuses_what_cannot_work(flags: list[str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        serve_options(parse(*flags))


def test_a_gpu_flag_says_once_it_has_no_effect(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="triton_core"):
        serve_options(parse("--enable-peer-access", "--model-load-gpu-limit", "0:0.5"))
    lines = [r.getMessage() for r in caplog.records if "has no effect here" in r.getMessage()]
    assert [line.split()[0] for line in lines] == ["--model-load-gpu-limit", "--enable-peer-access"]


def test_a_status_other_than_works_must_say_why() -> None:
    with pytest.raises(ValueError, match="must say why"):
        Triton("partly")
    with pytest.raises(ValueError, match="unknown status"):
        Triton("maybe", "x")


def test_the_environment_sets_defaults() -> None:
    environ = {"AIP_MODE": "PREDICTION", "AIP_HTTP_PORT": "7070"}
    args = build_parser(environ=environ).parse_args(["serve", "--model-repository", "/m"])
    assert (args.allow_http, args.allow_grpc, args.allow_vertex_ai) == (False, False, True)
    assert args.vertex_ai_port == 7070


@pytest.mark.parametrize(
    ("doc", "name", "make"), docs.GENERATED, ids=[name for _, name, _ in docs.GENERATED]
)
def test_each_table_made_from_the_flags_is_in_its_doc(
    doc: Path, name: str, make: Callable[[], list[str]]
) -> None:
    assert docs.between_markers(doc.read_text(), name) == make(), (
        f"{doc.name} differs from the flag table (triton_core/flags/table.py): "
        "run python -m triton_core.flags --update-docs"
    )


def test_update_docs_writes_the_rows_between_the_markers() -> None:
    begin, end = docs.markers("t")
    text = f"before\n{begin}\nold\n{end}\nafter\n"
    assert docs.with_rows(text, "t", ["a", "b"]) == f"before\n{begin}\na\nb\n{end}\nafter\n"
