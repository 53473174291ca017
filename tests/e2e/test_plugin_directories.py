"""``--backend-directory``, ``--repoagent-directory``, ``--cache-directory``: the Python
modules and packages of a folder are registered as plugins, on a real server."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support import (
    ServerProcess,
    refused_start_log,
    serve_until_done,
    write_numpy_model,
)

#: a plugin module that is the numpy test backend under another name (a module of the folder)
BACKEND_MODULE = "from tests.plugins.numpy_backend import triton_register_backends  # noqa\n"
#: a plugin package: the recording repository agents of the tests
AGENT_PACKAGE = "from tests.plugins.agent_plugin import triton_register_repository_agents  # noqa\n"


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("plugin_directories")
    backends, agents = root / "backends", root / "repoagents"
    backends.mkdir()
    (backends / "folder_numpy.py").write_text(BACKEND_MODULE)
    (backends / "broken_module.py").write_text("raise ImportError('this plugin cannot load')\n")
    (backends / "_private.py").write_text("raise AssertionError('never imported')\n")
    (backends / "notes.txt").write_text("not a module\n")
    (agents / "folder_agents").mkdir(parents=True)
    (agents / "folder_agents" / "__init__.py").write_text(AGENT_PACKAGE)
    repo = root / "models"
    write_numpy_model(
        repo,
        "watched",
        extra=f'model_repository_agents {{ agents [ {{ name: "recorder_a" parameters '
        f'{{ key: "log" value: "{root / "agent.log"}" }} }} ] }}',
    )
    return {"root": root, "backends": backends, "agents": agents, "repo": repo}


@pytest.fixture(scope="module")
def server(folders: dict[str, Path]) -> Iterator[ServerProcess]:
    process = ServerProcess(
        [folders["repo"]],
        "--backend-directory", str(folders["backends"]),
        "--repoagent-directory", str(folders["agents"]),
    )  # fmt: skip
    yield from serve_until_done(process)


def test_modules_and_packages_of_the_folders_are_plugins(
    server: ServerProcess, folders: dict[str, Path]
) -> None:
    client = httpclient.InferenceServerClient(server.http_url)
    try:
        # the backend comes from a module of --backend-directory ...
        inputs = []
        data = np.arange(8, dtype=np.int32).reshape(2, 4)
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [2, 4], "INT32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        np.testing.assert_array_equal(client.infer("watched", inputs).as_numpy("OUTPUT0"), data)
    finally:
        client.close()
    # ... and its repository agent from a package of --repoagent-directory
    assert "A LOAD watched" in (folders["root"] / "agent.log").read_text()
    log = server.log()
    assert "registered plugin 'folder_numpy' from --backend-directory" in log
    assert "registered plugin 'folder_agents' from --repoagent-directory" in log


def test_a_module_that_fails_to_import_is_named(server: ServerProcess) -> None:
    log = server.log()
    assert "plugin 'broken_module' (--backend-directory" in log
    assert "broken_module.py) failed to import: ImportError: this plugin cannot load" in log
    assert "_private" not in log


def test_a_path_given_that_is_not_a_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a_file").write_text("")
    log = refused_start_log([tmp_path], "--cache-directory", str(tmp_path / "a_file"))
    assert f"--cache-directory: '{tmp_path / 'a_file'}' is not a directory" in log


@pytest.mark.parametrize(
    ("flag", "folder"),
    [
        ("--backend-directory", "/opt/tritonserver/backends"),
        ("--repoagent-directory", "/opt/tritonserver/repoagents"),
        ("--backend-directory", "absent-backends"),
    ],
)
def test_an_absent_folder_given_is_named_once_and_skipped(
    tmp_path: Path, flag: str, folder: str
) -> None:
    # a typical Triton command line names Triton's folders; Triton starts without them
    absent = tmp_path / folder if not folder.startswith("/") else Path(folder)
    assert not absent.exists()
    with ServerProcess([tmp_path], f"{flag}={absent}") as process:
        process.wait_ready(path="/v2/health/live")
        assert process.process.poll() is None
        line = f"{flag}: '{absent}' does not exist; plugins are found through their entry points"
        assert process.log().count(line) == 1
