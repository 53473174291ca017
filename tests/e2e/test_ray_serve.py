"""triton_core.ray on a local Ray cluster: tritonclient through Serve's proxy, the handle API.

The cluster is started here (loopback, 2 CPUs, no dashboard) with 2 replicas of the
deployment, each a real Server on an ONNX model and a Python model that answers its process
id. Skipped where ``ray[serve]`` is not installed (``pip install triton-core[ray]``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
httpclient = pytest.importorskip("tritonclient.http")

from tests.support import S3Server, free_port  # noqa: E402
from triton_core import InferenceRequest, Status, Tensor  # noqa: E402

pytestmark = pytest.mark.timeout(420)

APP_NAME = "tcray-triton"
ROUTE_PREFIX = "/tcray"
#: a request body the proxy and the object store carry: 4 MiB of FP32
LARGE_ELEMENTS = 1 << 20
DEADLINE_SECS = 120.0
LOCAL_ONLY_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"

WHOAMI_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] } ]
"""

#: answers the id of the process that runs it (each replica's server has its own) and, when
#: its server unloads it, leaves a file named after that process in its model folder
WHOAMI = """
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.folder = args["model_repository"]

    def finalize(self):
        with open(os.path.join(self.folder, f"finalized-{os.getpid()}"), "w") as marker:
            marker.write("unloaded")

    def execute(self, requests):
        pid = np.array([os.getpid()], dtype=np.int64)
        return [
            pb_utils.InferenceResponse([pb_utils.Tensor("PID", pid)]) for _ in requests
        ]
"""


COUNTDOWN_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "COUNT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

#: a decoupled model: COUNT responses COUNT-1 ... 0, then the final flag
COUNTDOWN = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            count = int(pb_utils.get_input_tensor_by_name(request, "COUNT").as_numpy()[0])
            sender = request.get_response_sender()
            for value in reversed(range(count)):
                out = pb_utils.Tensor("OUT", np.array([value], dtype=np.int32))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


#: a model whose unload would take a minute: the server's stop deadline must cut it short
SLOW_TO_UNLOAD = """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        out = pb_utils.Tensor("OUT", np.zeros(1, dtype=np.int32))
        return [pb_utils.InferenceResponse([out]) for _ in requests]

    def finalize(self):
        time.sleep(60)
"""

SLOW_TO_UNLOAD_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""


def build_repository(root: Path) -> Path:
    onnx_builders.add_sub(root / "simple" / "1" / "model.onnx", "INT32", 16)
    onnx_builders.identity(root / "identity_fp32" / "1" / "model.onnx", "FP32")
    (root / "whoami" / "1").mkdir(parents=True)
    (root / "whoami" / "1" / "model.py").write_text(WHOAMI)
    (root / "whoami" / "config.pbtxt").write_text(WHOAMI_CONFIG)
    (root / "countdown" / "1").mkdir(parents=True)
    (root / "countdown" / "1" / "model.py").write_text(COUNTDOWN)
    (root / "countdown" / "config.pbtxt").write_text(COUNTDOWN_CONFIG)
    return root


def wait_until(condition, what: str, timeout: float = DEADLINE_SECS, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


def run_application(application, name: str, route_prefix: str):
    """``serve.run`` with a deadline: deploy without waiting, then poll the app's status."""
    target = serve.RunTarget(application, name=name, route_prefix=route_prefix)
    (handle,) = serve.run_many([target], wait_for_applications_running=False)

    def running() -> bool:
        status = serve.status().applications.get(name)
        if status is not None and status.status == "DEPLOY_FAILED":
            raise AssertionError(f"{name} failed to deploy: {status.message}")
        return status is not None and status.status == "RUNNING"

    wait_until(running, f"application {name} to run")
    return handle


@pytest.fixture(scope="module")
def loopback_ray() -> Iterator[None]:
    """Ray's services on loopback only.

    Ray turns a loopback ``_node_ip_address`` into the host's address unless clusters are
    off, which ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` says (the name is historical): then
    the node's address is 127.0.0.1 and its gRPC servers listen there. The processes Ray
    starts read the variable; this one read it when ``ray`` was imported, so it is set here too.
    """
    from ray._private import ray_constants

    saved = os.environ.get(LOCAL_ONLY_VARIABLE), ray_constants.ENABLE_RAY_CLUSTER
    os.environ[LOCAL_ONLY_VARIABLE] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if saved[0] is None:
            os.environ.pop(LOCAL_ONLY_VARIABLE, None)
        else:
            os.environ[LOCAL_ONLY_VARIABLE] = saved[0]
        ray_constants.ENABLE_RAY_CLUSTER = saved[1]


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, loopback_ray: None
) -> Iterator[SimpleNamespace]:
    import triton_core.ray as triton_ray

    repository = build_repository(tmp_path_factory.mktemp("tcray_models"))
    # Ray's socket paths must stay short: a folder of its own under the system temp
    temp_dir = tempfile.mkdtemp(prefix="tcray-")
    ray.init(
        address="local",
        include_dashboard=False,
        num_cpus=2,
        object_store_memory=256 << 20,
        _node_ip_address="127.0.0.1",
        _temp_dir=temp_dir,
        log_to_driver=False,
    )
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        application = triton_ray.deployment(
            str(repository),
            num_replicas=2,
            ray_actor_options={"num_cpus": 0.5},
            max_ongoing_requests=8,
            exit_timeout_secs=10.0,
        )
        handle = run_application(application, APP_NAME, ROUTE_PREFIX)
        client = httpclient.InferenceServerClient(f"127.0.0.1:{port}{ROUTE_PREFIX}")
        wait_until(client.is_server_ready, "the application behind the proxy")
        yield SimpleNamespace(
            port=port,
            handle=handle,
            client=client,
            repository=repository,
            logs=Path(temp_dir) / "session_latest" / "logs",
        )
        client.close()
    finally:
        serve.shutdown()
        ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)


