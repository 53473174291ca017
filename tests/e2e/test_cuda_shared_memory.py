"""CUDA shared memory end to end: the stock tritonclient against a real server process, over
HTTP and gRPC.

Everywhere: register requests are checked field by field before any CUDA call, and a server
that cannot open CUDA handles says why. On a GPU machine (``gpu`` marker): regions made with
``tritonclient.utils.cuda_shared_memory`` carry the inputs and outputs of an ONNX, a PyTorch
and a Python model; GPU instances (ONNX Runtime's CUDA provider, outputs of fixed size bound
into the region and of variable size copied there on the device; TorchScript on CUDA) read
and write the regions in place, which the server's host-copy counter
(``triton_core_cuda_shared_memory_host_copies``) shows, and a CPU instance gets host copies.
"""

from __future__ import annotations

import base64
import contextlib
import re
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from types import SimpleNamespace

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.e2e.test_shared_memory import PYTHON_IDENTITY, client_of, error_of, python_model
from tests.support import ServerProcess
from triton_core.shared_memory.cuda import cuda_support

onnx_builders = pytest.importorskip("triton_core_onnx.model_builders")
torch_builders = pytest.importorskip("triton_core_torch.model_builders")

pytestmark = pytest.mark.timeout(300)

CUDA = cuda_support()
NEEDS_GPU = pytest.mark.skipif(
    not CUDA.available, reason=f"CUDA shared memory cannot run here: {CUDA.reason}"
)
BAD_HANDLE = "'raw_handle' must be a valid base64 encoded cudaIpcMemHandle_t"
#: 64 bytes shaped like a cudaIpcMemHandle_t that no process exported
CRAFTED_HANDLE = bytes(range(64))

TORCH_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 4 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 4 ] } ]
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    root = tmp_path_factory.mktemp("cudashm_models")
    onnx_builders.identity(root / "onnx_identity" / "1" / "model.onnx", "FP32")
    torch_builders.save(torch_builders.AddSub(), root / "torch_add_sub" / "1" / "model.pt")
    (root / "torch_add_sub" / "config.pbtxt").write_text(TORCH_CONFIG)
    python_model(root, "py_identity", PYTHON_IDENTITY, "TYPE_FP32")
    yield from serve(root)


def serve(root, *flags: str) -> Iterator[ServerProcess]:  # type: ignore[no-untyped-def]
    """A server process for the models under ``root``, clients' shared memory allowed."""
    process = ServerProcess([root], "--allow-client-shm=true", *flags)
    try:
        process.wait_ready(timeout=180)
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


@pytest.fixture
def http(server: ServerProcess) -> httpclient.InferenceServerClient:
    return httpclient.InferenceServerClient(server.http_url, network_timeout=120)


@pytest.fixture
def grpc(server: ServerProcess) -> grpcclient.InferenceServerClient:
    return grpcclient.InferenceServerClient(server.grpc_url)


def region_name() -> str:
    return f"tccudashm_{uuid.uuid4().hex[:12]}"


def post(server: ServerProcess, path: str, body: bytes) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# ------------------------------------------------------------------------------------------
# the register request, checked before any CUDA call (any machine)


@pytest.mark.parametrize("size", [0, 63, 65, 300])
def test_a_handle_not_64_bytes_is_refused_over_http(server, size) -> None:
    b64 = base64.b64encode(bytes(size)).decode()
    body = f'{{"raw_handle": {{"b64": "{b64}"}}, "device_id": 0, "byte_size": 16}}'
    status, text = post(
        server, f"/v2/cudasharedmemory/region/{region_name()}/register", body.encode()
    )
    assert (status, text) == (400, f'{{"error":"{BAD_HANDLE}"}}')


def test_a_region_name_is_needed(server, grpc) -> None:
    body = b'{"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 16}'
    status, text = post(server, "/v2/cudasharedmemory/register", body)
    message = "'region name' is necessary to register cuda shared memory region"
    assert (status, text) == (400, f'{{"error":"{message}"}}')
    error = error_of(grpc.register_cuda_shared_memory, "", base64.b64encode(CRAFTED_HANDLE), 0, 16)
    assert error.message() == message


