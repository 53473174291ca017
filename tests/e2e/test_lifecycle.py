"""The serve command as a process: start-up failures, readiness, signals, plugins."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
import urllib.request

import numpy as np
import tritonclient.http as httpclient

from tests.support import ROOT, ServerProcess, write_numpy_model

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}


def _infer_in_background(process: ServerProcess, model: str):  # type: ignore[no-untyped-def]
    """Start one infer of ``model`` on a thread: (thread, outcome dict, the input data)."""
    client = httpclient.InferenceServerClient(process.http_url, network_timeout=90)
    data = np.ones((1, 4), dtype=np.int32)
    inputs = [httpclient.InferInput(n, [1, 4], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(data)
    outcome: dict[str, object] = {}

    def call() -> None:
        try:
            outcome["result"] = client.infer(model, inputs).as_numpy("OUTPUT0")
        except Exception as exc:  # recorded for the test's assertions
            outcome["error"] = exc

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    return thread, outcome, data


def _wait_for_file(path, process: ServerProcess, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return path.read_text()
        assert process.process.poll() is None, process.log()[-3000:]
        time.sleep(0.02)
    raise TimeoutError(f"{path} was not written within {timeout}s:\n{process.log()[-3000:]}")


def _slow_model(repo, name: str, sleep_ms: int, started) -> None:  # type: ignore[no-untyped-def]
    write_numpy_model(
        repo,
        name,
        extra=f'parameters {{ key: "sleep_ms" value {{ string_value: "{sleep_ms}" }} }}\n'
        f'parameters {{ key: "started_file" value {{ string_value: "{started}" }} }}',
    )


def test_sigterm_finishes_requests_in_flight_and_exits_zero(tmp_path):
    started = tmp_path / "started"
    _slow_model(tmp_path / "models", "slow", 800, started)
    process = ServerProcess([tmp_path / "models"], env=NUMPY_PLUGIN)
    try:
        process.wait_ready()
        thread, outcome, data = _infer_in_background(process, "slow")
        _wait_for_file(started, process)
        code = process.stop()
        thread.join(30)
        assert code == 0, process.log()[-3000:]
        assert "error" not in outcome, outcome
        np.testing.assert_array_equal(outcome["result"], data)
    finally:
        process.stop()


def test_failed_model_exits_at_start_up_by_default(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "good")
    (repo / "bad").mkdir()
    (repo / "bad" / "config.pbtxt").write_text('backend: "numpy"\nmax_batch_size: "x"\n')
    process = ServerProcess([repo], env=NUMPY_PLUGIN)
    code = process.process.wait(60)
    process.stop()
    assert code == 1
    assert "bad/config.pbtxt" in process.log()


def test_without_exit_on_error_the_others_serve_and_readiness_is_strict(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "good")
    (repo / "bad").mkdir()
    (repo / "bad" / "config.pbtxt").write_text('backend: "nowhere"\n')
    with ServerProcess([repo], "--exit-on-error=false", env=NUMPY_PLUGIN) as process:
        process.wait_ready(path="/v2/health/live")
        client = httpclient.InferenceServerClient(process.http_url)
        assert not client.is_server_ready()
        assert client.is_model_ready("good")
        assert not client.is_model_ready("bad")
    with ServerProcess(
        [repo], "--exit-on-error=false", "--strict-readiness=false", env=NUMPY_PLUGIN
    ) as process:
        process.wait_ready()


def test_disable_auto_complete_config_needs_a_full_config(tmp_path):
    from triton_core_onnx import model_builders

    repo = tmp_path / "models"
    model_builders.mlp(repo / "mlp" / "1" / "model.onnx")
    process = ServerProcess([repo], "--disable-auto-complete-config")
    code = process.process.wait(60)
    process.stop()
    assert code == 1
    assert "must specify 'input' and 'output'" in process.log()


def test_server_id_and_ports(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "good")
    with ServerProcess([repo], "--id", "edge-7", "--allow-grpc=false", env=NUMPY_PLUGIN) as p:
        p.wait_ready()
        assert httpclient.InferenceServerClient(p.http_url).get_server_metadata()["name"] == (
            "edge-7"
        )


def test_plugins_command_lists_what_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "triton_core", "plugins"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**__import__("os").environ, **NUMPY_PLUGIN},
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "DISTRIBUTION", "VERSION", "PROVIDES"]
    onnx = next(line for line in lines if line.startswith("onnx "))
    assert "triton-core-onnx" in onnx and "backend:onnxruntime" in onnx
    assert "platform:onnxruntime_onnx" in onnx
    disabled = subprocess.run(
        [sys.executable, "-m", "triton_core", "--disable-plugin", "onnx", "plugins"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert "disabled: onnx" in disabled.stdout
    assert "triton-core-onnx" not in disabled.stdout


def test_exit_timeout_bounds_the_whole_stop_with_a_hung_execute(tmp_path):
    # a 60 s execute in flight, --exit-timeout-secs 2: the process ends at the deadline
    started = tmp_path / "started"
    _slow_model(tmp_path / "models", "hung", 60_000, started)
    process = ServerProcess([tmp_path / "models"], "--exit-timeout-secs", "2", env=NUMPY_PLUGIN)
    try:
        process.wait_ready()
        thread, outcome, _ = _infer_in_background(process, "hung")
        _wait_for_file(started, process)
        began = time.monotonic()
        code = process.stop(timeout=30)
        took = time.monotonic() - began
        thread.join(10)
        log = process.log()
        assert code == 1, log[-3000:]
        # 2 s deadline; the margin absorbs a slow machine, far below the 60 s execute
        assert took < 10, (took, log[-3000:])
        assert "Exit timeout expired. Exiting immediately." in log  # not the watchdog
        assert "error" in outcome, outcome
    finally:
        process.stop()


def test_a_hung_load_and_a_hung_execute_fail_only_their_models(tmp_path):
    repo = tmp_path / "models"
    started = tmp_path / "started"
    write_numpy_model(
        repo,
        "hung_load",
        extra='parameters { key: "hang_load" value { string_value: "true" } }\n'
        'parameters { key: "load_timeout_secs" value { string_value: "2" } }',
    )
    _slow_model(repo, "hung_execute", 600_000, started)
    with open(repo / "hung_execute" / "config.pbtxt", "a") as config:
        config.write(
            'parameters { key: "execute_timeout_secs" value { string_value: "2" } }\n'
            "instance_group [{ count: 1 kind: KIND_CPU }]\n"
        )
    write_numpy_model(repo, "good")
    process = ServerProcess([repo], "--exit-on-error=false", env=NUMPY_PLUGIN)
    try:
        process.wait_ready(path="/v2/health/live")  # start-up ends despite the hung load
        client = httpclient.InferenceServerClient(process.http_url, network_timeout=90)
        index = {entry["name"]: entry for entry in client.get_model_repository_index()}
        assert index["hung_load"]["state"] == "UNAVAILABLE"
        assert "did not finish within load_timeout_secs=2" in index["hung_load"]["reason"]
        assert client.is_model_ready("hung_execute") and client.is_model_ready("good")

        thread, outcome, _ = _infer_in_background(process, "hung_execute")
        _wait_for_file(started, process)
        thread.join(60)  # fails after 2 s (checked 4 times per period), far below 600 s
        assert "execute_timeout_secs=2" in str(outcome.get("error")), outcome
        assert not client.is_model_ready("hung_execute")
        assert not client.is_server_ready()
        assert client.is_model_ready("good")
        with urllib.request.urlopen(process.metrics_url, timeout=30) as reply:
            metrics = reply.read().decode()
        assert 'nv_model_instance_unhealthy{model="hung_execute",version="1"} 1' in metrics
        assert 'nv_model_execute_timeout{model="hung_execute",version="1"} 1' in metrics

        began = time.monotonic()
        code = process.stop(timeout=60)
        log = process.log()
        assert code == 0, log[-3000:]
        assert time.monotonic() - began < 30, log[-3000:]  # the hung call is left behind
        assert "its thread is abandoned" in log
        assert "did not finish a batch within execute_timeout_secs=2" in log
    finally:
        process.stop()
