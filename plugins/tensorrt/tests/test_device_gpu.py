"""On a GPU, without TensorRT: the instances' device memory (cuda-python and torch) copies
arrays there and back, and a captured CUDA graph replays its work."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from triton_core_tensorrt import device

from triton_core.tensors.devices import gpu_count

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(gpu_count() == 0, reason="no CUDA device")]


def cuda_python() -> Any:
    runtime = device._cudart()
    if runtime is None:
        pytest.skip("cuda-python is not installed")
    return device.CudaPythonMemory(runtime, 0)


def torch_memory() -> Any:
    torch = device._torch_with_cuda()
    if torch is None:
        pytest.skip("torch has no CUDA")
    return device.TorchMemory(torch, 0)


@pytest.fixture(params=[cuda_python, torch_memory], ids=["cuda-python", "torch"])
def memory(request: pytest.FixtureRequest) -> Any:
    opened = request.param()
    yield opened
    opened.close()


def test_arrays_go_to_the_device_and_back(memory):
    for dtype in ("float32", "float16", "int64", "bool"):
        host = (np.arange(1000) % 7).astype(dtype).reshape(10, 100)
        address = memory.alloc(host.nbytes)
        memory.to_device(address, host)
        back = np.empty_like(host)
        memory.to_host(back, address)
        memory.synchronize()
        np.testing.assert_array_equal(back, host)


def test_a_captured_graph_replays_its_copy(memory):
    """A device-to-device copy captured once copies the source's current contents on replay."""
    nbytes = 4096 * 4
    source, target = memory.alloc(nbytes), memory.alloc(nbytes)

    def launch(stream: int) -> None:
        device_copy(memory, target, source, nbytes, stream)

    replay = memory.capture(launch)
    for value in (1.0, 2.5):
        memory.to_device(source, np.full(4096, value, np.float32))
        replay()
        out = np.empty(4096, np.float32)
        memory.to_host(out, target)
        memory.synchronize()
        assert (out == value).all()


def device_copy(memory: Any, target: int, source: int, nbytes: int, stream: int) -> None:
    if isinstance(memory, device.CudaPythonMemory):
        runtime = device._cudart()
        kind = runtime.cudaMemcpyKind.cudaMemcpyDeviceToDevice
        device._check(runtime.cudaMemcpyAsync(target, source, nbytes, kind, memory._stream), "copy")
    else:
        memory._buffers[target][:nbytes].copy_(memory._buffers[source][:nbytes])


def test_device_properties_name_the_gpu():
    capability, name = device.device_properties(0)
    assert capability is not None and capability[0] >= 3 and name
