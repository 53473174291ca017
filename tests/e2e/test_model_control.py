"""Model management while serving: control modes, the repository API over HTTP and gRPC,
reloads without failed requests, readiness, repository agents and the traversal battery."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import shutil
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, wait_until, write_numpy_model

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend,tests.plugins.agent_plugin"}


def inputs(value: int = 1, module=httpclient, rows: int = 1):
    data = np.full((rows, 4), value, dtype=np.int32)
    tensors = [module.InferInput(n, [rows, 4], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(data)
    return tensors


def numpy_config(max_batch_size: int = 8, **parameters: str) -> str:
    """An add_sub model of the numpy test backend, as a load request's JSON config."""
    values = {"kind": "add_sub", **parameters}
    return json.dumps(
        {
            "backend": "numpy",
            "max_batch_size": max_batch_size,
            "parameters": {key: {"string_value": value} for key, value in values.items()},
            "input": [{"name": f"INPUT{i}", "data_type": "TYPE_INT32", "dims": [4]}
                      for i in range(2)],
            "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_INT32", "dims": [4]}
                       for i in range(2)],
        }
    )  # fmt: skip


def index_of(client) -> dict:
    return {(e["name"], e.get("version")): e for e in client.get_model_repository_index()}


def post(process, path: str, body: bytes = b"") -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", process.http_port, timeout=30)
    try:
        connection.request("POST", path, body=body)
        reply = connection.getresponse()
        return reply.status, reply.read()
    finally:
        connection.close()


@pytest.fixture
def repo(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "alpha", kind="add_sub")
    write_numpy_model(repo, "beta", kind="add_sub")
    return repo


def test_the_mode_is_read_in_any_case_as_triton_reads_it(repo):
    with ServerProcess([repo], "--model-control-mode=EXPLICIT", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        assert not client.is_model_ready("alpha")  # explicit: nothing loaded at start
        client.load_model("alpha")
        assert client.is_model_ready("alpha")


def test_mode_none_refuses_load_and_unload(repo):
    with ServerProcess([repo], env=PLUGINS) as process:
        process.wait_ready()
        http_client = httpclient.InferenceServerClient(process.http_url)
        with pytest.raises(InferenceServerException) as info:
            http_client.load_model("alpha")
        assert info.value.status() == "503"
        assert "explicit model load / unload is not allowed" in info.value.message()
        grpc_client = grpcclient.InferenceServerClient(process.grpc_url)
        with pytest.raises(InferenceServerException) as info:
            grpc_client.unload_model("alpha")
        assert info.value.status() == "StatusCode.UNAVAILABLE"
        assert http_client.is_model_ready("alpha")


def test_explicit_mode_load_unload_and_index_over_both_protocols(repo):
    with ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model", "alpha", env=PLUGINS
    ) as process:
        process.wait_ready()
        http_client = httpclient.InferenceServerClient(process.http_url)
        grpc_client = grpcclient.InferenceServerClient(process.grpc_url)
        index = index_of(http_client)
        assert index[("alpha", "1")]["state"] == "READY"
        assert index[("beta", None)] == {"name": "beta"}
        assert not http_client.is_model_ready("beta")

        grpc_client.load_model("beta")
        assert http_client.is_model_ready("beta")
        result = http_client.infer("beta", inputs(3))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 6))

        http_client.unload_model("alpha")
        assert not grpc_client.is_model_ready("alpha")
        entries = {(m.name, m.version): m for m in grpc_client.get_model_repository_index().models}
        assert entries[("alpha", "1")].state == "UNAVAILABLE"
        assert entries[("alpha", "1")].reason == "unloaded"
        ready = http_client.get_model_repository_index()
        assert {e["name"] for e in ready if e.get("state") == "READY"} == {"beta"}
        status, body = post(process, "/v2/repository/index", b'{"ready": true}')
        assert status == 200 and [e["name"] for e in json.loads(body)] == ["beta"]
        status, body = post(process, "/v2/repository/index", b'{"ready": "yes"}')
        assert status == 500  # Triton 2.51's status for a body it cannot read
        assert http_client.is_server_ready()  # unloading alpha did not make it unready

        with pytest.raises(
            InferenceServerException, match="failed to load 'gamma', failed to poll"
        ):
            http_client.load_model("gamma")
        status, body = post(process, "/v2/repository/other/models/beta/load")
        assert status == 501 and b"'repository_name' specification" in body