def test_a_large_register_body_is_refused_unread(server) -> None:
    padding = " " * (1 << 17)
    body = f'{{"raw_handle": {{"b64": ""}}, "device_id": 0, "byte_size": 16{padding}}}'
    status, text = post(server, "/v2/cudasharedmemory/region/r/register", body.encode())
    assert status == 400 and f"register request body is {len(body)} bytes" in text, text


def test_a_handle_not_base64_is_refused_over_http(server) -> None:
    body = b'{"raw_handle": {"b64": "not base64 at all!"}, "device_id": 0, "byte_size": 16}'
    status, text = post(server, "/v2/cudasharedmemory/region/r/register", body)
    assert status == 400 and BAD_HANDLE in text


@pytest.mark.parametrize(
    ("body", "named"),
    [
        (b'{"device_id": 0, "byte_size": 16}', "has no 'raw_handle' field"),
        (b'{"raw_handle": "abc", "device_id": 0, "byte_size": 16}', "'b64'"),
        (b'{"raw_handle": {"b64": ""}, "device_id": 0}', "has no 'byte_size' field"),
        (b'{"raw_handle": {"b64": ""}, "byte_size": 16}', "has no 'device_id' field"),
        (b'{"raw_handle": {"b64": ""}, "device_id": -1, "byte_size": 16}', "'device_id'"),
        (b'{"raw_handle": {"b64": ""}, "device_id": 0, "byte_size": 1e3}', "'byte_size'"),
        (b"[1, 2]", "must be a JSON object"),
    ],
)
def test_malformed_register_bodies_are_refused_naming_the_field(server, body, named) -> None:
    status, text = post(server, "/v2/cudasharedmemory/region/r/register", body)
    assert status == 400 and named in text, text


@pytest.mark.parametrize("size", [0, 63, 65])
def test_a_handle_not_64_bytes_is_refused_over_grpc(grpc, size) -> None:
    raw = base64.b64encode(bytes(size))
    error = error_of(grpc.register_cuda_shared_memory, region_name(), raw, 0, 16)
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert error.message() == BAD_HANDLE


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_zero_byte_size_is_refused(protocol, http, grpc) -> None:
    client = client_of(protocol, http, grpc)
    name = region_name()
    raw = base64.b64encode(CRAFTED_HANDLE)
    error = error_of(client.register_cuda_shared_memory, name, raw, 0, 0)
    assert error.message() == f"failed to register shared memory region '{name}': invalid args"


def test_a_negative_device_id_is_refused_over_grpc(grpc) -> None:
    name = region_name()
    raw = base64.b64encode(CRAFTED_HANDLE)
    error = error_of(grpc.register_cuda_shared_memory, name, raw, -3, 16)
    assert error.status() == "StatusCode.INVALID_ARGUMENT"
    assert "invalid device id -3" in error.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_byte_size_over_the_registry_limit_is_refused(protocol, http, grpc) -> None:
    client = client_of(protocol, http, grpc)
    raw = base64.b64encode(CRAFTED_HANDLE)
    error = error_of(client.register_cuda_shared_memory, region_name(), raw, 0, 1 << 40)
    assert "--shm-max-total-byte-size" in error.message()


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_device_the_server_lacks_is_refused(protocol, http, grpc) -> None:
    client = client_of(protocol, http, grpc)
    name = region_name()
    raw = base64.b64encode(CRAFTED_HANDLE)
    error = error_of(client.register_cuda_shared_memory, name, raw, 4096, 16)
    assert f"'{name}'" in error.message()
    if CUDA.available:
        assert "device 4096 is not a CUDA device of the server" in error.message()
    assert http.get_cuda_shared_memory_status() == []


# ------------------------------------------------------------------------------------------
# a server that cannot open CUDA handles (no GPU, or no cuda-python)


@pytest.mark.skipif(CUDA.available, reason="checks the answer of a server without CUDA")
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_without_cuda_registering_says_why(protocol, http, grpc) -> None:
    client = client_of(protocol, http, grpc)
    name = region_name()
    error = error_of(
        client.register_cuda_shared_memory, name, base64.b64encode(CRAFTED_HANDLE), 0, 1024
    )
    assert error.status() in ("400", "StatusCode.INVALID_ARGUMENT")
    assert error.message() == (
        f"failed to register CUDA shared memory region: '{name}', GPUs not supported: {CUDA.reason}"
    )
    # nothing was registered; status and unregister still answer
    assert http.get_cuda_shared_memory_status() == []
    assert error_of(http.get_cuda_shared_memory_status, name).status() == "404"
    http.unregister_cuda_shared_memory(name)
    grpc.unregister_cuda_shared_memory()


