"""CUDA shared-memory tensors bound where they are: the IO-binding calls of a CUDA-provider
instance, recorded without a GPU (a session standing in for ONNX Runtime's, running an
identity over "device" addresses that are host memory), and the real thing on a GPU."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from triton_core_onnx.backend import OnnxRuntimeInstance, OnnxRuntimeModel

from triton_core import DeviceBuffer, InferenceRequest, Status, Tensor, TritonError
from triton_core.testing import HostCudaRegion


class FakeOrtValue:
    """An output ONNX Runtime allocated: on "cuda" (host memory here) or on the CPU."""

    def __init__(self, array: np.ndarray, device: str) -> None:
        self.array = np.ascontiguousarray(array)
        self.device = device

    def numpy(self) -> np.ndarray:
        assert self.device == "cpu", "a cuda OrtValue has no numpy()"
        return self.array

    def data_ptr(self) -> int:
        return int(self.array.ctypes.data)

    def shape(self) -> list[int]:
        return list(self.array.shape)

    def data_type(self) -> str:
        return {np.dtype(np.float32): "tensor(float)"}[self.array.dtype]

    def device_name(self) -> str:
        return self.device


class RecordingBinding:
    """Records every call an IO binding gets; runs ``OUTPUT0 = INPUT0`` over the bindings."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.inputs: dict[str, np.ndarray] = {}
        self.outputs: list[Any] = []

    def bind_input(self, name, device, device_id, element_type, shape, pointer) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(
            ("bind_input", name, device, device_id, np.dtype(element_type), shape, pointer)
        )
        size = int(np.prod(shape)) * np.dtype(element_type).itemsize
        raw = (ctypes.c_uint8 * size).from_address(pointer)
        self.inputs[name] = np.frombuffer(raw, element_type).reshape(shape).copy()

    def bind_cpu_input(self, name, array) -> None:  # type: ignore[no-untyped-def]
        self.calls.append(("bind_cpu_input", name))
        self.inputs[name] = np.array(array)

    def bind_output(
        self, name, device="cpu", device_id=0, element_type=None, shape=None, pointer=None
    ) -> None:  # type: ignore[no-untyped-def]
        if pointer is None:
            self.calls.append(("bind_output", name, device, device_id))
        else:
            self.calls.append(
                ("bind_output", name, device, device_id, np.dtype(element_type), shape, pointer)
            )
        self.outputs.append((name, device, shape, pointer))

    def run(self) -> None:
        results = []
        for _name, device, shape, pointer in self.outputs:
            value = self.inputs["INPUT0"]
            if pointer is not None:
                assert list(value.shape) == shape, "ORT fails a run whose output is bound too small"
                ctypes.memmove(pointer, value.ctypes.data, value.nbytes)
                results.append(None)
            else:
                results.append(FakeOrtValue(value, device))
        self.results = results

    def synchronize_outputs(self) -> None:
        self.calls.append(("synchronize_outputs",))

    def get_outputs(self) -> list[Any]:
        return self.results


class RecordingSession:
    """Stands in for a CUDA-provider InferenceSession: hands out one recording binding."""

    def __init__(self) -> None:
        self.binding = RecordingBinding()
        self.runs = 0

    def get_providers(self) -> list[str]:
        return ["CUDAExecutionProvider", "CPUExecutionProvider"]

    def io_binding(self) -> RecordingBinding:
        return self.binding

    def run_with_iobinding(self, binding: RecordingBinding, options: Any) -> None:
        self.runs += 1
        binding.run()

    def run(self, names, feeds, options):  # type: ignore[no-untyped-def]
        raise AssertionError("a GPU session runs through its IO binding")