def test_config_and_file_overrides(repo, tmp_path):
    with ServerProcess([repo], "--model-control-mode=explicit", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        override = {
            "backend": "numpy",
            "max_batch_size": 2,
            "parameters": {"kind": {"string_value": "add_sub"}},
            "input": [{"name": f"INPUT{i}", "data_type": "TYPE_INT32", "dims": [4]}
                      for i in range(2)],
            "output": [{"name": f"OUTPUT{i}", "data_type": "TYPE_INT32", "dims": [4]}
                       for i in range(2)],
        }  # fmt: skip
        client.load_model("alpha", config=json.dumps(override))
        assert client.get_model_config("alpha")["max_batch_size"] == 2
        with pytest.raises(InferenceServerException, match="batch-size must be <= 2"):
            client.infer("alpha", inputs(rows=3))

        # a model built only from uploaded files
        client.load_model("uploaded", config=json.dumps(override), files={"file:3/model.npy": b""})
        metadata = client.get_model_metadata("uploaded")
        assert metadata["versions"] == ["3"]
        result = client.infer("uploaded", inputs(2))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 4)))

        status, body = post(
            process,
            "/v2/repository/models/alpha/load",
            json.dumps(
                {"parameters": {"file:1/model.npy": base64.b64encode(b"").decode()}}
            ).encode(),
        )
        # Triton's status and words (INTERNAL, "failed to poll"), then what was wrong
        assert status == 500 and b"failed to load 'alpha', failed to poll" in body
        assert b"Load parameter 'config' must be specified for model file override" in body
        status, body = post(
            process, "/v2/repository/models/alpha/load", b'{"parameters": {"bogus": "x"}}'
        )
        assert status == 500 and b"unrecognized load parameter 'bogus'" in body


def test_failed_reload_keeps_the_old_version_serving(repo):
    with ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model", "alpha", env=PLUGINS
    ) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        with pytest.raises(InferenceServerException, match="told to fail loading 'alpha'"):
            client.load_model("alpha", config=numpy_config(fail_load="x"))
        assert client.is_model_ready("alpha")
        result = client.infer("alpha", inputs(4))
        np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 8))
        with pytest.raises(InferenceServerException, match="failed to parse"):
            client.load_model("alpha", config="{not json")
        assert client.is_server_ready()


def test_reload_under_continuous_load_fails_no_request(repo):
    with ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model", "alpha", env=PLUGINS
    ) as process:
        process.wait_ready()
        stop = threading.Event()
        outcome = {"ok": 0, "errors": []}

        def hammer():
            client = grpcclient.InferenceServerClient(process.grpc_url)
            deadline = time.monotonic() + 60
            while not stop.is_set() and time.monotonic() < deadline and outcome["ok"] < 100_000:
                try:
                    client.infer("alpha", inputs(1, grpcclient))
                    outcome["ok"] += 1
                except InferenceServerException as exc:
                    outcome["errors"].append(exc.message())

        threads = [threading.Thread(target=hammer) for _ in range(3)]
        for thread in threads:
            thread.start()
        control = httpclient.InferenceServerClient(process.http_url)
        wait_until(lambda: outcome["ok"] > 20, what="requests before the reloads")
        for round_ in range(6):
            control.load_model("alpha", config=numpy_config(sleep_ms=str(round_ % 3)))
            time.sleep(0.1)  # requests run between the reloads: the load under test
        before = outcome["ok"]
        wait_until(lambda: outcome["ok"] > before + 20, what="requests after the reloads")
        stop.set()
        for thread in threads:
            thread.join(30)
        assert outcome["errors"] == []
        assert outcome["ok"] > 40


def test_readiness_never_flips_while_another_model_loads(repo):
    write_numpy_model(
        repo, "slow", extra='parameters { key: "load_sleep_ms" value { string_value: "3000" } }'
    )
    with ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model", "alpha", env=PLUGINS
    ) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        loader = threading.Thread(
            target=lambda: httpclient.InferenceServerClient(
                process.http_url, network_timeout=60
            ).load_model("slow")
        )
        loader.start()
        seen_loading = False
        probes = 0
        while loader.is_alive() and probes < 2000:
            assert client.is_server_ready()
            states = {e.get("state") for e in client.get_model_repository_index()
                      if e["name"] == "slow"}  # fmt: skip
            seen_loading = seen_loading or "LOADING" in states
            probes += 1
            time.sleep(0.02)
        loader.join(60)
        assert seen_loading
        assert client.is_model_ready("slow") and client.is_server_ready()