@pytest.mark.skipif(CUDA.available, reason="checks the metadata of a server without CUDA")
def test_without_cuda_the_metadata_does_not_list_cuda_shared_memory(http, grpc) -> None:
    assert "cuda_shared_memory" not in http.get_server_metadata()["extensions"]
    assert "cuda_shared_memory" not in grpc.get_server_metadata().extensions
    assert "system_shared_memory" in grpc.get_server_metadata().extensions


# ------------------------------------------------------------------------------------------
# a GPU machine: regions made with tritonclient.utils.cuda_shared_memory


class CudaRegions:
    """Device allocations a test makes (own prefix), unregistered and freed after it."""

    def __init__(self, client) -> None:
        import tritonclient.utils.cuda_shared_memory as cudashm

        self.cudashm = cudashm
        self.client = client
        self.made: list[tuple[str, object]] = []

    def create(self, size: int, register: bool = True) -> tuple[str, object]:
        name = region_name()
        handle = self.cudashm.create_shared_memory_region(name, size, 0)
        self.made.append((name, handle))
        if register:
            self.client.register_cuda_shared_memory(
                name, self.cudashm.get_raw_handle(handle), 0, size
            )
        return name, handle

    def close(self) -> None:
        for name, handle in self.made:
            with contextlib.suppress(InferenceServerException):
                self.client.unregister_cuda_shared_memory(name)
            self.cudashm.destroy_shared_memory_region(handle)


@pytest.fixture
def cuda_regions(http) -> Iterator[CudaRegions]:
    made = CudaRegions(http)
    try:
        yield made
    finally:
        made.close()


def infer_in_regions(
    protocol: str,
    http,
    grpc,
    cuda_regions: CudaRegions,
    model: str,
    inputs: dict[str, np.ndarray],
    outputs: list[str],
) -> dict[str, np.ndarray]:
    """Inputs written into CUDA regions, outputs asked into CUDA regions, read back."""
    client = client_of(protocol, http, grpc)
    module = httpclient if protocol == "http" else grpcclient
    cudashm = cuda_regions.cudashm
    tensors = []
    for name, array in inputs.items():
        region, handle = cuda_regions.create(array.nbytes)
        cudashm.set_shared_memory_region(handle, [array])
        tensor = module.InferInput(name, list(array.shape), "FP32")
        tensor.set_shared_memory(region, array.nbytes)
        tensors.append(tensor)
    size = next(iter(inputs.values())).nbytes
    requested, handles = [], {}
    for name in outputs:
        region, handles[name] = cuda_regions.create(size)
        output = module.InferRequestedOutput(name)
        output.set_shared_memory(region, size)
        requested.append(output)
    result = client.infer(model, tensors, outputs=requested)
    shape = next(iter(inputs.values())).shape
    for name in outputs:  # the answer names the output; its values are in the region only
        output = result.get_output(name)
        if protocol == "http":
            assert "data" not in output and "binary_data_size" not in output.get("parameters", {})
            listed = output["shape"]
        else:
            listed = list(output.shape)
        assert [int(d) for d in listed] == list(shape)
    return {
        name: cudashm.get_contents_as_numpy(handles[name], np.float32, list(shape))
        for name in outputs
    }


@pytest.mark.gpu
@NEEDS_GPU
def test_metadata_lists_cuda_shared_memory(http, grpc) -> None:
    extensions = http.get_server_metadata()["extensions"]
    at = extensions.index("system_shared_memory")
    assert extensions[at + 1] == "cuda_shared_memory"
    assert "cuda_shared_memory" in grpc.get_server_metadata().extensions


