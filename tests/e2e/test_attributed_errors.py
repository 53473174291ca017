"""A plugin that cannot be imported, with the real ``triton-core`` commands.

A distribution on ``PYTHONPATH`` whose entry point fails to import: ``serve`` starts, says
which plugin failed and how to leave it out, and serves every model that does not need it;
``triton-core plugins`` lists it as broken instead of crashing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from tests.support import ROOT, ServerProcess, write_broken_distribution, write_numpy_model


def env_with(site) -> dict[str, str]:  # type: ignore[no-untyped-def]
    path = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH", "")]))
    return {"PYTHONPATH": path, "TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}


def test_serve_reports_the_broken_plugin_and_serves_the_other_models(tmp_path) -> None:
    site = write_broken_distribution(tmp_path / "site")
    repo = tmp_path / "models"
    write_numpy_model(repo, "fine")
    write_numpy_model(repo, "needs_broken")
    config = repo / "needs_broken" / "config.pbtxt"
    config.write_text(config.read_text().replace('backend: "numpy"', 'backend: "brokenbackend"'))
    args = ("--exit-on-error=false", "--strict-readiness=false")
    with ServerProcess([repo], *args, env=env_with(site)) as server:
        server.wait_ready()
        client = httpclient.InferenceServerClient(server.http_url)
        data = np.arange(4, dtype=np.int32).reshape(1, 4)
        inputs = []
        for name in ("INPUT0", "INPUT1"):
            tensor = httpclient.InferInput(name, [1, 4], "INT32")
            tensor.set_data_from_numpy(data)
            inputs.append(tensor)
        np.testing.assert_array_equal(client.infer("fine", inputs).as_numpy("OUTPUT0"), data)
        index_url = f"http://{server.http_url}/v2/repository/index"
        request = urllib.request.Request(index_url, data=b"{}", method="POST")
        with urllib.request.urlopen(request, timeout=10) as reply:
            index = {entry["name"]: entry for entry in json.load(reply)}
        assert index["needs_broken"]["state"] == "UNAVAILABLE"
        assert "failed to import and may provide it: broken:" in index["needs_broken"]["reason"]
        log = server.log()
    assert "plugin 'broken' (triton-core-broken 0.3, entry point broken_plugin_module)" in log
    assert "failed to import: ModuleNotFoundError" in log
    assert "--disable-plugin broken" in log


def test_the_plugins_command_lists_the_broken_plugin(tmp_path) -> None:
    site = write_broken_distribution(tmp_path / "site")
    result = subprocess.run(
        [sys.executable, "-m", "triton_core", "plugins"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
        env={**os.environ, **env_with(site)},
    )
    assert result.returncode == 0, result.stderr
    [row] = [line for line in result.stdout.splitlines() if line.startswith("broken ")]
    assert "BROKEN: triton-core-broken 0.3, entry point broken_plugin_module" in row
    assert "ModuleNotFoundError" in row
    [env_row] = [line for line in result.stdout.splitlines() if "numpy_backend" in line]
    assert "TRITON_CORE_PLUGINS" in env_row and "backend:numpy" in env_row
    # the broken plugin is not one the user disabled
    assert "disabled:" not in result.stdout
