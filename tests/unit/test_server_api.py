"""The frontends' one server protocol: the real Server and the tests' fake both implement it."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from tests.fake_server import FakeModel, FakeServer
from triton_core.backends.services import ModelServices
from triton_core.errors import Status, TritonError
from triton_core.frontends.server_api import ServerAPI
from triton_core.server.core import Server
from triton_core.types import TensorMetadata

PROTOCOL_METHODS = sorted(
    name
    for name, member in vars(ServerAPI).items()
    if callable(member) and not name.startswith("_")
)


def incompatibilities(
    protocol: Callable[..., Any], implementation: Callable[..., Any]
) -> list[str]:
    """How ``implementation`` cannot be called as ``protocol`` says (empty: it can).

    Each parameter of the protocol must be there with the same name, kind and default; the
    implementation may add only parameters with defaults; both are coroutines or neither.
    """
    wanted = inspect.signature(protocol).parameters
    given = inspect.signature(implementation).parameters
    problems = []
    for name, parameter in wanted.items():
        actual = given.get(name)
        if actual is None:
            problems.append(f"no parameter '{name}'")
        elif actual.kind != parameter.kind or actual.default != parameter.default:
            problems.append(f"'{name}' is {actual}, the protocol says {parameter}")
    for name, actual in given.items():
        if name not in wanted and actual.default is inspect.Parameter.empty:
            problems.append(f"'{name}' has no default")
    if inspect.iscoroutinefunction(protocol) != inspect.iscoroutinefunction(implementation):
        problems.append("async in one and not the other")
    return problems


def test_the_protocol_lists_what_the_frontends_call():
    called = {"infer", "submit", "infer_stream", "model_config_json", "check_client_shm"}
    # the OpenAI frontend reads multi_lora.json in the version folder
    assert called | {"model_version_path"} <= set(PROTOCOL_METHODS)


@pytest.mark.parametrize("implementation", [Server, FakeServer], ids=["Server", "FakeServer"])
@pytest.mark.parametrize("name", PROTOCOL_METHODS)
def test_every_protocol_method_is_implemented_with_a_compatible_signature(implementation, name):
    method = getattr(implementation, name, None)
    assert method is not None, f"{implementation.__name__} has no {name}()"
    problems = incompatibilities(getattr(ServerAPI, name), method)
    assert not problems, f"{implementation.__name__}.{name}: " + "; ".join(problems)


def test_the_check_finds_a_missing_parameter_a_changed_default_and_a_lost_async():
    def protocol(self, name: str, version: int = -1) -> None: ...

    async def async_protocol(self) -> None: ...

    def missing(self, name: str) -> None: ...

    def changed(self, name: str, version: int = 0) -> None: ...

    def extra(self, name: str, version: int, other: int) -> None: ...

    def extended(self, name: str, version: int = -1, *, nested: bool = False) -> None: ...

    assert incompatibilities(protocol, missing) == ["no parameter 'version'"]
    assert len(incompatibilities(protocol, changed)) == 1
    assert len(incompatibilities(protocol, extra)) == 2
    assert incompatibilities(protocol, extended) == []
    assert incompatibilities(async_protocol, lambda self: None) == [
        "async in one and not the other"
    ]


def _fake() -> FakeServer:
    tensor = TensorMetadata("x", "FP32", (-1, 4))
    return FakeServer([FakeModel("m", (tensor,), (tensor,), versions=(1, 2), ready={1})])


def test_the_fake_refuses_unknown_models_and_versions_in_the_real_servers_words():
    fake = _fake()
    with pytest.raises(TritonError) as unknown:
        fake.model_metadata("nope")
    assert unknown.value.status is Status.INVALID_ARG
    assert unknown.value.message == "Request for unknown model: 'nope' is not found"
    with pytest.raises(TritonError, match="'m' version 3 is not found"):
        fake.model_config("m", 3)
    with pytest.raises(TritonError, match="requested model version is not available"):
        fake.statistics("m", 2)


def test_the_fake_gives_a_version_folder_only_for_a_model_in_a_local_folder(tmp_path):
    fake = _fake()
    assert fake.model_version_path("m") is None
    fake.models["m"].folder = tmp_path / "m"
    assert fake.model_version_path("m") == tmp_path / "m" / "1"
    assert fake.model_version_path("m", 2) == tmp_path / "m" / "2"


def test_the_fake_serves_a_real_config_and_metadata_that_agree():
    fake = _fake()
    config = fake.model_config_json("m")
    assert config["max_batch_size"] == 8
    assert config["input"][0]["dims"] == [4]
    metadata = fake.model_metadata("m")
    assert metadata.versions == ("1",)
    assert metadata.inputs[0].shape == (-1, 4)
    assert fake.model_ready("m", 1) and not fake.model_ready("m", 2)


SERVICES_METHODS = sorted(
    name
    for name, member in vars(ModelServices).items()
    if callable(member) and not name.startswith("_")
)


def test_model_services_list_what_backends_and_schedulers_call():
    assert SERVICES_METHODS == [
        "infer",
        "infer_stream",
        "load_model",
        "model_ready",
        "unload_model",
    ]


@pytest.mark.parametrize("name", SERVICES_METHODS)
def test_the_server_offers_every_model_service_with_a_compatible_signature(name):
    method = getattr(Server, name, None)
    assert method is not None, f"Server has no {name}()"
    problems = incompatibilities(getattr(ModelServices, name), method)
    assert not problems, f"Server.{name}: {problems}"


def test_the_server_counts_the_requests_in_flight_that_model_services_promise():
    for name in ("requests_in_flight", "nested_requests_in_flight"):
        assert isinstance(getattr(ModelServices, name), property), name
        assert isinstance(getattr(Server, name), property), name
