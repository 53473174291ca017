"""CUDA shared-memory tensors for PyTorch CUDA instances: wrapped without a copy, outputs
copied device to device into their regions.

Without a GPU the path runs on a CPU instance opted in by hand, with the one CUDA call
(wrapping a buffer's ``__cuda_array_interface__``) replaced by the same wrap over host
memory (triton_core.testing.HostCudaRegion): what is read, written, selected and refused is the
same. With a GPU (``gpu`` marker) the real thing: device memory allocated by torch.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import pytest
import torch
from triton_core_torch import instance as torch_instance

from triton_core import DeviceBuffer, InferenceRequest, Status, Tensor, TritonError
from triton_core.testing import HostCudaRegion, TorchCudaRegion

HAS_CUDA = torch.cuda.is_available()

ADD_SUB = """
max_batch_size: 8
input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },
        { name: "INPUT__1" data_type: TYPE_FP32 dims: [ 3 ] } ]
output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 3 ] },
         { name: "OUTPUT__1" data_type: TYPE_FP32 dims: [ 3 ] } ]
"""
X = np.arange(6, dtype=np.float32).reshape(2, 3)
Y = np.full((2, 3), 0.5, np.float32)


def host_tensor(buffer: DeviceBuffer, device: Any) -> torch.Tensor:
    """What ``_device_tensor`` does on a GPU, over a fake region's host memory."""
    raw = (ctypes.c_uint8 * buffer.byte_size).from_address(buffer.pointer)
    array = np.frombuffer(raw, np.uint8).view(buffer.dtype).reshape(buffer.shape)
    return torch.from_numpy(array)


@pytest.fixture
def opted_in(builders, model_file, instance, monkeypatch):  # type: ignore[no-untyped-def]
    """A CPU instance of AddSub taking device tensors, wrapping them over host memory."""
    builders.save(builders.AddSub(), model_file, "script")
    inst = instance(ADD_SUB, auto_complete=False)
    assert inst.accepts_device_tensors is False  # CPU instances never opt in themselves
    inst.accepts_device_tensors = True
    monkeypatch.setattr(torch_instance, "_device_tensor", host_tensor)
    return inst


def regions(device_id: int = 0) -> tuple[HostCudaRegion, HostCudaRegion]:
    source = HostCudaRegion("in", 128, device_id)
    source.fill(0, X)
    source.fill(64, Y)
    return source, HostCudaRegion("out", 128, device_id)


def device_request(
    source: HostCudaRegion, sink: HostCudaRegion, outputs: dict[str, tuple[int, int]]
) -> InferenceRequest:
    inputs = {
        "INPUT__0": Tensor("INPUT__0", "FP32", DeviceBuffer(source, 0, 24, "FP32", (2, 3))),
        "INPUT__1": Tensor("INPUT__1", "FP32", DeviceBuffer(source, 64, 24, "FP32", (2, 3))),
    }
    request = InferenceRequest("m", inputs)  # type: ignore[arg-type]
    request.batch_size = 2
    request.device_outputs = {
        name: DeviceBuffer(sink, offset, size, "UINT8", (size,), readonly=False)
        for name, (offset, size) in outputs.items()
    }
    return request


def test_outputs_are_written_into_their_regions(opted_in) -> None:
    source, sink = regions()
    request = device_request(source, sink, {"OUTPUT__0": (0, 24), "OUTPUT__1": (64, 24)})
    (response,) = opted_in.execute([request])
    np.testing.assert_array_equal(sink.contents(0, np.float32, 6), (X + Y).ravel())
    np.testing.assert_array_equal(sink.contents(64, np.float32, 6), (X - Y).ravel())
    for name, offset in (("OUTPUT__0", 0), ("OUTPUT__1", 64)):
        data = response.output(name).data
        assert isinstance(data, DeviceBuffer) and data.pointer == sink.device_pointer(offset)
        assert (data.shape, data.datatype) == ((2, 3), "FP32")
    assert source.host_copies == sink.host_copies == 0


