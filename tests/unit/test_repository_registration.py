"""Repositories registered while serving (Triton's RegisterModelRepository), with subfolders
served under mapped names: what SageMaker's multi-model endpoint loads through."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support import numpy_server, write_numpy_model
from triton_core.errors import Status, TritonError


def archive(root: Path, folder: str = "model") -> Path:
    """A folder holding one model in ``folder``, its config naming it after the folder."""
    write_numpy_model(root, folder, extra=f'name: "{folder}"')
    write_numpy_model(root, "plain")
    return root


async def test_a_mapped_folder_serves_under_its_mapped_name(tmp_path: Path) -> None:
    registered = archive(tmp_path / "registered")
    (tmp_path / "base").mkdir()
    async with numpy_server(tmp_path / "base", model_control_mode="explicit") as server:
        server.register_model_repository(str(registered), {"target": "model"})
        await server.load_model("target")
        assert server.model_ready("target")
        assert server.model_config_json("target")["name"] == "target"
        # the other folders of the repository keep their names; the mapped one has only its new
        await server.load_model("plain")
        with pytest.raises(TritonError, match="failed to load 'model', failed to poll"):
            await server.load_model("model")

        await server.unload_model("target")
        server.unregister_model_repository(str(registered))
        with pytest.raises(TritonError, match="failed to load 'target', failed to poll"):
            await server.load_model("target")
        assert server.model_ready("plain")  # loaded models stay until unloaded


async def test_registration_refuses_what_triton_refuses(tmp_path: Path) -> None:
    first, second = archive(tmp_path / "first"), archive(tmp_path / "second")
    (tmp_path / "base").mkdir()
    async with numpy_server(tmp_path / "base", model_control_mode="explicit") as server:
        server.register_model_repository(str(first), {"target": "model"})
        with pytest.raises(TritonError) as raised:
            server.register_model_repository(str(first))
        assert raised.value.status is Status.ALREADY_EXISTS
        assert raised.value.message == f"model repository '{first}' has already been registered"
        with pytest.raises(TritonError) as raised:
            server.register_model_repository(str(second), {"target": "model"})
        assert raised.value.status is Status.ALREADY_EXISTS
        assert raised.value.message == (
            "failed to register 'target', there is a conflicting mapping for 'target'"
        )
        missing = str(tmp_path / "missing")
        with pytest.raises(TritonError, match=f"failed to register '{missing}', repository not"):
            server.register_model_repository(missing)
        with pytest.raises(TritonError, match=f"failed to unregister '{missing}', repository"):
            server.unregister_model_repository(missing)


async def test_registration_needs_explicit_mode(tmp_path: Path) -> None:
    registered = archive(tmp_path / "registered")
    async with numpy_server(registered) as server:
        with pytest.raises(TritonError) as raised:
            server.register_model_repository(str(registered))
        assert raised.value.status is Status.UNSUPPORTED
        assert "model control mode is not EXPLICIT" in raised.value.message
