"""A real ``triton-core serve`` process on PyTorch models, driven by tritonclient HTTP and gRPC."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest
import torch
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aiogrpcclient
import tritonclient.http as httpclient
from triton_core_torch import model_builders as mb
from tritonclient.utils import InferenceServerException, triton_to_np_dtype

from triton_core.testing import ServerProcess, grpc_inputs, http_inputs

SIMPLE_CONFIG = """
platform: "pytorch_libtorch"
max_batch_size: 8
input [
  { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "INPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }
]
output [
  { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] },
  { name: "OUTPUT__1" data_type: TYPE_INT32 dims: [ 16 ] }
]
dynamic_batching { }
"""
CONVNET_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_FP32 dims: [ 3, 16, 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 10 ] } ]
dynamic_batching { max_queue_delay_microseconds: 1000 }
"""
PROBE_CONFIG = """
backend: "pytorch"
default_model_filename: "model.pt2"
max_batch_size: 32
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
DICT_CONFIG = """
backend: "pytorch"
max_batch_size: 4
input [ { name: "x" data_type: TYPE_FP32 dims: [ 2 ] } ]
output [
  { name: "sum" data_type: TYPE_FP32 dims: [ 1 ] },
  { name: "scaled" data_type: TYPE_FP32 dims: [ 2 ] }
]
"""
RAISING_CONFIG = """
backend: "pytorch"
max_batch_size: 4
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
STRINGS_CONFIG = """
backend: "pytorch"
max_batch_size: 4
input [ { name: "text" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [ ] } } ]
output [ { name: "OUTPUT__0" data_type: TYPE_STRING dims: [ 1 ] reshape: { shape: [ ] } } ]
"""
IDENTITY_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ {{ name: "INPUT__0" data_type: TYPE_{0} dims: [ 3 ] }} ]
output [ {{ name: "OUTPUT__0" data_type: TYPE_{0} dims: [ 3 ] }} ]
"""
#: a config whose inputs do not match the model: AddSub takes two
BAD_CONFIG = """
backend: "pytorch"
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_INT32 dims: [ 16 ] } ]
"""
IDENTITY_DATATYPES = ("BOOL", "INT8", "UINT64", "FP16", "BF16", "FP64")
#: simple (TorchScript) then scale (torch.export, auto-completed max_batch_size 4):
#: OUT = (A + B) * (A - B) as FP32
ENSEMBLE_CONFIG = """
platform: "ensemble"
max_batch_size: 4
input [ { name: "A" data_type: TYPE_INT32 dims: [ 16 ] },
        { name: "B" data_type: TYPE_INT32 dims: [ 16 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ 16 ] } ]