def simple_inputs() -> list:
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    b = np.full((1, 16), 3, dtype=np.int32)
    inputs = [
        httpclient.InferInput("INPUT0", [1, 16], "INT32"),
        httpclient.InferInput("INPUT1", [1, 16], "INT32"),
    ]
    inputs[0].set_data_from_numpy(a, binary_data=True)
    inputs[1].set_data_from_numpy(b, binary_data=False)
    return inputs


def test_the_cluster_listens_on_loopback(cluster: SimpleNamespace) -> None:
    assert [node["NodeManagerAddress"] for node in ray.nodes()] == ["127.0.0.1"]


def test_tritonclient_metadata_and_infer_through_the_proxy(cluster: SimpleNamespace) -> None:
    client = cluster.client
    assert client.is_server_live()
    assert client.get_server_metadata()["name"] == "triton"
    metadata = client.get_model_metadata("simple")
    assert metadata["name"] == "simple"
    assert [tensor["name"] for tensor in metadata["inputs"]] == ["INPUT0", "INPUT1"]
    assert metadata["outputs"][0] == {"name": "OUTPUT0", "datatype": "INT32", "shape": [-1, 16]}
    result = client.infer("simple", simple_inputs())
    a = np.arange(16, dtype=np.int32).reshape(1, 16)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + 3)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - 3)


def test_errors_through_the_proxy_are_tritons(cluster: SimpleNamespace) -> None:
    from tritonclient.utils import InferenceServerException

    with pytest.raises(InferenceServerException) as info:
        cluster.client.infer("no_such_model", simple_inputs())
    assert "Request for unknown model: 'no_such_model' is not found" in info.value.message()
    assert info.value.status() == "404"  # Triton 2.51's status for an unknown model


def test_requests_spread_over_both_replicas(cluster: SimpleNamespace) -> None:
    pids = set()
    for _ in range(200):
        value = httpclient.InferInput("IN", [1], "INT32")
        value.set_data_from_numpy(np.array([1], dtype=np.int32))
        pids.add(int(cluster.client.infer("whoami", [value]).as_numpy("PID")[0]))
        if len(pids) == 2:
            break
    assert len(pids) == 2, f"200 requests all reached one replica: {pids}"
    cluster.pids = pids


def test_handle_takes_and_returns_the_projects_types(cluster: SimpleNamespace) -> None:
    data = np.random.default_rng(7).standard_normal((1, LARGE_ELEMENTS), dtype=np.float32)
    request = InferenceRequest(
        "identity_fp32", {"INPUT0": Tensor("INPUT0", "FP32", data)}, id="req-7"
    )
    response = cluster.handle.infer.remote(request).result(timeout_s=DEADLINE_SECS)
    assert response.model_name == "identity_fp32"
    assert response.id == "req-7"
    (output,) = response.outputs
    assert output.name == "OUTPUT0" and output.datatype == "FP32"
    np.testing.assert_array_equal(output.data, data)
    # a read-only view on Ray's shared object store, not a copy unpickled from bytes
    assert not output.data.flags.writeable
    metadata = cluster.handle.model_metadata.remote("simple").result(timeout_s=DEADLINE_SECS)
    assert metadata.name == "simple" and metadata.platform == "onnxruntime_onnx"
    assert cluster.handle.is_ready.remote().result(timeout_s=DEADLINE_SECS) is True


