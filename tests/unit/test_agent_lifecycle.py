"""Repository agents across reloads and the server's stop: every version set that heard
LOAD hears LOAD_FAIL, or LOAD_COMPLETE and later UNLOAD then UNLOAD_COMPLETE, once."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from tests.plugins import agent_plugin, numpy_backend
from tests.support import wait_until_async, write_numpy_model
from triton_core.server.core import Server, ServerOptions
from triton_core.testing import inference_request, plugin_manager


def agents_config(log: Path, hang_on: str = "") -> str:
    hang = f'{{ key: "hang_on" value: "{hang_on}" }},' if hang_on else ""
    return f"""model_repository_agents {{ agents [
  {{ name: "recorder_a" parameters [ {hang} {{ key: "log" value: "{log}" }} ] }},
  {{ name: "recorder_b" parameters [ {{ key: "log" value: "{log}" }},
                                     {{ key: "relocate" value: "true" }} ] }}
] }}"""


async def agent_server(
    tmp_path: Path, hang_on: str = "", extra: str = ""
) -> tuple[Server, Path, Path]:
    """A started server with model "m" watched by agents A and B; its agent log; the repo."""
    log = tmp_path / "agents.log"
    repo = tmp_path / "models"
    write_numpy_model(repo, "m", extra=agents_config(log, hang_on) + extra)
    write_numpy_model(repo, "other")
    plugins = plugin_manager([("numpy", numpy_backend), ("agents", agent_plugin)])
    options = ServerOptions([repo], exit_on_error=False)
    server = Server(options, plugins)
    agent_plugin.RELEASE.clear()
    await server.start()
    return server, log, repo


def entries(log: Path) -> list[list[str]]:
    """Each logged line as [label, action, location] (location "" for FINALIZE/marks)."""
    rows = []
    for line in log.read_text().splitlines():
        parts = line.split()
        rows.append([parts[0], parts[1], parts[3] if len(parts) > 3 else ""])
    return rows


def request():
    data = np.ones((1, 4), dtype=np.int32)
    return inference_request("m", {"INPUT0": data, "INPUT1": data})


async def test_a_reload_unloads_the_replaced_set_after_its_requests_drain(tmp_path):
    server, log, _ = await agent_server(tmp_path)
    instance = server.models.get("m").pool.instances[0]
    instance.gate = gate = threading.Event()
    running = asyncio.ensure_future(server.infer(request()))
    assert await asyncio.to_thread(instance.entered.wait, 60)
    await server.models.load("m")  # the reload swaps in a new set while a request runs
    with open(log, "a") as handle:
        handle.write("TEST RELEASE\n")
    gate.set()
    response = await running
    assert response.model_version == 1
    assert await server.stop(grace_seconds=60)

    rows = entries(log)
    actions = [row[:2] for row in rows]
    loads = [["A", "LOAD"], ["B", "LOAD"], ["B", "LOAD_COMPLETE"], ["A", "LOAD_COMPLETE"]]
    assert actions[:8] == loads + loads
    first, second = rows[3][2], rows[7][2]  # where each set's model lives (B relocated it)
    assert first != second
    unloads = [["A", "UNLOAD"], ["B", "UNLOAD"], ["B", "UNLOAD_COMPLETE"], ["A", "UNLOAD_COMPLETE"]]
    assert [row[:2] for row in rows if row[2] == first and "UNLOAD" in row[1]] == unloads
    assert [row[:2] for row in rows if row[2] == second and "UNLOAD" in row[1]] == unloads
    # the old set hears UNLOAD before the reload returns, UNLOAD_COMPLETE after its request
    release = actions.index(["TEST", "RELEASE"])
    assert rows.index(["B", "UNLOAD", first]) < release
    assert rows.index(["B", "UNLOAD_COMPLETE", first]) > release
    assert sorted(map(tuple, actions[-2:])) == [("A", "FINALIZE"), ("B", "FINALIZE")]
    assert actions.count(["A", "FINALIZE"]) == 1


async def test_a_failed_reload_fails_its_own_set_and_the_old_set_unloads_at_stop(tmp_path):
    server, log, repo = await agent_server(tmp_path)
    config = repo / "m" / "config.pbtxt"
    config.write_text(
        config.read_text() + 'parameters { key: "fail_load" value { string_value: "x" } }\n'
    )
    with pytest.raises(Exception, match="told to fail loading 'm'"):
        await server.models.load("m")
    assert server.models.is_ready("m")
    assert (await server.infer(request())).model_version == 1
    assert await server.stop(grace_seconds=60)

    rows = entries(log)
    actions = [row[:2] for row in rows]
    first = rows[3][2]
    assert actions[4:8] == [["A", "LOAD"], ["B", "LOAD"], ["B", "LOAD_FAIL"], ["A", "LOAD_FAIL"]]
    # nothing more for the failed set; the serving set unloads at stop, then finalize
    assert actions[8:12] == [
        ["A", "UNLOAD"], ["B", "UNLOAD"], ["B", "UNLOAD_COMPLETE"], ["A", "UNLOAD_COMPLETE"]
    ]  # fmt: skip
    assert all(row[2] == first for row in rows[8:12])
    assert sorted(map(tuple, actions[12:])) == [("A", "FINALIZE"), ("B", "FINALIZE")]


async def test_a_hung_agent_cannot_hold_the_stop_past_its_deadline(tmp_path):
    server, log, _ = await agent_server(tmp_path, hang_on="UNLOAD")
    began = time.monotonic()
    try:
        assert not await server.stop(grace_seconds=1)
        # a 1 s deadline; the margin absorbs a slow machine
        assert time.monotonic() - began < 20
    finally:
        agent_plugin.RELEASE.set()
    assert ["A", "UNLOAD"] in [row[:2] for row in entries(log)]


async def test_an_agent_hung_at_load_fails_the_load_at_its_timeout_and_hears_load_fail(tmp_path):
    timeout = '\nparameters { key: "load_timeout_secs" value { string_value: "1" } }'
    try:
        server, log, _ = await agent_server(tmp_path, hang_on="LOAD", extra=timeout)
        index = {entry.name: entry for entry in server.models.index()}
        assert index["m"].state == "UNAVAILABLE"
        assert (
            "failed to load 'm': its repository agents and config auto-complete did not "
            "finish within load_timeout_secs=1" in index["m"].reason
        )
        assert server.models.is_ready("other")
    finally:
        agent_plugin.RELEASE.set()
    # the abandoned LOAD goes on once released; its agents then hear LOAD_FAIL, in reverse
    expected = [["A", "LOAD"], ["B", "LOAD"], ["B", "LOAD_FAIL"], ["A", "LOAD_FAIL"]]
    await wait_until_async(lambda: [row[:2] for row in entries(log)] == expected, 60)
    assert [row[:2] for row in entries(log)] == expected
    assert await server.stop(grace_seconds=60)
