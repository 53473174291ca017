"""Clients' system shared-memory regions mapped in the Python model's own process.

The stock tritonclient against a real server process: inputs in a registered region reach
``model.py`` as read-only views of that region mapped in its stub process (not copies sent
through the server), outputs asked into a region are written there by the stub, and every
safety rule of the server's own shared-memory code holds in the stub too. The models look at
their own process (``/proc/self/maps``) to say where their input lives.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from textwrap import dedent
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.e2e.test_shared_memory import Regions, find_perf_analyzer, read, shm_output, write
from tests.support import ServerProcess, serve_until_done, wait_until

pytestmark = pytest.mark.timeout(300)

CLIENTS = {"http": httpclient, "grpc": grpcclient}
MIB = 1 << 20

#: identity, and WHERE: what the model sees of its input's memory, from its own process
WHERE_MODEL = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils


def mappings():
    with open("/proc/self/maps") as maps:
        for line in maps:
            fields = line.split(maxsplit=5)
            start, end = (int(x, 16) for x in fields[0].split("-"))
            yield start, end, fields[1], fields[5].strip() if len(fields) > 5 else ""


def where(values):
    found = {"pid": os.getpid()}
    # the largest server-stub transfer segment (memfd) mapped in this process
    found["transfer"] = max(
        (end - start for start, end, _, path in mappings() if "triton-python-model" in path),
        default=0,
    )
    # the clients' objects mapped in this process
    found["mapped"] = sorted({path for *_, path in mappings() if path.startswith("/dev/shm/")})
    if values.dtype != object and values.size:
        address = values.__array_interface__["data"][0]
        for start, end, perms, path in mappings():
            if start <= address < end:
                found["path"], found["perms"] = path, perms
        found["writeable"] = bool(values.flags.writeable)
    return found


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.gate = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        self.decoupled = config.get("model_transaction_policy", {}).get("decoupled", False)

    def execute(self, requests):
        if self.gate:
            open(self.gate["started"], "w").close()
            deadline = time.monotonic() + 60
            while not os.path.exists(self.gate["release"]) and time.monotonic() < deadline:
                time.sleep(0.01)
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            info = np.array([json.dumps(where(values)).encode()], dtype=np.object_)
            info = info.reshape([1] * values.ndim)  # [1], or [1, 1] with a batch dimension
            response = pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUTPUT0", values), pb_utils.Tensor("WHERE", info)]
            )
            if self.decoupled:  # the input, then the input reversed
                sender = request.get_response_sender()
                sender.send(response)
                reverse = pb_utils.Tensor("OUTPUT0", values[::-1].copy())
                sender.send(
                    pb_utils.InferenceResponse([reverse, pb_utils.Tensor("WHERE", info)]),
                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL,
                )
            responses.append(response)
        return None if self.decoupled else responses
"""

DATATYPES = ("FP32", "FP16", "FP64", "INT8", "INT64", "UINT16", "BOOL", "BYTES")


def write_model(root: Path, name: str, datatype: str, extra: str = "", batch: int = 0) -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(dedent(WHERE_MODEL))
    config_type = "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"
    (root / name / "config.pbtxt").write_text(
        f'backend: "python"\nmax_batch_size: {batch}\n{extra}\n'
        f'input [{{ name: "INPUT0" data_type: {config_type} dims: [ -1 ] }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: {config_type} dims: [ -1 ] }}]\n'
        'output [{ name: "WHERE" data_type: TYPE_STRING dims: [ 1 ] }]\n'
    )


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("region_models")
    for datatype in DATATYPES:
        write_model(root, f"where_{datatype.lower()}", datatype)
    write_model(root, "where_big", "FP32")
    write_model(root, "where_stream", "FP32", "model_transaction_policy { decoupled: true }")
    write_model(
        root,
        "where_batched",
        "FP32",
        "dynamic_batching { preferred_batch_size: [ 2 ] max_queue_delay_microseconds: 60000000 }",
        batch=8,
    )
    gate = tmp_path_factory.mktemp("gate")
    write_model(
        root,
        "where_gated",
        "INT32",
        f'parameters {{ key: "started" value {{ string_value: "{gate / "started"}" }} }}\n'
        f'parameters {{ key: "release" value {{ string_value: "{gate / "release"}" }} }}',
    )
    return root


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    yield from serve_until_done(ServerProcess([repository], "--allow-client-shm=true"))