def test_a_server_with_nothing_to_serve_is_ready_as_tritons_is(repo, tmp_path):
    # Triton 2.51 answers 200 on /v2/health/ready with an empty repository, and in explicit
    # mode with nothing loaded: strict readiness counts failed models, and none failed
    empty = tmp_path / "empty"
    empty.mkdir()
    for repository, mode in ((repo, "explicit"), (empty, "none"), (empty, "explicit")):
        with ServerProcess([repository], f"--model-control-mode={mode}", env=PLUGINS) as process:
            process.wait_ready()
            assert httpclient.InferenceServerClient(process.http_url).is_server_ready()
            assert grpcclient.InferenceServerClient(process.grpc_url).is_server_ready()


def test_poll_mode_follows_the_repository(repo):
    with ServerProcess(
        [repo], "--model-control-mode=poll", "--repository-poll-secs", "0.2", env=PLUGINS
    ) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        write_numpy_model(repo, "gamma", kind="add_sub")
        wait_until(lambda: _ready(client, "gamma"), what="gamma to load")

        write_numpy_model(repo, "alpha", kind="add_sub", versions=(1, 2))
        wait_until(lambda: client.get_model_metadata("alpha")["versions"] == ["2"],
                 what="version 2 to replace version 1")  # fmt: skip

        text = (
            (repo / "beta" / "config.pbtxt")
            .read_text()
            .replace("max_batch_size: 8", "max_batch_size: 3")
        )
        (repo / "beta" / "config.pbtxt").write_text(text)
        wait_until(lambda: client.get_model_config("beta")["max_batch_size"] == 3,
                 what="beta's new config")  # fmt: skip

        (repo / "beta" / "config.pbtxt").write_text("max_batch_size: broken")
        time.sleep(1.0)  # several polls: the broken config must not take beta down
        assert client.is_model_ready("beta")

        shutil.rmtree(repo / "gamma")
        wait_until(lambda: not _ready(client, "gamma"), what="gamma to unload")
        assert client.is_model_ready("alpha")


def _ready(client, name: str) -> bool:
    try:
        return client.is_model_ready(name)
    except InferenceServerException:
        return False


def recorder_agents(log) -> str:  # type: ignore[no-untyped-def]
    """Agents A (logs) then B (logs, and relocates the model to a temporary copy)."""
    return f"""model_repository_agents {{ agents [
  {{ name: "recorder_a" parameters {{ key: "log" value: "{log}" }} }},
  {{ name: "recorder_b" parameters [ {{ key: "log" value: "{log}" }},
                                     {{ key: "relocate" value: "true" }} ] }}
] }}"""


def test_poll_mode_reload_unloads_the_replaced_versions_agents(repo, tmp_path):
    log = tmp_path / "agents.log"
    write_numpy_model(repo, "watched", kind="add_sub", extra=recorder_agents(log))
    with ServerProcess(
        [repo], "--model-control-mode=poll", "--repository-poll-secs", "0.2", env=PLUGINS
    ) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        write_numpy_model(repo, "watched", kind="add_sub", versions=(1, 2),
                          extra=recorder_agents(log))  # fmt: skip
        wait_until(lambda: client.get_model_metadata("watched")["versions"] == ["2"],
                 what="version 2 to replace version 1")  # fmt: skip
        wait_until(lambda: log.read_text().count("UNLOAD_COMPLETE") == 2,
                 what="the replaced set's UNLOAD_COMPLETE")  # fmt: skip
        client.infer("watched", inputs(1))
    rows = [line.split() for line in log.read_text().splitlines()]
    load = [["A", "LOAD"], ["B", "LOAD"], ["B", "LOAD_COMPLETE"], ["A", "LOAD_COMPLETE"]]
    unload = [["A", "UNLOAD"], ["B", "UNLOAD"], ["B", "UNLOAD_COMPLETE"], ["A", "UNLOAD_COMPLETE"]]
    # first set, second set, the first set's unload, then the second set's at stop
    finalize = [["A", "FINALIZE"], ["B", "FINALIZE"]]  # once each, in the order first used
    assert [row[:2] for row in rows] == load + load + unload + unload + finalize
    first, second = rows[3][3], rows[7][3]
    assert first != second
    assert all(row[3] == first for row in rows[8:12])
    assert all(row[3] == second for row in rows[12:16])