ensemble_scheduling {
  step [ { model_name: "simple" model_version: -1
           input_map { key: "INPUT__0" value: "A" } input_map { key: "INPUT__1" value: "B" }
           output_map { key: "OUTPUT__0" value: "SUM" }
           output_map { key: "OUTPUT__1" value: "DIFF" } },
         { model_name: "scale" model_version: -1
           input_map { key: "x" value: "SUM" } input_map { key: "y" value: "DIFF" }
           output_map { key: "OUTPUT__0" value: "OUT" } } ]
}
"""


class Scale(torch.nn.Module):
    """``x (INT32) * y (INT32)`` as FP32: the second step of the ensemble."""

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return (x * y).to(torch.float32)


def model(root: Path, name: str, config: str | None = None) -> Path:
    (root / name / "1").mkdir(parents=True)
    if config is not None:
        (root / name / "config.pbtxt").write_text(config)
    return root / name / "1"


def build_repository(root: Path) -> Path:
    mb.save(mb.AddSub(), model(root, "simple", SIMPLE_CONFIG) / "model.pt", "script")
    convnet = mb.seeded(mb.ConvNet)
    example = (torch.zeros(2, 3, 16, 16),)
    mb.save(convnet, model(root, "convnet", CONVNET_CONFIG) / "model.pt", "trace", example)
    # torch.export programs: config completed from the program, found as model.pt2
    mlp = mb.seeded(mb.Mlp)
    mb.save(mlp, model(root, "mlp", 'backend: "pytorch"\n') / "model.pt2", "export",
            (torch.zeros(2, 64),))  # fmt: skip
    probe = mb.BatchProbe(mb.seeded(mb.Mlp, in_features=4, out_features=2))
    mb.save(probe, model(root, "probe", PROBE_CONFIG) / "model.pt2", "export", (torch.zeros(2, 4),))
    mixed = (torch.zeros(2, 4), torch.zeros(2, 4, dtype=torch.int64))
    mb.save(mb.Mixed(), model(root, "mixed", 'backend: "pytorch"\n') / "model.pt2", "export",
            mixed)  # fmt: skip
    mb.save(mb.DictOutputs(), model(root, "dict_out", DICT_CONFIG) / "model.pt", "script")
    mb.save(mb.Raising(), model(root, "raising", RAISING_CONFIG) / "model.pt", "script")
    mb.save(mb.Strings(), model(root, "strings", STRINGS_CONFIG) / "model.pt", "script")
    for datatype in IDENTITY_DATATYPES:
        path = model(root, f"identity_{datatype.lower()}", IDENTITY_CONFIG.format(datatype))
        mb.save(mb.Identity(), path / "model.pt", "script")
    mb.save(mb.AddSub(), model(root, "bad", BAD_CONFIG) / "model.pt", "script")
    ints = (torch.zeros(2, 16, dtype=torch.int32), torch.zeros(2, 16, dtype=torch.int32))
    mb.save(Scale(), model(root, "scale", 'backend: "pytorch"\n') / "model.pt2", "export", ints)
    model(root, "pipeline", ENSEMBLE_CONFIG)
    return root


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    repo = build_repository(tmp_path_factory.mktemp("torch_models"))
    process = ServerProcess([repo], "--exit-on-error=false", "--strict-readiness=false")
    try:
        process.wait_ready(timeout=120)
        yield process
    finally:
        code = process.stop()
        assert code == 0, process.log()[-4000:]


@pytest.fixture(scope="module")
def http(server):
    with httpclient.InferenceServerClient(server.http_url, network_timeout=60) as client:
        yield client


@pytest.fixture(scope="module")
def grpc(server):
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


def client_module(protocol: str):
    return httpclient if protocol == "http" else grpcclient


def infer(clients, protocol, name, arrays, outputs=None):
    module = client_module(protocol)
    inputs = (http_inputs if protocol == "http" else grpc_inputs)(arrays)
    requested = None if outputs is None else [module.InferRequestedOutput(n) for n in outputs]
    return clients[protocol].infer(name, inputs, outputs=requested)


@pytest.fixture(scope="module")
def clients(http, grpc):
    return {"http": http, "grpc": grpc}


PROTOCOLS = ["http", "grpc"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_simple_add_sub_scripted(clients, protocol):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.ones((2, 16), dtype=np.int32)
    result = infer(
        clients, protocol, "simple", {"INPUT__0": ("INT32", a), "INPUT__1": ("INT32", b)}
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__1"), a - b)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_traced_convnet_by_argument_name(clients, protocol):
    x = np.random.default_rng(0).standard_normal((3, 3, 16, 16)).astype(np.float32)
    result = infer(clients, protocol, "convnet", {"x": ("FP32", x)})
    expected = mb.seeded(mb.ConvNet).eval()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-4, atol=1e-5)


def test_exported_program_metadata_and_config_are_completed(http):
    metadata = http.get_model_metadata("mlp")
    assert metadata["platform"] == "pytorch_libtorch"
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 64]}]
    assert metadata["outputs"] == [{"name": "OUTPUT__0", "datatype": "FP32", "shape": [-1, 10]}]
    config = http.get_model_config("mlp")
    assert config["max_batch_size"] == 4
    assert config["default_model_filename"] == "model.pt2"
    assert "dynamic_batching" in config


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_exported_program_infers(clients, protocol):
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    result = infer(clients, protocol, "mlp", {"x": ("FP32", x)})
    expected = mb.seeded(mb.Mlp).eval()(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_two_inputs_of_different_datatypes(clients, protocol):
    x = np.full((2, 4), 0.5, dtype=np.float32)
    y = np.arange(8, dtype=np.int64).reshape(2, 4)
    result = infer(clients, protocol, "mixed", {"x": ("FP32", x), "y": ("INT64", y)})
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), x * y)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_dict_outputs_by_name(clients, protocol):
    x = np.array([[1.0, 2.0]], dtype=np.float32)
    result = infer(clients, protocol, "dict_out", {"x": ("FP32", x)}, outputs=["scaled"])
    np.testing.assert_array_equal(result.as_numpy("scaled"), 2 * x)
    assert result.as_numpy("sum") is None
    result = infer(clients, protocol, "dict_out", {"x": ("FP32", x)})
    np.testing.assert_array_equal(result.as_numpy("sum"), [[3.0]])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_strings_in_and_out(clients, protocol):
    text = np.array([["caf\u00e9".encode()], [b"ab"]], dtype=object)
    result = infer(clients, protocol, "strings", {"text": ("BYTES", text)})
    # TorchScript's str.upper() changes ASCII letters only.
    assert result.as_numpy("OUTPUT__0").ravel().tolist() == ["CAF\u00e9".encode(), b"AB"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("datatype", IDENTITY_DATATYPES)
def test_datatypes_round_trip(clients, protocol, datatype):
    values = np.arange(6).reshape(2, 3) - 2
    if datatype == "BOOL":
        data = values % 2 == 0
    elif datatype == "UINT64":
        data = (values + 2).astype(np.uint64) * np.uint64(1 << 40)
    else:
        data = values.astype(np.float32).astype(triton_to_np_dtype(datatype))
    result = infer(
        clients, protocol, f"identity_{datatype.lower()}", {"INPUT__0": (datatype, data)}
    )
    out = result.as_numpy("OUTPUT__0")
    np.testing.assert_array_equal(out.astype(np.float64), data.astype(np.float64))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_bad_requests_get_clear_errors_and_the_server_keeps_serving(clients, protocol):
    wrong_shape = np.zeros((1, 15), dtype=np.int32)
    with pytest.raises(InferenceServerException) as info:
        infer(clients, protocol, "simple",
              {"INPUT__0": ("INT32", wrong_shape), "INPUT__1": ("INT32", wrong_shape)})  # fmt: skip
    assert "INPUT__0" in info.value.message() and "[-1,16]" in info.value.message()

    wrong_type = np.zeros((1, 16), dtype=np.float32)
    with pytest.raises(InferenceServerException) as info:
        infer(clients, protocol, "simple",
              {"INPUT__0": ("FP32", wrong_type), "INPUT__1": ("FP32", wrong_type)})  # fmt: skip
    assert "INPUT__0" in info.value.message() and "INT32" in info.value.message()

    with pytest.raises(InferenceServerException) as info:
        infer(clients, protocol, "raising", {"INPUT__0": ("FP32", -np.ones((1, 3), np.float32))})
    message = info.value.message()
    assert "negative input rejected by the model" in message and "raising" in message
    if protocol == "http":
        assert info.value.status() == "500"
    else:
        assert info.value.status() == "StatusCode.INTERNAL"

    result = infer(
        clients, protocol, "raising", {"INPUT__0": ("FP32", np.ones((1, 3), np.float32))}
    )
    np.testing.assert_array_equal(result.as_numpy("OUTPUT__0"), np.full((1, 3), 2.0))
    test_simple_add_sub_scripted(clients, protocol)


def test_config_that_does_not_match_the_model_fails_its_load(server, http):
    assert not http.is_model_ready("bad")
    assert http.is_model_ready("simple")
    (line,) = [line for line in server.log().splitlines() if "failed to load 'bad'" in line]
    assert "INPUT__0" in line and "forward(x: Tensor, y: Tensor)" in line


def test_dynamic_batching_concatenates_requests_across_instances(server, http):
    rng = np.random.default_rng(2)
    data = [rng.standard_normal((1, 4)).astype(np.float32) for _ in range(32)]
    probe = mb.BatchProbe(mb.seeded(mb.Mlp, in_features=4, out_features=2)).eval()

    async def run() -> list:
        async with aiogrpcclient.InferenceServerClient(server.grpc_url) as client:

            async def one(x: np.ndarray):
                tensor = aiogrpcclient.InferInput("x", list(x.shape), "FP32")
                tensor.set_data_from_numpy(x)
                return await client.infer("probe", [tensor])

            return await asyncio.gather(*(one(x) for x in data))

    results = asyncio.run(run())
    sizes = []
    for x, result in zip(data, results, strict=True):
        expected = probe(torch.from_numpy(x))[0].detach().numpy()
        np.testing.assert_allclose(result.as_numpy("OUTPUT__0"), expected, rtol=1e-5, atol=1e-6)
        sizes.append(int(result.as_numpy("OUTPUT__1")[0, 0]))
    # 32 requests at once with a 20 ms queue delay: the batcher combines them.
    assert max(sizes) > 1, sizes
    (stats,) = http.get_inference_statistics("probe")["model_stats"]
    assert int(stats["inference_count"]) == 32
    assert int(stats["execution_count"]) < 32
    assert {b["batch_size"] for b in stats["batch_stats"]} == set(sizes)


def test_the_server_log_has_no_read_only_tensor_warnings(server, clients):
    test_simple_add_sub_scripted(clients, "http")  # read-only request bodies reach torch
    assert "not writable" not in server.log()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_pytorch_models_as_ensemble_steps(clients, protocol):
    a = np.arange(32, dtype=np.int32).reshape(2, 16)
    b = np.full((2, 16), 3, dtype=np.int32)
    result = infer(clients, protocol, "pipeline", {"A": ("INT32", a), "B": ("INT32", b)})
    np.testing.assert_array_equal(result.as_numpy("OUT"), ((a + b) * (a - b)).astype(np.float32))