@pytest.mark.gpu
@NEEDS_GPU
def test_register_status_unregister(http, grpc, cuda_regions) -> None:
    name, handle = cuda_regions.create(1024, register=False)
    raw = cuda_regions.cudashm.get_raw_handle(handle)
    grpc.register_cuda_shared_memory(name, raw, 0, 512)
    assert http.get_cuda_shared_memory_status(name) == [
        {"name": name, "device_id": 0, "byte_size": 512}
    ]
    error = error_of(http.register_cuda_shared_memory, name, raw, 0, 512)
    assert error.message() == f"shared memory region '{name}' already in manager"
    error = error_of(http.get_system_shared_memory_status, name)
    assert "registered as CUDA shared memory" in error.message()
    http.unregister_cuda_shared_memory(name)
    assert http.get_cuda_shared_memory_status() == []


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_byte_size_past_the_allocation_is_refused(protocol, http, grpc, cuda_regions) -> None:
    client = client_of(protocol, http, grpc)
    name, handle = cuda_regions.create(1 << 20, register=False)
    raw = cuda_regions.cudashm.get_raw_handle(handle)
    # cudaMalloc rounds up to its granularity; far past it is out of bounds
    error = error_of(client.register_cuda_shared_memory, name, raw, 0, 64 << 20)
    assert error.message() == f"failed to register shared memory region '{name}': invalid args"


@pytest.mark.gpu
@NEEDS_GPU
def test_a_crafted_handle_is_refused(http) -> None:
    name = region_name()
    error = error_of(
        http.register_cuda_shared_memory, name, base64.b64encode(CRAFTED_HANDLE), 0, 1024
    )
    assert error.message() == "failed to register shared memory region: invalid args"


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_onnx_inputs_and_outputs_in_cuda_regions(protocol, http, grpc, cuda_regions) -> None:
    x = np.random.default_rng(1).standard_normal((3, 1000)).astype(np.float32)
    out = infer_in_regions(
        protocol, http, grpc, cuda_regions, "onnx_identity", {"INPUT0": x}, ["OUTPUT0"]
    )
    np.testing.assert_array_equal(out["OUTPUT0"], x)


@pytest.mark.gpu
@NEEDS_GPU
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_pytorch_inputs_and_outputs_in_cuda_regions(protocol, http, grpc, cuda_regions) -> None:
    add_sub_in_regions(protocol, http, grpc, cuda_regions, "torch_add_sub")


def add_sub_in_regions(protocol, http, grpc, cuda_regions, model: str) -> None:  # type: ignore[no-untyped-def]
    """The AddSub model's inputs and outputs in CUDA regions, its results checked."""
    x = np.arange(8, dtype=np.float32).reshape(2, 4)
    y = np.full((2, 4), 0.5, dtype=np.float32)
    out = infer_in_regions(
        protocol,
        http,
        grpc,
        cuda_regions,
        model,
        {"INPUT__0": x, "INPUT__1": y},
        ["OUTPUT__0", "OUTPUT__1"],
    )
    np.testing.assert_array_equal(out["OUTPUT__0"], x + y)
    np.testing.assert_array_equal(out["OUTPUT__1"], x - y)


@pytest.mark.gpu
@NEEDS_GPU
def test_python_model_inputs_and_outputs_in_cuda_regions(http, grpc, cuda_regions) -> None:
    x = np.linspace(0, 1, 4096, dtype=np.float32)
    out = infer_in_regions(
        "grpc", http, grpc, cuda_regions, "py_identity", {"INPUT0": x}, ["OUTPUT0"]
    )
    np.testing.assert_array_equal(out["OUTPUT0"], x)


@pytest.mark.gpu
@NEEDS_GPU
def test_an_output_region_too_small_names_the_output(http, cuda_regions) -> None:
    cudashm = cuda_regions.cudashm
    x = np.ones((1, 64), np.float32)
    region, handle = cuda_regions.create(x.nbytes)
    cudashm.set_shared_memory_region(handle, [x])
    small, _ = cuda_regions.create(16)
    tensor = httpclient.InferInput("INPUT0", [1, 64], "FP32")
    tensor.set_shared_memory(region, x.nbytes)
    output = httpclient.InferRequestedOutput("OUTPUT0")
    output.set_shared_memory(small, 16)
    error = error_of(http.infer, "onnx_identity", [tensor], outputs=[output])
    assert "for output 'OUTPUT0' (16 bytes) should be at least 256 bytes" in error.message()


# ------------------------------------------------------------------------------------------
# a GPU machine: GPU instances take the regions as device memory, with no host copy

ON_GPU = "instance_group [ { kind: KIND_GPU count: 1 gpus: [ 0 ] } ]"
ON_CPU = "instance_group [ { kind: KIND_CPU count: 1 } ]"


def _ort_cuda() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def _torch_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


