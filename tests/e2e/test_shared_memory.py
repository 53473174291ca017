"""System shared memory end to end: the stock tritonclient and its shared_memory utilities
against a real server process, over HTTP and gRPC, and each safety rule on its own."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from textwrap import dedent

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, serialize_byte_tensor

from tests.e2e.conftest import DATATYPES, SIMPLE_CONFIG
from tests.e2e.test_sequences import controls, write_model
from tests.support import ServerProcess, wait_until, write_numpy_model
from triton_core.shared_memory.cuda import cuda_support

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")

pytestmark = pytest.mark.timeout(300)

PLUGINS = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
DISABLED_MESSAGE = (
    "Client shared memory is disabled. Start the server with '--allow-client-shm=true' to enable."
)
CLIENTS = {"http": httpclient, "grpc": grpcclient}

PYTHON_IDENTITY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUTPUT0", values)]))
        return responses
"""

PYTHON_WORDS = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        for request in requests:
            sender = request.get_response_sender()
            text = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            for word in text.reshape(-1)[0].decode().split():
                out = pb_utils.Tensor("OUTPUT0", np.array([word.encode()], dtype=np.object_))
                sender.send(pb_utils.InferenceResponse([out]))
            sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
"""


def python_model(root: Path, name: str, source: str, datatype: str, extra: str = "") -> None:
    (root / name / "1").mkdir(parents=True)
    (root / name / "1" / "model.py").write_text(dedent(source))
    (root / name / "config.pbtxt").write_text(
        f'backend: "python"\nmax_batch_size: 0\n{extra}\n'
        f'input [{{ name: "INPUT0" data_type: {datatype} dims: [ -1 ] }}]\n'
        f'output [{{ name: "OUTPUT0" data_type: {datatype} dims: [ -1 ] }}]\n'
    )


def build_repository(root: Path) -> Path:
    for datatype in DATATYPES:
        onnx_builders.identity(root / f"identity_{datatype.lower()}" / "1" / "model.onnx", datatype)
    onnx_builders.add_sub(root / "simple" / "1" / "model.onnx", "INT32", 16)
    (root / "simple" / "config.pbtxt").write_text(SIMPLE_CONFIG)
    (root / "simple" / "labels.txt").write_text("\n".join(f"label{i}" for i in range(16)))
    onnx_builders.add_sub(root / "e_pre" / "1" / "model.onnx", "FP32", 4)
    (root / "ensemble" / "1").mkdir(parents=True)
    (root / "ensemble" / "config.pbtxt").write_text(
        'platform: "ensemble"\nmax_batch_size: 4\n'
        'input [{ name: "X" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
        'input [{ name: "Y" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
        'output [{ name: "SUM" data_type: TYPE_FP32 dims: [ 4 ] }]\n'
        'ensemble_scheduling { step [{ model_name: "e_pre" model_version: -1 '
        'input_map { key: "INPUT0" value: "X" } input_map { key: "INPUT1" value: "Y" } '
        'output_map { key: "OUTPUT0" value: "SUM" } }] }\n'
    )
    write_numpy_model(root, "cached", extra="response_cache { enable: true }")
    write_numpy_model(
        root,
        "batched",
        max_batch_size=8,
        extra="dynamic_batching { preferred_batch_size: [ 4 ] "
        "max_queue_delay_microseconds: 5000000 }",
    )
    write_numpy_model(
        root,
        "slow",
        extra=f'parameters {{ key: "sleep_ms" value {{ string_value: "1500" }} }}\n'
        f'parameters {{ key: "started_file" value {{ string_value: "{root / "started"}" }} }}',
    )
    write_model(root, "accumulate", controls("TYPE_UINT64"))
    python_model(root, "py_identity", PYTHON_IDENTITY, "TYPE_FP32")
    python_model(root, "py_bytes", PYTHON_IDENTITY, "TYPE_STRING")
    python_model(
        root,
        "py_words",
        PYTHON_WORDS,
        "TYPE_STRING",
        "model_transaction_policy { decoupled: true }",
    )
    return root


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_repository(tmp_path_factory.mktemp("shm_models"))


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[ServerProcess]:
    process = ServerProcess(
        [repository],
        "--allow-client-shm=true",
        "--cache-config",
        "local,size=1048576",
        env=PLUGINS,
    )
    try:
        process.wait_ready(timeout=120)
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


class Regions:
    """Shared-memory objects a test creates (own prefix), removed and unregistered after it."""

    def __init__(self, clients: list) -> None:
        self.handles: list = []
        self.names: list[str] = []
        self.clients = clients

    def create(self, size: int, register_with=None, offset: int = 0) -> tuple[str, str, object]:
        name = f"tcshm_{uuid.uuid4().hex[:12]}"
        key = f"/{name}"
        handle = shm.create_shared_memory_region(name, key, size)
        self.handles.append(handle)
        self.names.append(name)
        if register_with is not None:
            register_with.register_system_shared_memory(name, key, size - offset, offset)
        return name, key, handle

    def close(self) -> None:
        for client in self.clients:
            for name in self.names:
                with contextlib.suppress(InferenceServerException):
                    client.unregister_system_shared_memory(name)
        for handle in self.handles:
            shm.destroy_shared_memory_region(handle)


@pytest.fixture
def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url, network_timeout=120)


@pytest.fixture
def grpc(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


@pytest.fixture
def regions(http, grpc) -> Iterator[Regions]:
    made = Regions([http])
    try:
        yield made
    finally:
        made.close()


def client_of(protocol: str, http, grpc):
    return http if protocol == "http" else grpc


def shm_input(module, name: str, array: np.ndarray, datatype: str, region: str, size: int,
              offset: int = 0):  # fmt: skip
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_shared_memory(region, size, offset)
    return tensor


def shm_output(module, name: str, region: str, size: int, offset: int = 0):
    output = (
        module.InferRequestedOutput(name)
        if module is grpcclient
        else (module.InferRequestedOutput(name, binary_data=False))
    )
    output.set_shared_memory(region, size, offset)
    return output


def sample(datatype: str, shape: tuple[int, ...]) -> tuple[np.ndarray, bytes]:
    """Values of ``datatype`` and their wire bytes."""
    count = int(np.prod(shape))
    if datatype == "BYTES":
        array = np.array([f"v{i}".encode() * (i + 1) for i in range(count)], dtype=np.object_)
        array = array.reshape(shape)
        return array, serialize_byte_tensor(array).item()
    if datatype == "BOOL":
        array = (np.arange(count) % 3 == 0).reshape(shape)
        return array, array.tobytes()
    if datatype == "BF16":
        array = (np.arange(count, dtype=np.uint16) + 0x3F80).reshape(shape)
        return array, array.tobytes()
    dtype = {"FP16": np.float16, "FP32": np.float32, "FP64": np.float64}.get(datatype)
    dtype = dtype or np.dtype(datatype.lower())
    array = (np.arange(count) + 1).astype(dtype).reshape(shape)
    return array, array.tobytes()


def write(handle, data: bytes, offset: int = 0) -> None:
    shm.set_shared_memory_region(handle, [np.frombuffer(data, np.uint8)], offset=offset)


def read(handle, size: int, offset: int = 0) -> bytes:
    return shm.get_contents_as_numpy(handle, np.uint8, [size], offset=offset).tobytes()


def error_of(call, *args, **kwargs) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call(*args, **kwargs)
    return info.value


# ------------------------------------------------------------------------------------------
# the extension's routes


def test_metadata_lists_system_shared_memory(http, grpc) -> None:
    extensions = http.get_server_metadata()["extensions"]
    assert "system_shared_memory" in extensions
    assert ("cuda_shared_memory" in extensions) == cuda_support().available
    assert "system_shared_memory" in grpc.get_server_metadata().extensions


def test_cuda_status_and_unregister_answer_on_the_shared_registry(http, grpc) -> None:
    """Clients that unregister both kinds (as perf_analyzer does when it ends) get Triton's
    answers where no CUDA region is registered."""
    assert http.get_cuda_shared_memory_status() == []
    http.unregister_cuda_shared_memory()
    grpc.unregister_cuda_shared_memory()
    error = error_of(http.get_cuda_shared_memory_status, "r")
    assert error.message() == "Unable to find cuda shared memory region: 'r'"


def test_register_status_unregister_over_http(http, regions) -> None:
    name, key, _ = regions.create(256)
    other, other_key, _ = regions.create(256)
    http.register_system_shared_memory(name, key, 128, 64)
    http.register_system_shared_memory(other, other_key, 256)
    status = {entry["name"]: entry for entry in http.get_system_shared_memory_status()}
    assert status[name] == {"name": name, "key": key, "offset": 64, "byte_size": 128}
    assert http.get_system_shared_memory_status(other) == [
        {"name": other, "key": other_key, "offset": 0, "byte_size": 256}
    ]
    http.unregister_system_shared_memory(name)
    error = error_of(http.get_system_shared_memory_status, name)
    assert error.status() == "404"
    assert error.message() == f"Unable to find system shared memory region: '{name}'"
    http.unregister_system_shared_memory()  # all of them
    assert http.get_system_shared_memory_status() == []


def test_a_region_name_is_percent_decoded_from_the_url(http, grpc, regions) -> None:
    _, key, _ = regions.create(64)
    name = "region one+é"
    http.register_system_shared_memory(name, key, 64)  # sent percent-encoded
    try:
        assert [row["name"] for row in http.get_system_shared_memory_status(name)] == [name]
        assert list(grpc.get_system_shared_memory_status(name, as_json=True)["regions"]) == [name]
    finally:
        http.unregister_system_shared_memory(name)
    assert http.get_system_shared_memory_status() == []


def test_register_status_unregister_over_grpc(grpc, regions) -> None:
    name, key, _ = regions.create(256)
    grpc.register_system_shared_memory(name, key, 192, 64)
    status = grpc.get_system_shared_memory_status(as_json=True)
    assert status["regions"][name] == {
        "name": name, "key": key, "offset": "64", "byte_size": "192"
    }  # fmt: skip
    one = grpc.get_system_shared_memory_status(name, as_json=True)
    assert list(one["regions"]) == [name]
    grpc.unregister_system_shared_memory()
    error = error_of(grpc.get_system_shared_memory_status, name)
    assert error.status() == "StatusCode.NOT_FOUND"


def test_register_needs_key_and_byte_size(server: ServerProcess) -> None:
    import urllib.error
    import urllib.request

    for body, missing in ((b'{"byte_size": 8}', "key"), (b'{"key": "/x"}', "byte_size")):
        request = urllib.request.Request(
            f"http://{server.http_url}/v2/systemsharedmemory/region/r/register", data=body
        )
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request, timeout=30)
        assert info.value.code == 400
        assert f"has no '{missing}' field" in info.value.read().decode()


# ------------------------------------------------------------------------------------------
# tensors in regions


@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("datatype", DATATYPES)
def test_every_datatype_in_and_out_of_regions(protocol, datatype, http, grpc, regions) -> None:
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    array, data = sample(datatype, (2, 3))
    size = len(data)
    name, _, handle = regions.create(4096, register_with=http)
    write(handle, data, 96)
    result = client.infer(
        f"identity_{datatype.lower()}",
        [shm_input(module, "INPUT0", array, datatype, name, size, 96)],
        outputs=[shm_output(module, "OUTPUT0", name, 4096 - 2048, 2048)],
    )
    output = result.get_output("OUTPUT0")
    shape = output["shape"] if protocol == "http" else list(output.shape)
    assert [int(d) for d in shape] == [2, 3]
    assert read(handle, size, 2048) == data


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_answer_for_an_output_in_a_region_is_metadata_only(protocol, http, grpc, regions) -> None:
    """HTTP: name, datatype and shape only; gRPC: an empty raw_output_contents entry."""
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    array, data = sample("FP32", (1, 4))
    name, _, handle = regions.create(1024, register_with=http)
    write(handle, data)
    result = client.infer(
        "identity_fp32",
        [shm_input(module, "INPUT0", array, "FP32", name, 16)],
        outputs=[shm_output(module, "OUTPUT0", name, 16, 512)],
    )
    if protocol == "http":
        expected = [{"name": "OUTPUT0", "datatype": "FP32", "shape": [1, 4]}]
        assert result.get_response()["outputs"] == expected
    else:
        assert list(result.get_response().raw_output_contents) == [b""]
    assert read(handle, 16, 512) == data


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_regions_mix_with_tensors_in_the_request(protocol, http, grpc, regions) -> None:
    """INPUT0 from a region at an offset, INPUT1 in the request; OUTPUT0 into a region,
    OUTPUT1 in the answer (gRPC: raw contents belong to the inputs not in regions)."""
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    left = np.arange(16, dtype=np.int32).reshape(1, 16)
    right = np.full((1, 16), 5, dtype=np.int32)
    name, _, handle = regions.create(4096, register_with=http, offset=1024)
    write(handle, left.tobytes(), 1024 + 64)
    first = shm_input(module, "INPUT0", left, "INT32", name, 64, 64)
    second = module.InferInput("INPUT1", [1, 16], "INT32")
    second.set_data_from_numpy(right)
    outputs = [
        shm_output(module, "OUTPUT0", name, 64, 1024),
        module.InferRequestedOutput("OUTPUT1"),
    ]
    result = client.infer("simple", [first, second], outputs=outputs)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), left - right)
    total = np.frombuffer(read(handle, 64, 1024 + 1024), np.int32).reshape(1, 16)
    np.testing.assert_array_equal(total, left + right)


def test_dynamic_batcher_gathers_requests_from_several_regions(http, regions) -> None:
    count = 4
    arrays = [np.full((1, 4), 10 * (i + 1), dtype=np.int32) for i in range(count)]
    made = []
    for array in arrays:
        name, _, handle = regions.create(256, register_with=http)
        write(handle, array.tobytes())
        made.append((name, handle))
    clients = [
        httpclient.InferenceServerClient(http._parsed_url.netloc, network_timeout=120)
        for _ in range(count)
    ]
    threads = []
    errors: list = []

    def send(index: int) -> None:
        name, _ = made[index]
        try:
            clients[index].infer(
                "batched",
                [
                    shm_input(httpclient, "INPUT0", arrays[index], "INT32", name, 16),
                    shm_input(httpclient, "INPUT1", arrays[index], "INT32", name, 16),
                ],
                outputs=[shm_output(httpclient, "OUTPUT0", name, 16, 128)],
            )
        except Exception as exc:  # reported below
            errors.append(exc)

    for index in range(count):
        thread = threading.Thread(target=send, args=(index,))
        thread.start()
        threads.append(thread)
    for thread in threads:
        thread.join(60)
    assert not errors
    for (_, handle), array in zip(made, arrays, strict=True):
        assert read(handle, 16, 128) == array.tobytes()
    stats = http.get_inference_statistics("batched")["model_stats"][0]
    assert any(batch["batch_size"] > 1 for batch in stats["batch_stats"])


def test_ensemble_reads_and_writes_regions_at_its_edges(http, grpc, regions) -> None:
    x = np.arange(4, dtype=np.float32).reshape(1, 4)
    y = np.full((1, 4), 0.5, dtype=np.float32)
    name, _, handle = regions.create(1024, register_with=http)
    write(handle, x.tobytes() + y.tobytes())
    for client, module in ((http, httpclient), (grpc, grpcclient)):
        client.infer(
            "ensemble",
            [
                shm_input(module, "X", x, "FP32", name, 16),
                shm_input(module, "Y", y, "FP32", name, 16, 16),
            ],
            outputs=[shm_output(module, "SUM", name, 16, 512)],
        )
        assert np.frombuffer(read(handle, 16, 512), np.float32).tolist() == (x + y)[0].tolist()
        write(handle, bytes(16), 512)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_python_model_reads_and_writes_regions(protocol, http, grpc, regions) -> None:
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    name, _, handle = regions.create(8192, register_with=http)
    for model, datatype in (("py_identity", "FP32"), ("py_bytes", "BYTES")):
        array, data = sample(datatype, (6,))
        write(handle, data)
        client.infer(
            model,
            [shm_input(module, "INPUT0", array, datatype, name, len(data))],
            outputs=[shm_output(module, "OUTPUT0", name, 4096, 4096)],
        )
        assert read(handle, len(data), 4096) == data


def test_decoupled_stream_writes_each_response_into_the_region(grpc, http, regions) -> None:
    text = np.array([b"hello"], dtype=np.object_)
    data = serialize_byte_tensor(text).item()
    name, _, handle = regions.create(1024, register_with=http)
    write(handle, data)
    answers: list = []
    done = threading.Event()

    def callback(result, error) -> None:
        answers.append((result, error))
        done.set()

    grpc.start_stream(callback=callback)
    try:
        grpc.async_stream_infer(
            "py_words",
            [shm_input(grpcclient, "INPUT0", text, "BYTES", name, len(data))],
            outputs=[shm_output(grpcclient, "OUTPUT0", name, 512, 512)],
        )
        assert done.wait(60)
    finally:
        grpc.stop_stream()
    result, error = answers[0]
    assert error is None
    assert list(result.get_response().raw_output_contents) == [b""]
    assert read(handle, len(data), 512) == data


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_sequence_reads_and_writes_regions(protocol, http, grpc, regions) -> None:
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    name, _, handle = regions.create(256, register_with=http)
    total = np.zeros((1, 4), np.int32)
    sequence_id = 7001 if protocol == "http" else 7002
    for step in range(3):
        values = np.full((1, 4), step + 1, np.int32)
        total += values
        write(handle, values.tobytes())
        client.infer(
            "accumulate",
            [shm_input(module, "INPUT0", values, "INT32", name, 16)],
            outputs=[shm_output(module, "OUTPUT0", name, 16, 128)],
            sequence_id=sequence_id,
            sequence_start=step == 0,
            sequence_end=step == 2,
        )
        assert read(handle, 16, 128) == total.tobytes()


def test_response_cache_keeps_values_not_the_region(http, regions) -> None:
    """An identity model answers with views of its inputs; the cache must copy them, or a
    later hit would answer with whatever the client wrote into the region since."""
    first, _, first_handle = regions.create(256, register_with=http)
    second, _, second_handle = regions.create(256, register_with=http)
    values = np.full((1, 4), 7, dtype=np.int32)

    def infer(region: str) -> None:
        http.infer(
            "cached",
            [
                shm_input(httpclient, "INPUT0", values, "INT32", region, 16),
                shm_input(httpclient, "INPUT1", values, "INT32", region, 16),
            ],
            outputs=[shm_output(httpclient, "OUTPUT0", region, 16, 128)],
        )

    write(first_handle, values.tobytes())
    infer(first)  # a miss: kept in the cache
    write(first_handle, np.full((1, 4), 9, dtype=np.int32).tobytes())
    write(second_handle, values.tobytes())
    infer(second)  # a hit
    assert read(second_handle, 16, 128) == values.tobytes()
    stats = http.get_inference_statistics("cached")["model_stats"][0]["inference_stats"]
    assert stats["cache_hit"]["count"] >= 1


# ------------------------------------------------------------------------------------------
# safety: each rule on its own


@pytest.mark.parametrize(
    "key",
    ["/proc/self/mem", "../../etc/passwd", "/a/b", "..", "/", "", "/dev/shm/x", "x\x00y"],
)
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_keys_that_are_not_posix_shm_names_are_refused(protocol, key, http, grpc) -> None:
    client = client_of(protocol, http, grpc)
    error = error_of(client.register_system_shared_memory, "bad_key", key, 8)
    assert "invalid shm key" in error.message()
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert http.is_server_live()


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        (b"not json", "failed to parse"),
        (b"[]", "must be a JSON object"),
        (b'{"key": 5, "byte_size": 8}', "Unable to parse 'key'"),
        (b'{"key": "/x", "byte_size": -1}', "Unable to parse 'byte_size'"),
        (b'{"key": "/x", "byte_size": 1.5}', "Unable to parse 'byte_size'"),
        (b'{"key": "/x", "byte_size": 8, "offset": "0"}', "Unable to parse 'offset'"),
        (b'{"key": "/x", "byte_size": 18446744073709551615}', "--shm-max-total-byte-size"),
        (b'{"key": "/x", "byte_size": 8, "offset": 18446744073709551615}', "Unable to open"),
    ],
)
def test_hostile_register_bodies_are_refused(server: ServerProcess, http, body, fragment) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://{server.http_url}/v2/systemsharedmemory/region/hostile/register", data=body
    )
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert fragment in info.value.read().decode()
    assert http.is_server_live()


def test_huge_offsets_and_sizes_of_an_existing_object_are_refused(http, grpc, regions) -> None:
    _, key, _ = regions.create(64)
    for client in (http, grpc):
        for size, offset in ((2**64 - 1, 0), (8, 2**64 - 8), (2**63, 2**63)):
            error = error_of(client.register_system_shared_memory, "huge", key, size, offset)
            # over the bytes limit, or past the object's end
            assert error.message().startswith("failed to register shared memory region 'huge'")
    assert http.get_system_shared_memory_status() == []


def test_a_symlink_in_dev_shm_is_not_followed(http) -> None:
    link = Path("/dev/shm") / f"tcshm_{uuid.uuid4().hex[:12]}"
    link.symlink_to("/etc/hostname")
    try:
        error = error_of(http.register_system_shared_memory, "link", f"/{link.name}", 4)
        assert error.message() == f"Unable to open shared memory region: '/{link.name}'"
    finally:
        link.unlink()
    assert http.get_system_shared_memory_status() == []


def test_something_other_than_a_regular_file_is_refused(http) -> None:
    fifo = Path("/dev/shm") / f"tcshm_{uuid.uuid4().hex[:12]}"
    os.mkfifo(fifo)
    try:
        error = error_of(http.register_system_shared_memory, "fifo", f"/{fifo.name}", 4)
        assert "not a shared memory object" in error.message()
    finally:
        fifo.unlink()


def test_register_beyond_the_object_is_refused(http, regions) -> None:
    _, key, _ = regions.create(64)
    for offset, size in ((32, 64), (0, 65), (64, 1), (0, 0)):
        error = error_of(http.register_system_shared_memory, "too_far", key, size, offset)
        assert error.message() == "failed to register shared memory region 'too_far': invalid args"
    assert http.get_system_shared_memory_status() == []


def test_duplicate_names_are_refused(http, grpc, regions) -> None:
    name, key, _ = regions.create(64, register_with=http)
    for client, status in ((http, "400"), (grpc, "StatusCode.ALREADY_EXISTS")):
        error = error_of(client.register_system_shared_memory, name, key, 64)
        assert error.message() == f"shared memory region '{name}' already in manager"
        assert error.status() == status


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_tensors_outside_their_region_are_refused(protocol, http, grpc, regions) -> None:
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    name, _, _ = regions.create(64, register_with=http)
    array = np.zeros((1, 4), np.float32)
    for offset, message in ((56, "Invalid offset + byte size"), (64, "Invalid offset")):
        error = error_of(
            client.infer,
            "identity_fp32",
            [shm_input(module, "INPUT0", array, "FP32", name, 16, offset)],
        )
        assert error.message() == f"{message} for shared memory region: '{name}'"
    error = error_of(
        client.infer,
        "identity_fp32",
        [shm_input(module, "INPUT0", array, "FP32", name, 16)],
        outputs=[shm_output(module, "OUTPUT0", name, 16, 60)],
    )
    assert "Invalid offset + byte size" in error.message()
    error = error_of(
        client.infer, "identity_fp32", [shm_input(module, "INPUT0", array, "FP32", "nope", 16)]
    )
    assert error.message() == "Unable to find shared memory region: 'nope'"


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_an_output_region_too_small_names_the_output(protocol, http, grpc, regions) -> None:
    client, module = client_of(protocol, http, grpc), CLIENTS[protocol]
    name, _, handle = regions.create(256, register_with=http)
    array, data = sample("FP32", (1, 8))
    write(handle, data)
    error = error_of(
        client.infer,
        "identity_fp32",
        [shm_input(module, "INPUT0", array, "FP32", name, 32)],
        outputs=[shm_output(module, "OUTPUT0", name, 16, 128)],
    )
    assert error.message() == (
        "shared memory size specified with the request for output 'OUTPUT0' (16 bytes) should "
        "be at least 32 bytes to hold the results"
    )
    assert error.status() in ("500", "StatusCode.INTERNAL")


def test_a_region_truncated_after_registering_is_a_400_not_a_crash(http, grpc, regions) -> None:
    name, key, handle = regions.create(4096, register_with=http)
    array, data = sample("FP32", (1, 256))
    write(handle, data)
    os.truncate(f"/dev/shm{key}", 16)
    cases = ((http, httpclient, "400"), (grpc, grpcclient, "StatusCode.INVALID_ARGUMENT"))
    for client, module, status in cases:
        error = error_of(
            client.infer, "identity_fp32", [shm_input(module, "INPUT0", array, "FP32", name, 1024)]
        )
        assert error.status() == status
        assert (
            f"shared memory region '{name}'" in error.message() and "truncated" in error.message()
        )
    # an output region truncated while the request runs: checked again before writing
    out, out_key, _ = regions.create(4096, register_with=http)
    os.truncate(f"/dev/shm{out_key}", 0)
    inputs = [httpclient.InferInput("INPUT0", [1, 256], "FP32")]
    inputs[0].set_data_from_numpy(array)
    error = error_of(
        http.infer, "identity_fp32", inputs, outputs=[shm_output(httpclient, "OUTPUT0", out, 1024)]
    )
    assert "truncated" in error.message()
    assert http.is_server_live() and http.is_server_ready()


def test_unregister_while_a_request_uses_the_region_is_safe(
    server: ServerProcess, repository: Path, http, regions
) -> None:
    started = repository / "started"
    started.unlink(missing_ok=True)
    name, key, handle = regions.create(256, register_with=http)
    values = np.full((1, 4), 3, dtype=np.int32)
    write(handle, values.tobytes())
    done: list = []

    def send() -> None:
        client = httpclient.InferenceServerClient(server.http_url, network_timeout=120)
        try:
            client.infer(
                "slow",
                [
                    shm_input(httpclient, "INPUT0", values, "INT32", name, 16),
                    shm_input(httpclient, "INPUT1", values, "INT32", name, 16),
                ],
                outputs=[shm_output(httpclient, "OUTPUT0", name, 16, 128)],
            )
            done.append(None)
        except Exception as exc:  # reported below
            done.append(exc)

    thread = threading.Thread(target=send)
    thread.start()
    wait_until(started.exists, 60, what="the model to start executing")
    http.unregister_system_shared_memory(name)
    assert http.get_system_shared_memory_status() == []
    http.register_system_shared_memory(name, key, 64)  # the name is free again
    thread.join(60)
    assert done == [None]
    assert read(handle, 16, 128) == values.tobytes()


# ------------------------------------------------------------------------------------------
# server settings: --allow-client-shm off, limits, restricted APIs


def test_client_shm_is_off_by_default(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with ServerProcess([tmp_path / "empty"]) as process:
        process.wait_ready(path="/v2/health/live")
        http = httpclient.InferenceServerClient(process.http_url)
        grpc = grpcclient.InferenceServerClient(process.grpc_url)
        assert http.get_system_shared_memory_status() == []
        for call in (
            lambda: http.register_system_shared_memory("r", "/tcshm_off", 8),
            lambda: http.unregister_system_shared_memory(),
        ):
            error = error_of(call)
            assert (error.status(), error.message()) == ("501", DISABLED_MESSAGE)
        error = error_of(grpc.register_system_shared_memory, "r", "/tcshm_off", 8)
        assert (error.status(), error.message()) == ("StatusCode.UNIMPLEMENTED", DISABLED_MESSAGE)
        assert grpc.get_system_shared_memory_status(as_json=True) == {}


def test_limits_and_restricted_routes(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    restricted = "shared-memory:shm-key=secret"
    with ServerProcess(
        [tmp_path / "empty"],
        "--allow-client-shm=true",
        "--shm-max-regions=2",
        "--shm-max-total-byte-size=8192",
        f"--http-restricted-api={restricted}",
        f"--grpc-restricted-protocol={restricted}",
    ) as process:
        process.wait_ready(path="/v2/health/live")
        http = httpclient.InferenceServerClient(process.http_url)
        grpc = grpcclient.InferenceServerClient(process.grpc_url)
        error = error_of(http.get_system_shared_memory_status)
        assert error.status() == "403"
        error = error_of(grpc.get_system_shared_memory_status)
        assert error.status() == "StatusCode.UNAVAILABLE"
        headers = {"shm-key": "secret"}
        made = Regions([])
        try:
            keys = [made.create(8192)[1] for _ in range(3)]
            http.register_system_shared_memory("a", keys[0], 4096, headers=headers)
            error = error_of(
                http.register_system_shared_memory, "b", keys[1], 8192, headers=headers
            )
            assert "--shm-max-total-byte-size" in error.message()
            grpc.register_system_shared_memory(
                "b", keys[1], 4096, headers={"triton-grpc-protocol-shm-key": "secret"}
            )
            error = error_of(http.register_system_shared_memory, "c", keys[2], 8, headers=headers)
            assert "--shm-max-regions" in error.message()
            http.unregister_system_shared_memory(headers=headers)
        finally:
            made.close()


# ------------------------------------------------------------------------------------------
# perf_analyzer


def find_perf_analyzer() -> str | None:
    found = shutil.which("perf_analyzer")
    if found:
        return found
    candidate = Path.home() / ".cache" / "peer-tools" / "bin" / "perf_analyzer"
    return str(candidate) if candidate.exists() else None


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_perf_analyzer_with_system_shared_memory(protocol, server: ServerProcess) -> None:
    tool = find_perf_analyzer()
    if tool is None:
        pytest.skip("perf_analyzer is not installed (shared/tools/setup-peer-tools.sh)")
    url = server.http_url if protocol == "http" else server.grpc_url
    command = [
        tool, "-m", "identity_fp32", "-u", url.removeprefix("http://"), "-i", protocol,
        "--shared-memory", "system", "--output-shared-memory-size", "4096",
        "--shape", "INPUT0:16", "--concurrency-range", "2:2",
        "--measurement-mode", "count_windows", "--measurement-request-count", "100",
        "--max-trials", "10", "--stability-percentage", "900",
    ]  # fmt: skip
    output = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert output.returncode == 0, output.stdout[-3000:] + output.stderr[-2000:]
    assert "Throughput" in output.stdout
    assert "Unable to" not in output.stdout + output.stderr  # its clean-up went through
    http = httpclient.InferenceServerClient(server.http_url)
    assert http.get_system_shared_memory_status() == []  # perf_analyzer unregistered its own