@pytest.fixture
def gpu_instance(builders, load, model_file, specs) -> Callable[..., OnnxRuntimeInstance]:  # type: ignore[no-untyped-def]
    """``gpu_instance(dims)``: an FP32 identity ``[batch, *dims]`` with a recording session."""

    def make(dims: tuple[int, ...] = (3,), device_id: int = 0) -> OnnxRuntimeInstance:
        builders.identity(model_file, "FP32", dims)
        model: OnnxRuntimeModel = load("max_batch_size: 8")
        return OnnxRuntimeInstance(model, RecordingSession(), specs.gpu(device_id))  # type: ignore[arg-type]

    return make


X = np.arange(6, dtype=np.float32).reshape(2, 3)


def device_request(
    source: HostCudaRegion, sink: HostCudaRegion | None, size: int = 24
) -> InferenceRequest:
    """INPUT0 = X at offset 8 of ``source``; OUTPUT0 into ``sink`` at offset 16."""
    source.fill(8, X)
    request = InferenceRequest(
        "m", {"INPUT0": Tensor("INPUT0", "FP32", DeviceBuffer(source, 8, 24, "FP32", (2, 3)))}
    )  # type: ignore[arg-type]
    request.batch_size = 2
    if sink is not None:
        request.device_outputs = {
            "OUTPUT0": DeviceBuffer(sink, 16, size, "UINT8", (size,), readonly=False)
        }
    return request


def test_inputs_and_fixed_size_outputs_are_bound_at_their_region_addresses(gpu_instance) -> None:
    instance = gpu_instance((3,))
    assert instance.accepts_device_tensors
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    (response,) = instance.execute([device_request(source, sink)])
    binding = instance.session.binding
    assert binding.calls == [
        ("bind_input", "INPUT0", "cuda", 0, np.dtype(np.float32), [2, 3], source.device_pointer(8)),
        (
            "bind_output",
            "OUTPUT0",
            "cuda",
            0,
            np.dtype(np.float32),
            [2, 3],
            sink.device_pointer(16),
        ),
        ("synchronize_outputs",),
    ]
    output = response.output("OUTPUT0").data
    assert isinstance(output, DeviceBuffer) and output.pointer == sink.device_pointer(16)
    assert output.shape == (2, 3) and output.datatype == "FP32"
    np.testing.assert_array_equal(sink.contents(16, np.float32, 6), X.ravel())
    assert source.host_copies == sink.host_copies == 0 and sink.device_copies == []


def test_outputs_of_unknown_size_are_bound_to_the_device_and_copied_there(gpu_instance) -> None:
    instance = gpu_instance((-1,))
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    (response,) = instance.execute([device_request(source, sink)])
    assert ("bind_output", "OUTPUT0", "cuda", 0) in instance.session.binding.calls
    assert sink.device_copies == [(16, 24)]
    np.testing.assert_array_equal(sink.contents(16, np.float32, 6), X.ravel())
    assert response.output("OUTPUT0").data.pointer == sink.device_pointer(16)
    assert source.host_copies == sink.host_copies == 0


@pytest.mark.parametrize("dims", [(3,), (-1,)])
def test_an_output_region_too_small_names_the_output(gpu_instance, dims) -> None:
    instance = gpu_instance(dims)
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    with pytest.raises(TritonError) as info:
        instance.execute([device_request(source, sink, size=16)])
    assert info.value.status is Status.INTERNAL  # as Triton 2.51 answers it
    assert "for output 'OUTPUT0' (16 bytes) should be at least 24 bytes" in info.value.message
    assert sink.device_copies == [] and not sink.memory.any()


def test_an_output_not_asked_into_a_region_comes_back_to_the_host(gpu_instance) -> None:
    instance = gpu_instance((3,))
    (response,) = instance.execute([device_request(HostCudaRegion("in", 64), None)])
    assert ("bind_output", "OUTPUT0", "cpu", 0) in instance.session.binding.calls
    np.testing.assert_array_equal(response.output("OUTPUT0").data, X)