def test_repository_agents_order_relocation_and_failure(repo, tmp_path):
    log = tmp_path / "agents.log"
    write_numpy_model(repo, "watched", kind="add_sub", extra=recorder_agents(log))
    write_numpy_model(
        repo,
        "refused",
        extra='model_repository_agents { agents [ { name: "recorder_a" '
        'parameters { key: "fail" value: "true" } } ] }',
    )
    with ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model", "watched", env=PLUGINS
    ) as process:
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        client.infer("watched", inputs(1))
        client.unload_model("watched")
        actions = [line.split()[:3] for line in log.read_text().splitlines()]
        assert actions == [
            ["A", "LOAD", "watched"],
            ["B", "LOAD", "watched"],
            ["B", "LOAD_COMPLETE", "watched"],
            ["A", "LOAD_COMPLETE", "watched"],
            ["A", "UNLOAD", "watched"],
            ["B", "UNLOAD", "watched"],
            ["B", "UNLOAD_COMPLETE", "watched"],
            ["A", "UNLOAD_COMPLETE", "watched"],
        ]
        locations = [line.split()[3] for line in log.read_text().splitlines()]
        assert "relocated-" not in locations[0] and "relocated-" not in locations[1]
        assert all("relocated-" in location for location in locations[2:])
        with pytest.raises(InferenceServerException, match="agent A refuses model 'refused'"):
            client.load_model("refused")
        assert not _ready(client, "refused")