NEEDS_ORT_CUDA = pytest.mark.skipif(
    not (CUDA.available and _ort_cuda()), reason="no CUDA regions or no ORT CUDA provider"
)
NEEDS_TORCH_CUDA = pytest.mark.skipif(
    not (CUDA.available and _torch_cuda()), reason="no CUDA regions or no CUDA in torch"
)


def onnx_model(root, name: str, dims: tuple[int, ...], group: str) -> None:  # type: ignore[no-untyped-def]
    onnx_builders.identity(root / name / "1" / "model.onnx", "FP32", dims)
    config = f'backend: "onnxruntime"\nmax_batch_size: 8\n{group}\n'
    (root / name / "config.pbtxt").write_text(config)


@pytest.fixture(scope="module")
def device_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """GPU instances, and a CPU one to compare with; a GPU model that cannot load here
    fails its own tests (naming why), not the others."""
    root = tmp_path_factory.mktemp("cuda_device_models")
    onnx_model(root, "onnx_fixed_cpu", (1000,), ON_CPU)
    onnx_model(root, "onnx_fixed_gpu", (1000,), ON_GPU)
    onnx_model(root, "onnx_variable_gpu", (-1,), ON_GPU)
    torch_builders.save(torch_builders.AddSub(), root / "torch_gpu" / "1" / "model.pt")
    (root / "torch_gpu" / "config.pbtxt").write_text(TORCH_CONFIG + ON_GPU)
    yield from serve(root, "--exit-on-error=false", "--strict-readiness=false")


@pytest.fixture
def on_device(device_server: ServerProcess) -> Iterator[SimpleNamespace]:
    """The device server, its clients and regions made for it."""
    http = httpclient.InferenceServerClient(device_server.http_url, network_timeout=120)
    grpc = grpcclient.InferenceServerClient(device_server.grpc_url)
    regions = CudaRegions(http)
    try:
        yield SimpleNamespace(server=device_server, http=http, grpc=grpc, regions=regions)
    finally:
        regions.close()


def host_copies(device, model: str) -> int:  # type: ignore[no-untyped-def]
    """The server's host-copy counter, once ``model`` is known to be ready."""
    assert device.http.is_model_ready(model), device.server.log()[-4000:]
    with urllib.request.urlopen(device.server.metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    found = re.search(r"^triton_core_cuda_shared_memory_host_copies (\d+)", text, re.MULTILINE)
    assert found, "the host-copy counter is listed where CUDA regions can be opened"
    return int(found.group(1))


@pytest.mark.gpu
@NEEDS_ORT_CUDA
@pytest.mark.parametrize("protocol", ["http", "grpc"])
@pytest.mark.parametrize("model", ["onnx_fixed_gpu", "onnx_variable_gpu"])
def test_onnx_cuda_instance_reads_and_writes_regions_on_the_device(
    protocol, model, on_device
) -> None:
    x = np.random.default_rng(7).standard_normal((3, 1000)).astype(np.float32)
    before = host_copies(on_device, model)
    device = on_device
    out = infer_in_regions(
        protocol, device.http, device.grpc, device.regions, model, {"INPUT0": x}, ["OUTPUT0"]
    )
    np.testing.assert_array_equal(out["OUTPUT0"], x)
    assert host_copies(on_device, model) == before


@pytest.mark.gpu
@NEEDS_TORCH_CUDA
@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_torch_cuda_instance_reads_and_writes_regions_on_the_device(protocol, on_device) -> None:
    before = host_copies(on_device, "torch_gpu")
    device = on_device
    add_sub_in_regions(protocol, device.http, device.grpc, device.regions, "torch_gpu")
    assert host_copies(on_device, "torch_gpu") == before


@pytest.mark.gpu
@NEEDS_GPU
def test_a_cpu_instance_gets_host_copies_of_the_same_regions(on_device) -> None:
    x = np.ones((2, 1000), np.float32)
    before = host_copies(on_device, "onnx_fixed_cpu")
    device = on_device
    out = infer_in_regions(
        "http",
        device.http,
        device.grpc,
        device.regions,
        "onnx_fixed_cpu",
        {"INPUT0": x},
        ["OUTPUT0"],
    )
    np.testing.assert_array_equal(out["OUTPUT0"], x)
    assert host_copies(on_device, "onnx_fixed_cpu") == before + 2  # input to host, output back
