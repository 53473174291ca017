"""``triton-core serve --workers 2``: two real server processes under gunicorn, one server to
the stock tritonclient (HTTP and gRPC), with a Python model that answers with the pid of the
worker that ran it."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support import ServerProcess

pytest.importorskip("triton_core_python")
httpclient = pytest.importorskip("tritonclient.http")
grpcclient = pytest.importorskip("tritonclient.grpc")
from tritonclient.utils import InferenceServerException  # noqa: E402

# the stub process of a Python model is a child of its worker: its parent pid is the worker's
PID_MODEL = """
import os
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        pid = np.array([os.getppid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""

# the first worker to load it is ready at once; every later one waits for a file the test
# writes (at most 120 s), so that the test sees one worker ready and another not
GATED_MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils

GATE = {gate!r}


class TritonPythonModel:
    def initialize(self, args):
        try:
            os.close(os.open(GATE + ".first", os.O_CREAT | os.O_EXCL))
            return
        except FileExistsError:
            pass
        deadline = time.monotonic() + 120
        while not os.path.exists(GATE) and time.monotonic() < deadline:
            time.sleep(0.05)

    def execute(self, requests):
        pid = np.array([os.getppid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""

CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

#: bounded retries of a request whose connection went to a worker that was stopping
RETRIES = 5
#: how long the tests wait for a state they expect (models load in stub processes)
DEADLINE_SECS = 90.0


def write_pid_model(repo: Path, name: str, source: str = PID_MODEL) -> None:
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "1" / "model.py").write_text(source)
    (repo / name / "config.pbtxt").write_text(CONFIG)


def until(condition: Callable[[], Any], what: str, seconds: float = DEADLINE_SECS) -> Any:
    """Poll ``condition`` until it returns something true, within a deadline."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError(f"not {what} after {seconds}s")


def infer_pid(server: ServerProcess, model: str = "pid_model", protocol: str = "http") -> int:
    """One request on a new connection (so the kernel may pick either worker)."""
    module, client = (
        (httpclient, server.http_client())
        if protocol == "http"
        else (grpcclient, server.grpc_client())
    )
    try:
        data = module.InferInput("IN", [1], "INT32")
        data.set_data_from_numpy(np.array([1], dtype=np.int32))
        return int(client.infer(model, [data]).as_numpy("PID")[0])
    finally:
        client.close()


def infer_pid_http(server: ServerProcess, model: str = "pid_model") -> int:
    return infer_pid(server, model)


def infer_with_retries(server: ServerProcess) -> int:
    """A request that is answered, retried (at most RETRIES times) only when its connection
    was on a worker that went away."""
    for attempt in range(RETRIES):
        try:
            return infer_pid_http(server)
        # refused, reset, timed out, or closed before the answer (geventhttpclient)
        except (InferenceServerException, OSError, http.client.HTTPException):
            if attempt == RETRIES - 1:
                raise
            time.sleep(0.05)
    raise AssertionError("unreachable")


def workers_of(server: ServerProcess) -> set[int]:
    """The master's live children (the workers), from /proc."""
    master = server.process.pid
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue  # exited meanwhile
        if int(fields[1]) == master and fields[0] != "Z":
            children.add(int(stat.parent.name))
    return children


def metric(server: ServerProcess, name: str, model: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    pattern = rf'^{name}{{model="{model}",version="1"}} (\S+)$'
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


def http_inference_count(server: ServerProcess, model: str) -> int:
    with closing(server.http_client()) as client:
        stats = client.get_inference_statistics(model)
    return int(stats["model_stats"][0]["inference_count"])


def grpc_inference_count(server: ServerProcess, model: str) -> int:
    with closing(server.grpc_client()) as client:
        stats = client.get_inference_statistics(model, as_json=True)
    return int(stats["model_stats"][0].get("inference_count", 0))


def server_ready(server: ServerProcess) -> bool:
    with closing(server.http_client()) as client:
        return bool(client.is_server_ready())


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    repo = tmp_path_factory.mktemp("workers_models")
    write_pid_model(repo, "pid_model")
    write_pid_model(repo, "count_model")
    # the example frontend plugin too: a plugin's endpoint is shared like the built-ins'
    ndjson = ("--ndjson-port", "0", "--ndjson-address", "127.0.0.1")
    process = ServerProcess([repo], "--workers", "2", "--exit-timeout-secs", "10", *ndjson)
    try:
        process.wait_ready(DEADLINE_SECS)
        yield process
    finally:
        process.stop()


def test_two_workers_serve_http_and_grpc_on_one_port(workers: ServerProcess) -> None:
    pids = workers_of(workers)
    assert len(pids) == 2
    seen_http: set[int] = set()
    seen_grpc: set[int] = set()
    for _ in range(200):
        seen_http.add(infer_pid_http(workers))
        seen_grpc.add(infer_pid(workers, protocol="grpc"))
        if len(seen_http) == 2 and len(seen_grpc) == 2:
            break
    assert seen_http == pids
    assert seen_grpc == pids


def test_a_frontend_plugin_port_is_shared_by_the_workers_too(workers: ServerProcess) -> None:
    client_module = pytest.importorskip("triton_core_example_ndjson.client")
    request = client_module.infer_line("pid_model", {"IN": ("INT32", np.zeros(1, np.int32))})

    def pid_over_ndjson() -> int:
        # a new connection each time: the system spreads connections over the workers
        with client_module.LineClient(workers.ports["ndjson"]) as client:
            return int(client.ask(request)["outputs"][0]["data"][0])

    pids = workers_of(workers)
    assert until(lambda: {pid_over_ndjson() for _ in range(40)} == pids, "both workers")


def test_statistics_and_metrics_sum_over_workers(workers: ServerProcess) -> None:
    requests = 40
    pids = {infer_pid_http(workers, "count_model") for _ in range(requests)}
    assert len(pids) == 2, "both workers took requests"
    # every reader, whichever worker it reaches, reports the whole server
    for _ in range(4):
        assert http_inference_count(workers, "count_model") == requests
        assert grpc_inference_count(workers, "count_model") == requests
        assert metric(workers, "nv_inference_count", "count_model") == requests
        assert metric(workers, "nv_inference_request_success", "count_model") == requests


def test_killed_worker_is_replaced_under_load(workers: ServerProcess) -> None:
    before = workers_of(workers)
    victim = min(before)
    answered = 0
    for index in range(60):
        if index == 10:
            os.kill(victim, signal.SIGKILL)
        infer_with_retries(workers)
        answered += 1
    assert answered == 60
    after = until(lambda: (pids := workers_of(workers)) and len(pids) == 2 and pids, "2 workers")
    assert victim not in after
    (replacement,) = after - before
    until(lambda: infer_pid_http(workers) == replacement, "the replacement answering")
    until(lambda: server_ready(workers), "ready again")


def test_sighup_reloads_workers_one_by_one(workers: ServerProcess) -> None:
    before = workers_of(workers)
    os.kill(workers.process.pid, signal.SIGHUP)
    answered = 0
    deadline = time.monotonic() + DEADLINE_SECS
    while time.monotonic() < deadline:
        infer_with_retries(workers)
        answered += 1
        now = workers_of(workers)
        if len(now) == 2 and not now & before:
            break
        time.sleep(0.02)
    now = workers_of(workers)
    assert len(now) == 2 and not now & before, f"before {before}, now {now}"
    assert answered > 0
    until(lambda: {infer_pid_http(workers) for _ in range(40)} == now, "both new workers")


def test_sigterm_stops_every_worker_within_the_deadline(workers: ServerProcess) -> None:
    pids = workers_of(workers)
    started = time.monotonic()
    code = workers.stop(timeout=30.0)
    assert code == 0, workers.log()[-3000:]
    assert time.monotonic() - started < 10.0 + 5.0
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or "Z" in _state(pid)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][:1]
    except (FileNotFoundError, IndexError):
        return "Z"


def test_explicit_load_reaching_one_worker_is_applied_by_all(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_pid_model(repo, "pid_model")
    with ServerProcess(
        [repo], "--workers", "2", "--model-control-mode", "explicit", "--exit-timeout-secs", "10"
    ) as server:
        # serving no model yet, the server is ready once every worker is (as Triton is)
        server.wait_ready(DEADLINE_SECS, path="/v2/health/live")
        until(lambda: len(workers_of(server)) == 2, "2 workers")
        until(lambda: server_ready(server), "ready")
        with closing(server.http_client()) as client:
            client.load_model("pid_model")
        # new connections reach either worker: every one already has the model
        for _ in range(20):
            with closing(server.grpc_client()) as check:
                assert check.is_model_ready("pid_model")
                assert check.is_server_ready()
                index = check.get_model_repository_index(as_json=True)["models"]
                assert [(m["name"], m.get("state")) for m in index] == [("pid_model", "READY")]
        pids = {infer_pid_http(server) for _ in range(60)}
        assert pids == workers_of(server)
        with closing(server.grpc_client()) as client:
            client.unload_model("pid_model")
        for _ in range(20):
            with closing(server.http_client()) as check:
                assert not check.is_model_ready("pid_model")
        assert server.stop() == 0


UPLOADED_CONFIG = {
    "backend": "python",
    "max_batch_size": 0,
    "input": [{"name": "IN", "data_type": "TYPE_INT32", "dims": [1]}],
    "output": [{"name": "PID", "data_type": "TYPE_INT64", "dims": [1]}],
}


def test_uploaded_model_reaches_every_worker_and_a_replacement(tmp_path: Path) -> None:
    """A load with a config and files travels to the other worker; a worker started after
    it (here replacing a killed one) replays it before it listens."""
    repo = tmp_path / "models"
    repo.mkdir()
    with ServerProcess([repo], "--workers", "2", "--model-control-mode", "explicit") as server:
        server.wait_ready(DEADLINE_SECS, path="/v2/health/live")
        until(lambda: len(workers_of(server)) == 2, "2 workers")
        with closing(server.grpc_client()) as client:
            client.load_model(
                "uploaded",
                config=json.dumps(UPLOADED_CONFIG),
                files={"file:1/model.py": PID_MODEL.encode()},
            )
        before = workers_of(server)
        assert {infer_pid_http(server, "uploaded") for _ in range(60)} == before
        victim = min(before)
        os.kill(victim, signal.SIGKILL)
        now = until(lambda: (pids := workers_of(server)) - before and len(pids) == 2 and pids,
                    "a replacement")  # fmt: skip
        (replacement,) = now - before
        until(lambda: infer_pid_http(server, "uploaded") == replacement, "the replacement serving")
        until(lambda: server_ready(server), "ready")
        assert server.stop() == 0


def test_ready_only_when_every_worker_is_ready(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    gate = tmp_path / "gate"
    write_pid_model(repo, "gated", GATED_MODEL.format(gate=str(gate)))
    with ServerProcess([repo], "--workers", "2", "--exit-timeout-secs", "10") as server:
        # one worker serves (its model loaded), the other waits in initialize()
        first = until(lambda: _try(lambda: infer_pid_http(server, "gated")), "one worker serving")
        for _ in range(10):
            assert not server_ready(server)
            assert infer_pid_http(server, "gated") == first  # the other does not listen yet
        # statistics and metrics answer while a worker starts: its share is nothing yet
        assert http_inference_count(server, "gated") == 11
        assert metric(server, "nv_inference_count", "gated") == 11
        gate.touch()
        server.wait_ready(DEADLINE_SECS)
        until(lambda: {infer_pid_http(server, "gated") for _ in range(40)} == workers_of(server),
              "both workers serving")  # fmt: skip
        assert server.stop() == 0


def _try(call: Callable[[], Any]) -> Any:
    try:
        return call()
    except Exception:  # refused, reset, closed (geventhttpclient's own errors), not ready
        return None


def test_grpcio_transport_shares_the_port_too(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_pid_model(repo, "pid_model")
    with ServerProcess([repo], "--workers", "2", "--grpc-transport", "grpcio") as server:
        server.wait_ready(DEADLINE_SECS)
        pids = workers_of(server)
        seen = until(
            lambda: {infer_pid(server, protocol="grpc") for _ in range(40)} == pids,
            "both workers answering gRPC",
        )
        assert seen
        assert server.stop() == 0


def test_a_worker_that_cannot_start_stops_the_server_with_status_1(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_pid_model(repo, "broken", "raise RuntimeError('this model does not load')\n")
    with ServerProcess([repo], "--workers", "2") as server:
        code = server.process.wait(DEADLINE_SECS)
        assert code == 1
        assert "this model does not load" in server.log()
        assert "could not start: stopping the server" in server.log()


SLOW_MODEL = """
import os
import time
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        open({marker!r}, "w").close()
        time.sleep(60)
        pid = np.array([os.getppid()], dtype=np.int64)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests]
"""


def test_a_worker_past_the_exit_deadline_makes_the_exit_status_1(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    marker = tmp_path / "executing"
    write_pid_model(repo, "slow", SLOW_MODEL.format(marker=str(marker)))
    with ServerProcess([repo], "--workers", "2", "--exit-timeout-secs", "2") as server:
        server.wait_ready(DEADLINE_SECS)
        stuck = threading.Thread(target=_try, args=(lambda: infer_pid_http(server, "slow"),))
        stuck.start()
        until(marker.exists, "the request running")
        started = time.monotonic()
        code = server.stop(timeout=30.0)
        elapsed = time.monotonic() - started
        stuck.join(10.0)
    assert code == 1, server.log()[-3000:]
    # 2 s of deadline, the worker's watchdog margin and gunicorn's last second, with room
    assert elapsed < 2.0 + 3.0 + 5.0


def test_a_reload_whose_new_worker_cannot_start_keeps_the_old_ones(tmp_path: Path) -> None:
    repo = tmp_path / "models"
    write_pid_model(repo, "pid_model")
    with ServerProcess([repo], "--workers", "2") as server:
        server.wait_ready(DEADLINE_SECS)
        before = workers_of(server)
        (repo / "pid_model" / "1" / "model.py").write_text("raise RuntimeError('broken now')\n")
        os.kill(server.process.pid, signal.SIGHUP)
        until(lambda: "Reload stopped" in server.log(), "the reload given up")
        assert workers_of(server) == before
        assert {infer_pid_http(server) for _ in range(40)} == before
        assert server_ready(server)
        assert server.stop() == 0