@pytest.fixture
def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return server.http_client(network_timeout=120)


@pytest.fixture
def grpc(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


@pytest.fixture
def regions(http) -> Iterator[Regions]:
    made = Regions([http])
    try:
        yield made
    finally:
        made.close()


def in_background(call: Callable[[], Any]) -> tuple[threading.Thread, list]:
    """``call()`` on a thread; the list gets its result, or the error it raised."""
    outcome: list = []

    def run() -> None:
        try:
            outcome.append(call())
        except InferenceServerException as error:
            outcome.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcome


def sample(datatype: str, count: int) -> tuple[np.ndarray, bytes]:
    """``count`` values of ``datatype`` and their wire bytes."""
    if datatype == "BYTES":
        array = np.array([f"w{i}\0".encode() * (i % 5 + 1) for i in range(count)], np.object_)
        return array, serialize_byte_tensor(array).item()
    if datatype == "BOOL":
        array = np.arange(count) % 3 == 0
    else:
        dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
        array = (np.arange(count) * 7 - 50).astype(dtype or np.dtype(datatype.lower()))
    return array, array.tobytes()


def where_of(result) -> dict:
    return json.loads(result.as_numpy("WHERE").reshape(-1)[0])


def infer_in_regions(client, module, model, datatype, count, region, size, in_at, out_at):
    """Input at ``in_at`` and output at ``out_at`` of ``region``; the model's WHERE."""
    tensor = module.InferInput("INPUT0", [count], datatype)
    tensor.set_shared_memory(region, size, in_at)
    result = client.infer(
        model,
        [tensor],
        outputs=[
            shm_output(module, "OUTPUT0", region, size, out_at),
            module.InferRequestedOutput("WHERE"),
        ],
    )
    return where_of(result)


# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("datatype", DATATYPES)
def test_values_of_every_kind_go_in_and_out_through_regions(
    protocol, datatype, http, grpc, regions
) -> None:
    client, module = (http if protocol == "http" else grpc), CLIENTS[protocol]
    _, data = sample(datatype, 300)
    # registered 100 bytes into its object: the stub maps from a page boundary before that
    name, _, handle = regions.create(32768 + 100, register_with=http, offset=100)
    write(handle, data, 100 + 40)
    where = infer_in_regions(
        client, module, f"where_{datatype.lower()}", datatype, 300, name, len(data), 40, 16384
    )
    assert read(handle, len(data), 100 + 16384) == data
    # BYTES elements are objects: parsed from the region mapped in the model's process
    assert f"/dev/shm/{name}" in where["mapped"]
    if datatype != "BYTES":
        assert where["path"] == f"/dev/shm/{name}"


def test_the_model_reads_the_region_itself_and_writes_the_output_there(http, regions) -> None:
    size = 4 * MIB
    values = np.random.default_rng(3).random(size // 4, dtype=np.float32)
    name, _, handle = regions.create(2 * size, register_with=http)
    write(handle, values.tobytes())
    for _ in range(3):
        where = infer_in_regions(
            http, httpclient, "where_big", "FP32", values.size, name, size, 0, size
        )
        assert read(handle, size, size) == values.tobytes()
        # a read-only mapping of the client's object, in the model's own process
        assert where["path"] == f"/dev/shm/{name}"
        assert where["perms"].startswith("r-") and where["writeable"] is False
    # nothing of that size went through the memory the server and the stub share: neither
    # the inputs (the server would have copied them in) nor the outputs (the stub would)
    assert where["transfer"] < size
    tensor = httpclient.InferInput("INPUT0", [values.size], "FP32")
    tensor.set_data_from_numpy(values)
    sent = where_of(http.infer("where_big", [tensor]))
    assert sent["transfer"] >= size  # the same tensor in the request body: it is copied
    assert "/dev/shm/" not in sent["path"]


def test_a_region_unlinked_and_made_again_under_its_key_is_still_the_registered_one(
    http, regions
) -> None:
    _, data = sample("INT64", 64)
    name, _, handle = regions.create(4096, register_with=http)
    write(handle, data)
    # the client removes the name and makes another object under it
    shm.destroy_shared_memory_region(handle)
    regions.handles.remove(handle)
    other = shm.create_shared_memory_region(name, f"/{name}", 4096)
    try:
        write(other, bytes(len(data)))
        infer_in_regions(http, httpclient, "where_int64", "INT64", 64, name, len(data), 0, 2048)
        # the server and the model's process read the object that was registered, which
        # the server holds open; the stranger's object is left alone
        assert read(other, len(data), 2048) == bytes(len(data))
    finally:
        shm.destroy_shared_memory_region(other)
        http.unregister_system_shared_memory(name)


def test_a_decoupled_model_reads_its_input_in_the_region_and_streams_into_one(
    grpc, http, regions
) -> None:
    values = np.arange(512, dtype=np.float32)
    name, _, handle = regions.create(8192, register_with=http)
    write(handle, values.tobytes())
    answers: list = []
    done = threading.Event()

    def callback(result, error) -> None:
        answers.append((result, error))
        if (
            error is not None
            or result.get_response().parameters["triton_final_response"].bool_param
        ):
            done.set()

    tensor = grpcclient.InferInput("INPUT0", [512], "FP32")
    tensor.set_shared_memory(name, 2048)
    grpc.start_stream(callback=callback)
    try:
        grpc.async_stream_infer(
            "where_stream",
            [tensor],
            outputs=[
                shm_output(grpcclient, "OUTPUT0", name, 2048, 4096),
                grpcclient.InferRequestedOutput("WHERE"),
            ],
            enable_empty_final_response=True,
        )
        assert done.wait(60)
    finally:
        grpc.stop_stream()
    assert [error for _, error in answers] == [None] * len(answers)
    wheres = [where_of(result) for result, _ in answers if result.as_numpy("WHERE") is not None]
    assert len(wheres) == 2 and all(w["path"] == f"/dev/shm/{name}" for w in wheres)
    # each response overwrote the region: the last one, the input reversed, is there
    assert read(handle, 2048, 4096) == values[::-1].tobytes()


def pending(server: ServerProcess, model: str) -> float:
    with urllib.request.urlopen(server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count") and f'model="{model}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_a_region_truncated_while_its_request_waits_is_a_400_in_the_model_process(
    server: ServerProcess, http, regions
) -> None:
    """The server checked the region when the request came; its owner truncates it while
    the request waits in the batcher. The model's process checks again before mapping."""
    values = np.arange(256, dtype=np.float32)
    name, _, handle = regions.create(4096, register_with=http)
    write(handle, values.tobytes())
    tensor = httpclient.InferInput("INPUT0", [1, 256], "FP32")
    tensor.set_shared_memory(name, 1024)
    client = server.http_client(network_timeout=120)
    waiting, outcome = in_background(lambda: client.infer("where_batched", [tensor]))
    wait_until(lambda: pending(server, "where_batched") == 1, 60, what="the request to queue")
    os.truncate(f"/dev/shm/{name}", 16)
    other = httpclient.InferInput("INPUT0", [1, 256], "FP32")
    other.set_data_from_numpy(values.reshape(1, 256))
    companion = http.infer("where_batched", [other])  # completes the batch of two
    waiting.join(60)
    (error,) = outcome
    assert isinstance(error, InferenceServerException)
    assert error.status() == "400"
    assert f"shared memory region '{name}'" in error.message() and "truncated" in error.message()
    # the other request of the batch, and the process, go on
    assert np.array_equal(companion.as_numpy("OUTPUT0"), values.reshape(1, 256))
    again = http.infer("where_batched", [other])
    assert where_of(again)["pid"] == where_of(companion)["pid"]


def test_an_output_region_truncated_before_the_answer_is_a_400(http, regions) -> None:
    array, _ = sample("FP32", 256)
    name, _, _ = regions.create(4096, register_with=http)
    os.truncate(f"/dev/shm/{name}", 0)
    tensor = httpclient.InferInput("INPUT0", [256], "FP32")
    tensor.set_data_from_numpy(array)
    with pytest.raises(InferenceServerException) as info:
        http.infer(
            "where_fp32",
            [tensor],
            outputs=[
                shm_output(httpclient, "OUTPUT0", name, 1024),
                httpclient.InferRequestedOutput("WHERE"),
            ],
        )
    assert info.value.status() == "400" and "truncated" in info.value.message()
    assert http.is_server_ready() and http.is_model_ready("where_fp32")


def gate_of(repository: Path) -> Path:
    """The folder of where_gated's started/release files (named in its config)."""
    config = (repository / "where_gated" / "config.pbtxt").read_text()
    return Path(config.split('string_value: "')[1].split('"')[0]).parent


def stub_maps(pid: int, name: str) -> bool:
    return f"/dev/shm/{name}" in Path(f"/proc/{pid}/maps").read_text()


def test_unregistering_while_the_model_uses_the_region_is_safe(
    server: ServerProcess, repository: Path, http, regions
) -> None:
    gate = gate_of(repository)
    for signal in ("started", "release"):
        (gate / signal).unlink(missing_ok=True)
    values = np.arange(64, dtype=np.int32)
    name, _, handle = regions.create(1024, register_with=http)
    write(handle, values.tobytes())
    client = server.http_client(network_timeout=120)
    running, outcome = in_background(
        lambda: infer_in_regions(client, httpclient, "where_gated", "INT32", 64, name, 256, 0, 512)
    )
    try:
        wait_until((gate / "started").exists, 60, what="the model to start executing")
        http.unregister_system_shared_memory(name)
        # the name is free again, for another object
        renamed, _, new_handle = regions.create(1024)
        http.register_system_shared_memory(name, f"/{renamed}", 1024)
        write(new_handle, (values * 2).tobytes())
    finally:
        (gate / "release").touch()
        running.join(60)
    (where,) = outcome
    assert isinstance(where, dict), where
    assert where["path"] == f"/dev/shm/{name}"
    assert read(handle, 256, 512) == values.tobytes()  # the request kept its region
    # the region was closed once the request let it go: the model's process lets it go too
    wait_until(lambda: not stub_maps(where["pid"], name), 30, what="the old mapping to go")
    again = infer_in_regions(http, httpclient, "where_gated", "INT32", 64, name, 256, 0, 512)
    assert read(new_handle, 256, 512) == (values * 2).tobytes()
    assert again["path"] == f"/dev/shm/{renamed}" and again["pid"] == where["pid"]
    http.unregister_system_shared_memory(name)


def test_a_request_abandoned_while_its_region_goes_away_leaves_the_model_serving(
    server: ServerProcess, repository: Path, http, regions
) -> None:
    """The client gives up on a request and unregisters its output's region before the
    model answers: the region closes under the stub's answer, and the model goes on."""
    gate = gate_of(repository)
    for signal in ("started", "release"):
        (gate / signal).unlink(missing_ok=True)
    name, _, handle = regions.create(1024, register_with=http)
    write(handle, np.arange(64, dtype=np.int32).tobytes())
    impatient = server.http_client(network_timeout=1.0)
    try:
        with pytest.raises(Exception):  # noqa: B017 - the client's own timeout, any kind
            infer_in_regions(impatient, httpclient, "where_gated", "INT32", 64, name, 256, 0, 512)
        wait_until((gate / "started").exists, 60, what="the model to start executing")
        http.unregister_system_shared_memory(name)
    finally:
        (gate / "release").touch()
        impatient.close()
    values = np.arange(64, dtype=np.int32)
    for _ in range(3):  # more than the batches an instance may have in flight
        tensor = httpclient.InferInput("INPUT0", [64], "INT32")
        tensor.set_data_from_numpy(values)
        assert np.array_equal(http.infer("where_gated", [tensor]).as_numpy("OUTPUT0"), values)
    assert "Traceback" not in server.log() and "restarting" not in server.log()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_with_system_shared_memory_runs_clean_on_a_python_model(
    protocol, server: ServerProcess, http
) -> None:
    tool = find_perf_analyzer()
    if tool is None:
        pytest.skip("perf_analyzer is not installed (shared/tools/setup-peer-tools.sh)")
    url = server.http_url if protocol == "http" else server.grpc_url
    command = [
        tool, "-m", "where_fp32", "-u", url, "-i", protocol, "--shared-memory", "system",
        "--output-shared-memory-size", "65536", "--shape", "INPUT0:4096",
        "--concurrency-range", "2:2", "--measurement-mode", "count_windows",
        "--measurement-request-count", "100", "--max-trials", "10",
        "--stability-percentage", "900",
    ]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert output.returncode == 0, output.stdout[-3000:] + output.stderr[-2000:]
    assert "Throughput" in output.stdout
    assert "Unable to" not in output.stdout + output.stderr  # its clean-up went through
    assert http.get_system_shared_memory_status() == []
    assert "restarting" not in server.log()