def test_handle_raises_tritons_error(cluster: SimpleNamespace) -> None:
    import triton_core.ray as triton_ray

    request = InferenceRequest(
        "simple", {"INPUT0": Tensor("INPUT0", "INT32", np.zeros((1, 16), np.int32))}
    )
    with pytest.raises(Exception) as info:
        cluster.handle.infer.remote(request).result(timeout_s=DEADLINE_SECS)
    error = triton_ray.triton_error_of(info.value)
    assert error is not None, repr(info.value)
    assert error.status is Status.INVALID_ARG
    assert "INPUT1" in error.message


def test_the_handle_streams_a_decoupled_models_responses(cluster: SimpleNamespace) -> None:
    count = np.array([3], dtype=np.int32)
    request = InferenceRequest("countdown", {"COUNT": Tensor("COUNT", "INT32", count)})
    stream = cluster.handle.options(stream=True).infer_stream.remote(request)
    responses = list(stream)
    values = [int(response.output("OUT").data[0]) for response in responses if response.outputs]
    assert values == [2, 1, 0]
    assert responses[-1].final and not any(response.final for response in responses[:-1])


def test_the_handle_refuses_what_is_not_a_request(cluster: SimpleNamespace) -> None:
    import triton_core.ray as triton_ray

    with pytest.raises(Exception) as info:
        cluster.handle.infer.remote({"model_name": "simple"}).result(timeout_s=DEADLINE_SECS)
    error = triton_ray.triton_error_of(info.value)
    assert error is not None and error.status is Status.INVALID_ARG
    assert error.message == "expected an InferenceRequest, got dict"


def test_a_replica_serves_an_s3_repository(cluster: SimpleNamespace, tmp_path: Path) -> None:
    import triton_core.ray as triton_ray

    pytest.importorskip("s3fs")
    pytest.importorskip("moto")
    s3 = S3Server()
    try:
        local = tmp_path / "src"
        onnx_builders.add_sub(local / "remote_add" / "1" / "model.onnx", "FP32", 4)
        s3.upload_tree("tcray-models", "repo", local)
        application = triton_ray.deployment(
            f"s3://127.0.0.1:{s3.port}/tcray-models/repo",
            name="TritonServerS3",
            num_replicas=1,
            # the credentials reach the replica as a real cluster's would: its runtime env
            ray_actor_options={"num_cpus": 0.5, "runtime_env": {"env_vars": S3Server.CREDENTIALS}},
        )
        handle = run_application(application, "tcray-s3", "/tcray-s3")
        data = np.arange(4, dtype=np.float32).reshape(1, 4)
        request = InferenceRequest(
            "remote_add",
            {name: Tensor(name, "FP32", data) for name in ("INPUT0", "INPUT1")},
        )
        response = handle.infer.remote(request).result(timeout_s=DEADLINE_SECS)
        np.testing.assert_array_equal(response.output("OUTPUT0").data, data * 2)
        serve.delete("tcray-s3")
    finally:
        s3.stop()


def test_a_replica_stops_its_server_within_the_exit_timeout(
    cluster: SimpleNamespace, tmp_path: Path
) -> None:
    import triton_core.ray as triton_ray

    (tmp_path / "slow_to_unload" / "1").mkdir(parents=True)
    (tmp_path / "slow_to_unload" / "1" / "model.py").write_text(SLOW_TO_UNLOAD)
    (tmp_path / "slow_to_unload" / "config.pbtxt").write_text(SLOW_TO_UNLOAD_CONFIG)
    # built as `serve run triton_core.ray:app model_repository=... exit_timeout_secs=2` does
    application = triton_ray.app({"model_repository": str(tmp_path), "exit_timeout_secs": "2"})
    run_application(application, "tcray-slow-stop", "/tcray-slow-stop")
    serve.delete("tcray-slow-stop")
    # the server gave up on the unload at its deadline and said so: Ray did not kill it first
    wait_until(
        lambda: _logged(cluster.logs, "the replica's server did not stop in time"),
        "the replica to report its stop deadline",
        timeout=30.0,
    )


def _logged(folder: Path, text: str) -> bool:
    """Whether a log file of the cluster (its last 1 MiB) holds ``text``."""
    for path in folder.rglob("*"):
        if path.is_file() and path.suffix in (".err", ".out", ".log"):
            with path.open("rb") as handle:
                handle.seek(max(0, path.stat().st_size - (1 << 20)))
                if text.encode() in handle.read():
                    return True
    return False


def test_deleting_the_application_stops_every_replicas_server(cluster: SimpleNamespace) -> None:
    pids = getattr(cluster, "pids", None)
    if pids is None:
        pytest.fail("needs test_requests_spread_over_both_replicas to have run first")
    serve.delete(APP_NAME)
    # each replica's server unloaded its models on the way out: finalize() ran in both
    markers = {cluster.repository / "whoami" / f"finalized-{pid}" for pid in pids}
    wait_until(lambda: all(marker.exists() for marker in markers), "both servers to unload")
    assert APP_NAME not in serve.status().applications