def test_an_output_without_a_region_comes_back_as_a_host_array(opted_in) -> None:
    source, sink = regions()
    (response,) = opted_in.execute([device_request(source, sink, {"OUTPUT__1": (0, 24)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, X + Y)
    assert isinstance(response.output("OUTPUT__1").data, DeviceBuffer)


def test_an_output_region_too_small_names_the_output(opted_in) -> None:
    source, sink = regions()
    with pytest.raises(TritonError) as info:
        opted_in.execute([device_request(source, sink, {"OUTPUT__0": (0, 20)})])
    assert info.value.status is Status.INTERNAL  # as Triton 2.51 answers it
    assert "for output 'OUTPUT__0' (20 bytes) should be at least 24 bytes" in info.value.message
    assert not sink.memory.any()


def test_tensors_on_another_gpu_go_through_the_host(opted_in) -> None:
    source, sink = regions(device_id=1)
    (response,) = opted_in.execute([device_request(source, sink, {"OUTPUT__0": (0, 24)})])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, X + Y)  # server writes
    assert source.to_host == [24, 24] and not sink.memory.any()


def test_a_bf16_output_asked_into_a_region_is_left_to_the_server(
    builders, model_file, instance, monkeypatch
) -> None:
    builders.save(builders.Identity(), model_file, "script")
    inst = instance(
        'max_batch_size: 8\ninput [ { name: "INPUT__0" data_type: TYPE_BF16 dims: [ 3 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_BF16 dims: [ 3 ] } ]',
        auto_complete=False,
    )
    inst.accepts_device_tensors = True
    monkeypatch.setattr(torch_instance, "_device_tensor", host_tensor)
    bits = np.array([[0x3F80, 0x4000, 0xBF80]], np.uint16)  # BF16 inputs come as host arrays
    request = InferenceRequest("m", {"INPUT__0": Tensor("INPUT__0", "BF16", bits)})
    sink = HostCudaRegion("out", 64)
    request.device_outputs = {"OUTPUT__0": DeviceBuffer(sink, 0, 6, "UINT8", (6,), readonly=False)}
    (response,) = inst.execute([request])
    np.testing.assert_array_equal(response.output("OUTPUT__0").data, bits)  # written by the server
    assert not sink.memory.any()


def test_output_reshapes_keep_an_instance_off_the_device(builders, model_file, load, specs):
    builders.save(builders.Identity(), model_file, "script")
    model = load(
        "max_batch_size: 8\n"
        'input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 3 ] } ]\n'
        'output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1, 3 ]'
        " reshape { shape: [ 3 ] } } ]",
        auto_complete=False,
    )
    assert model.output_reshapes
    # on a GPU the instance would accept device tensors but for the reshape
    assert model.create_instance(specs.cpu()).accepts_device_tensors is False


# ------------------------------------------------------------------------------------------
# a GPU: device memory torch allocated, standing in for a client's CUDA region


@pytest.mark.gpu
@pytest.mark.skipif(not HAS_CUDA, reason="torch sees no CUDA device")
def test_gpu_instance_reads_and_writes_regions_in_place(builders, model_file, load, specs):
    builders.save(builders.AddSub(), model_file, "script")
    model = load(
        ADD_SUB + 'instance_group [ { name: "m" kind: KIND_GPU count: 1 gpus: [ 0 ] } ]',
        auto_complete=False,
    )
    gpu = model.create_instance(specs.gpu(0))
    assert gpu.accepts_device_tensors
    source, sink = TorchCudaRegion("in", 128), TorchCudaRegion("out", 128)
    source.fill(0, X)
    source.fill(64, Y)
    request = device_request(source, sink, {"OUTPUT__0": (0, 24), "OUTPUT__1": (64, 24)})
    (response,) = gpu.execute([request])
    np.testing.assert_array_equal(sink.contents(0, np.float32, 6), (X + Y).ravel())
    np.testing.assert_array_equal(sink.contents(64, np.float32, 6), (X - Y).ravel())
    assert isinstance(response.output("OUTPUT__0").data, DeviceBuffer)
    assert source.host_copies == sink.host_copies == 0 and sink.device_copies == []
