"""``serve run triton_core.ray:app key=value ...``: the arguments, honoured or refused by name."""

from __future__ import annotations

import pytest

pytest.importorskip("ray.serve")

from ray.serve import Application

from triton_core.ray import app, replica_options


def test_arguments_become_the_replicas_server_options() -> None:
    options = replica_options(
        {
            "model_repository": "/models,s3://bucket/more",
            "id": "replica",
            "strict_readiness": "false",
            "exit_on_error": "true",
            "model_control_mode": "explicit",
            "load_model": "a,b",
            "repository_poll_secs": "2.5",
            "cache_config": "redis,host=127.0.0.1,port=6379",
            "http_max_input_size": "1024",
            "exit_timeout_secs": "7",
        }
    )
    server = options.server
    assert server.model_repositories == ["/models", "s3://bucket/more"]
    assert server.id == "replica"
    assert server.strict_readiness is False and server.exit_on_error is True
    assert server.model_control_mode == "explicit" and server.load_models == ["a", "b"]
    assert server.repository_poll_secs == 2.5
    assert server.cache == ("redis", {"host": "127.0.0.1", "port": "6379"})
    assert options.http_max_input_size == 1024 and options.exit_timeout_secs == 7.0


def test_defaults_are_the_servers() -> None:
    options = replica_options({"model_repository": "/models"})
    assert options.server.model_control_mode == "none" and options.server.cache is None
    assert options.http_max_input_size == 1 << 26 and options.exit_timeout_secs == 30.0
    assert isinstance(app({"model_repository": "/models"}), Application)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ({}, "model_repository"),
        ({"model_repository": "/m", "http_port": "8000"}, "http_port"),
        ({"model_repository": "/m", "strict_readiness": "maybe"}, "strict_readiness"),
        ({"model_repository": "/m", "exit_timeout_secs": "soon"}, "exit_timeout_secs"),
        ({"model_repository": "/m", "exit_timeout_secs": "-1"}, "exit_timeout_secs"),
        ({"model_repository": "/m", "http_max_input_size": "1.5"}, "http_max_input_size"),
        ({"model_repository": "/m", "model_control_mode": "manual"}, "model_control_mode"),
        ({"model_repository": "/m", "cache_config": "redis,host"}, "cache_config"),
        ({"model_repository": "/m", "cache_config": ",host=a"}, "cache_config"),
    ],
)
def test_an_unknown_or_malformed_argument_is_refused_by_name(
    args: dict[str, str], named: str
) -> None:
    with pytest.raises(ValueError, match=named):
        app(args)