def test_tensors_on_another_gpu_go_through_the_host(gpu_instance) -> None:
    instance = gpu_instance((3,), device_id=0)
    source, sink = HostCudaRegion("in", 64, device_id=1), HostCudaRegion("out", 64, device_id=1)
    (response,) = instance.execute([device_request(source, sink)])
    binding = instance.session.binding
    assert binding.calls[0] == ("bind_cpu_input", "INPUT0")
    assert ("bind_output", "OUTPUT0", "cpu", 0) in binding.calls
    assert source.to_host == [24]
    np.testing.assert_array_equal(response.output("OUTPUT0").data, X)  # the server writes it


def test_host_requests_keep_the_host_path(gpu_instance) -> None:
    instance = gpu_instance((3,))
    request = InferenceRequest("m", {"INPUT0": Tensor("INPUT0", "FP32", X)})
    (response,) = instance.execute([request])
    assert instance.session.binding.calls[0] == ("bind_cpu_input", "INPUT0")
    np.testing.assert_array_equal(response.output("OUTPUT0").data, X)


def test_cpu_instances_do_not_accept_device_tensors(instance, builders, model_file) -> None:
    builders.identity(model_file, "FP32", (3,))
    assert instance("max_batch_size: 8").accepts_device_tensors is False


def test_reshaped_inputs_are_not_taken_on_the_device(builders, load, model_file, specs) -> None:
    builders.identity(model_file, "FP32", (3,))
    model = load(
        "max_batch_size: 8\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 1, 3 ]'
        " reshape { shape: [ 3 ] } } ]\n"
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 3 ] } ]'
    )
    gpu = OnnxRuntimeInstance(model, RecordingSession(), specs.gpu(0))  # type: ignore[arg-type]
    assert gpu.accepts_device_tensors is False


# ------------------------------------------------------------------------------------------
# the same calls into a real ONNX Runtime: a CPU session told that host memory is its device


@pytest.mark.parametrize(("dims", "device_copies"), [((3,), []), ((-1,), [(16, 24)])])
def test_real_io_binding_reads_and_writes_the_region_in_place(
    builders, instance, model_file, dims, device_copies
) -> None:
    builders.identity(model_file, "FP32", dims)
    cpu = instance("max_batch_size: 8")
    # what a CUDA-provider session does with "cuda" addresses, done with host ones
    cpu.accepts_device_tensors = True
    cpu._device_type = "cpu"
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    (response,) = cpu.execute([device_request(source, sink)])
    np.testing.assert_array_equal(sink.contents(16, np.float32, 6), X.ravel())
    output = response.output("OUTPUT0").data
    assert isinstance(output, DeviceBuffer) and output.pointer == sink.device_pointer(16)
    assert source.host_copies == sink.host_copies == 0
    assert sink.device_copies == device_copies


# ------------------------------------------------------------------------------------------
# a GPU: a real CUDA-provider session over device memory torch allocated


def cuda_provider() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


@pytest.mark.gpu
@pytest.mark.skipif(not cuda_provider(), reason="onnxruntime has no CUDAExecutionProvider here")
@pytest.mark.parametrize(("dims", "device_copies"), [((3,), []), ((-1,), [(16, 24)])])
def test_cuda_session_binds_regions_in_place(
    builders, load, model_file, specs, dims, device_copies
) -> None:
    pytest.importorskip("torch")
    from triton_core.testing import TorchCudaRegion

    builders.identity(model_file, "FP32", dims)
    model = load(
        'max_batch_size: 8\ninstance_group [ { name: "m" kind: KIND_GPU count: 1 gpus: [ 0 ] } ]'
    )
    gpu = model.create_instance(specs.gpu(0))
    assert gpu.accepts_device_tensors
    source, sink = TorchCudaRegion("in", 64), TorchCudaRegion("out", 64)
    (response,) = gpu.execute([device_request(source, sink)])
    np.testing.assert_array_equal(sink.contents(16, np.float32, 6), X.ravel())
    assert response.output("OUTPUT0").data.pointer == sink.device_pointer(16)
    assert source.host_copies == sink.host_copies == 0
    assert sink.device_copies == device_copies