def test_checksum_agent_passes_and_refuses(repo):
    digest = hashlib.md5(b"").hexdigest()
    write_numpy_model(
        repo,
        "verified",
        kind="add_sub",
        extra='model_repository_agents { agents [ { name: "checksum" parameters '
        f'{{ key: "MD5:1/model.npy" value: "{digest}" }} }} ] }}',
    )
    write_numpy_model(
        repo,
        "tampered",
        extra='model_repository_agents { agents [ { name: "checksum" parameters '
        f'{{ key: "MD5:1/model.npy" value: "{"0" * 32}" }} }} ] }}',
    )
    with ServerProcess([repo], "--exit-on-error=false", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        assert client.is_model_ready("verified")
        assert not client.is_model_ready("tampered")
        reason = next(e.get("reason", "") for e in client.get_model_repository_index()
                      if e["name"] == "tampered")  # fmt: skip
        assert "Mismatched MD5 hash for file 1/model.npy" in reason


@pytest.mark.parametrize(
    ("name", "status", "fragment"),
    [
        # Triton 2.7x's check of load names, then what no repository holds
        ("..", "400", "invalid model name '..', model name must not contain path traversal"),
        ("%2E%2E", "400", "invalid model name '..', model name must not contain path"),
        ("..%2F..%2Fetc", "400", "invalid model name '../../etc', model name must not contain"),
        ("%2Fetc", "400", "invalid model name '/etc', model name must not contain path"),
        ("%20", "400", "Model name cannot be empty. Please enter a valid name to deploy."),
        (".", "500", "failed to load '.', failed to poll from model repository"),
        ("a" * 300, "500", "failed to poll from model repository"),
    ],
)
def test_names_cannot_leave_the_repository(repo, name, status, fragment):
    with ServerProcess([repo], "--model-control-mode=explicit", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        code, body = post(process, f"/v2/repository/models/{name}/load")
        assert str(code) == status, body
        assert fragment in json.loads(body)["error"]
        client = httpclient.InferenceServerClient(process.http_url)
        client.load_model("alpha")
        assert client.is_model_ready("alpha")


#: Triton's QA (L0_input_validation ModelNameValidationTest) names
TRAVERSAL_NAMES = ["../etc", "a/../b", "/etc/passwd", "model/subdir", "model/", "..", " ..", ".. "]
BLANK_NAMES = ["", " ", "\t", " \t \n "]
PLAIN_NAMES = ["model.version1", "...", "..my_model", "model..1"]


def test_load_names_are_checked_in_triton_2_7x_words_and_unload_names_are_not(repo):
    with ServerProcess([repo], "--model-control-mode=explicit", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        client = grpcclient.InferenceServerClient(process.grpc_url)
        for name in TRAVERSAL_NAMES:
            with pytest.raises(InferenceServerException) as refused:
                client.load_model(name)
            assert refused.value.status() == "StatusCode.INVALID_ARGUMENT", name
            assert refused.value.message() == (
                f"invalid model name '{name}', model name must not contain path traversal "
                "characters"
            )
            try:
                client.unload_model(name)  # unload does not check the name
            except InferenceServerException as error:
                assert "path traversal" not in error.message()
        for name in BLANK_NAMES:
            with pytest.raises(InferenceServerException, match="Model name cannot be empty"):
                client.load_model(name)
        for name in PLAIN_NAMES:
            with pytest.raises(InferenceServerException) as unknown:
                client.load_model(name)
            assert "failed to poll from model repository" in unknown.value.message()


def test_file_override_paths_and_ensemble_steps_cannot_escape(repo):
    override = numpy_config()
    ensemble = json.dumps(
        {
            "platform": "ensemble",
            "max_batch_size": 8,
            "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [4]}],
            "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [4]}],
            "ensemble_scheduling": {
                "step": [
                    {
                        "model_name": "../alpha",
                        "model_version": -1,
                        "input_map": {"INPUT0": "X"},
                        "output_map": {"OUTPUT0": "Y"},
                    }
                ]
            },
        }
    )
    with ServerProcess([repo], "--model-control-mode=explicit", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        for key in ("file:../../escape.npy", "file:/../x", "file:1/../../x"):
            with pytest.raises(InferenceServerException) as refused:
                client.load_model("alpha", config=override, files={key: b""})
            message = refused.value.message()
            assert f"Invalid file parameter '{key}' with normalized path '" in message
            assert "must stay within model directory" in message
        with pytest.raises(InferenceServerException) as info:
            client.load_model("beta", config=ensemble)
        assert "../alpha" in info.value.message()
        client.load_model("alpha")
        assert client.is_model_ready("alpha")


IDENTITY_PY = b"""
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X")
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x.as_numpy())]))
        return responses
"""


def test_file_override_paths_with_a_leading_slash_are_in_the_model_folder(repo):
    # Triton 2.51 loads these: the folder of the override is the root of each path
    config = json.dumps(
        {
            "backend": "python",
            "input": [{"name": "X", "data_type": "TYPE_INT32", "dims": [2]}],
            "output": [{"name": "Y", "data_type": "TYPE_INT32", "dims": [2]}],
        }
    )
    files = {"file:/1/model.py": IDENTITY_PY, "file:/etc/passwd": b"stays in the folder"}
    with ServerProcess([repo], "--model-control-mode=explicit") as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        client.load_model("slashed", config=config, files=files)
        tensor = httpclient.InferInput("X", [2], "INT32")
        tensor.set_data_from_numpy(np.array([4, 5], dtype=np.int32))
        result = client.infer("slashed", [tensor])
        np.testing.assert_array_equal(result.as_numpy("Y"), [4, 5])
    assert Path("/etc/passwd").read_bytes() != b"stays in the folder"


def test_loading_an_ensemble_loads_its_members_and_unload_dependents_unloads_them(repo):
    from tests.unit.test_ensemble import both, outs, write_ensemble

    write_ensemble(repo, "chain", [("alpha", both("A", "B"), outs("S", "D")),
                                   ("beta", both("S", "D"), outs("OUT0", "OUT1"))])  # fmt: skip
    with ServerProcess([repo], "--model-control-mode=explicit", env=PLUGINS) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        client.load_model("chain")
        assert client.is_model_ready("alpha") and client.is_model_ready("beta")
        data = np.full((1, 4), 3, dtype=np.int32)
        tensors = [httpclient.InferInput(n, [1, 4], "INT32") for n in ("A", "B")]
        for tensor in tensors:
            tensor.set_data_from_numpy(data)
        result = client.infer("chain", tensors)
        np.testing.assert_array_equal(result.as_numpy("OUT0"), np.full((1, 4), 6))

        client.unload_model("chain")
        assert client.is_model_ready("alpha")  # members stay without unload_dependents
        client.load_model("chain")
        client.unload_model("chain", unload_dependents=True)
        assert not client.is_model_ready("alpha") and not client.is_model_ready("beta")

        client.load_model("alpha")  # loaded by the user: an ensemble's unload leaves it
        client.load_model("chain")
        client.unload_model("chain", unload_dependents=True)
        assert client.is_model_ready("alpha") and not client.is_model_ready("beta")
