"""Device tensors without a GPU: the DeviceBuffer's interfaces, and the core's routing of
CUDA shared-memory tensors (device buffers for instances that accept them, host copies for
every other) through a region kept in host memory (triton_core.testing.HostCudaRegion)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from tests.support import numpy_server, write_numpy_model
from triton_core import (
    DeviceBuffer,
    InferenceRequest,
    InferenceResponse,
    ModelInstance,
    RequestedOutput,
    SharedMemoryInput,
    SharedMemoryOptions,
    SharedMemoryRef,
    SharedMemoryTensors,
    Status,
    Tensor,
    TritonError,
    request_on_device,
    request_to_host,
)
from triton_core.scheduling.threaded_pool import ThreadedInstancePool
from triton_core.shared_memory.registry import SharedMemoryRegistry
from triton_core.shared_memory.tensors import resolve
from triton_core.testing import HostCudaRegion
from triton_core.types import release_leases

ALLOWED = SharedMemoryOptions(allow_client_shm=True)


def buffer(region: HostCudaRegion, offset: int = 0, shape=(2, 3), datatype="FP32") -> DeviceBuffer:
    size = int(np.prod(shape)) * 4
    return DeviceBuffer(region, offset, size, datatype, tuple(shape))


# ------------------------------------------------------------------------------------------
# DeviceBuffer


def test_cuda_array_interface_points_at_the_offset_in_the_region() -> None:
    region = HostCudaRegion("r", 256)
    interface = buffer(region, offset=64).__cuda_array_interface__
    assert interface == {
        "shape": (2, 3),
        "typestr": "<f4",
        "data": (region.device_pointer(0) + 64, True),
        "version": 3,
        "strides": None,
        "stream": None,
    }


@pytest.mark.parametrize(
    ("datatype", "typestr"),
    [("FP16", "<f2"), ("FP64", "<f8"), ("INT8", "|i1"), ("UINT64", "<u8"), ("BOOL", "|b1")],
)
def test_typestr_follows_the_datatype(datatype: str, typestr: str) -> None:
    region = HostCudaRegion("r", 64)
    interface = DeviceBuffer(region, 0, 8, datatype, (1,)).__cuda_array_interface__
    assert interface["typestr"] == typestr


def test_an_output_target_is_writable_and_an_empty_buffer_has_a_null_pointer() -> None:
    region = HostCudaRegion("r", 64)
    target = DeviceBuffer(region, 16, 48, "UINT8", (48,), readonly=False)
    placed = target.laid_out("OUT", "INT32", (2, 4))
    assert placed.__cuda_array_interface__["data"] == (region.device_pointer(16), False)
    assert (placed.nbytes, placed.shape, placed.dtype) == (32, (2, 4), np.dtype(np.int32))
    empty = target.laid_out("OUT", "INT32", (0, 4))
    assert empty.__cuda_array_interface__["data"] == (0, False)


def test_an_output_too_large_for_its_target_names_the_output() -> None:
    target = DeviceBuffer(HostCudaRegion("r", 64), 0, 16, "UINT8", (16,), readonly=False)
    with pytest.raises(TritonError) as info:
        target.laid_out("OUTPUT0", "FP32", (1, 64))
    assert info.value.status is Status.INTERNAL  # as Triton 2.51 answers it
    assert "for output 'OUTPUT0' (16 bytes) should be at least 256 bytes" in info.value.message


@pytest.mark.parametrize("datatype", ["BYTES", "BF16"])
def test_datatypes_without_a_typestr_cannot_be_laid_out(datatype: str) -> None:
    target = DeviceBuffer(HostCudaRegion("r", 64), 0, 64, "UINT8", (64,), readonly=False)
    with pytest.raises(TritonError, match="cannot be device memory"):
        target.laid_out("OUT", datatype, (2,))


def test_reshape_keeps_the_bytes_and_refuses_other_counts() -> None:
    source = buffer(HostCudaRegion("r", 64), offset=8)
    assert source.reshape((3, 2)).shape == (3, 2)
    assert source.reshape([-1]).shape == (6,)
    assert source.reshape((1, -1)).pointer == source.pointer
    for bad in [(4, 2), (-1, 4), (0, -1)]:
        with pytest.raises(ValueError, match="cannot reshape"):
            source.reshape(bad)


def test_to_host_is_one_counted_copy_and_numpy_cannot_read_it_unasked() -> None:
    region = HostCudaRegion("r", 64)
    values = np.arange(6, dtype=np.float32).reshape(2, 3)
    region.fill(24, values)
    device = buffer(region, offset=24)
    with pytest.raises(TypeError, match="device memory"):
        np.asarray(device)
    assert region.host_copies == 0
    host = device.to_host()
    np.testing.assert_array_equal(host, values)
    assert not host.flags.writeable
    assert region.to_host == [24]


def test_copy_from_device_refuses_read_only_and_oversized_copies() -> None:
    region = HostCudaRegion("r", 64)
    with pytest.raises(TritonError, match="read-only"):
        buffer(region).copy_from_device(region.device_pointer(32), 8)
    target = DeviceBuffer(region, 0, 16, "UINT8", (16,), readonly=False)
    with pytest.raises(TritonError, match="do not fit"):
        target.copy_from_device(region.device_pointer(32), 17)
    assert region.device_copies == []


def test_request_on_device_and_request_to_host() -> None:
    near, far = HostCudaRegion("near", 64), HostCudaRegion("far", 64, device_id=1)
    far.fill(0, np.arange(6, dtype=np.float32))
    request = InferenceRequest("m", {"X": Tensor("X", "FP32", buffer(far))})  # type: ignore[arg-type]
    request.device_outputs = {"Y": DeviceBuffer(near, 0, 64, "UINT8", (64,), readonly=False)}
    assert request_on_device(request, 1) is False and request_on_device(request, 0) is False
    request_to_host(request)
    assert request.device_outputs is None
    np.testing.assert_array_equal(request.inputs["X"].data.ravel(), np.arange(6))
    assert request_on_device(request, 0) is True


# ------------------------------------------------------------------------------------------
# resolve: device buffers only when asked, and only for what can stay on the device


def registry_with(*regions: HostCudaRegion) -> SharedMemoryRegistry:
    registry = SharedMemoryRegistry(ALLOWED)
    for region in regions:
        registry.add(region)
    return registry


def shm_request(datatype: str = "FP32", byte_size: int = 24) -> InferenceRequest:
    spec = SharedMemoryInput(datatype, (2, 3), SharedMemoryRef("in", byte_size, 8))
    return InferenceRequest(
        "m",
        {},
        shared_memory=SharedMemoryTensors(
            {"INPUT0": spec}, {"OUTPUT0": SharedMemoryRef("out", 32, 16)}
        ),
    )


def test_resolve_keeps_host_copies_unless_the_model_takes_device_tensors() -> None:
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    source.fill(8, np.arange(6, dtype=np.float32))
    registry = registry_with(source, sink)
    resolved, use = resolve(registry, shm_request())
    assert isinstance(resolved.inputs["INPUT0"].data, np.ndarray)
    assert resolved.device_outputs is None and source.to_host == [24]
    use.release()


async def test_resolve_for_device_tensors_copies_nothing() -> None:
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    registry = registry_with(source, sink)
    resolved, use = resolve(registry, shm_request(), device=True)
    data = resolved.inputs["INPUT0"].data
    assert isinstance(data, DeviceBuffer)
    assert (data.pointer, data.shape, data.datatype) == (source.device_pointer(8), (2, 3), "FP32")
    assert data.readonly
    assert resolved.device_outputs is not None
    target = resolved.device_outputs["OUTPUT0"]
    assert (target.pointer, target.byte_size, target.readonly) == (
        sink.device_pointer(16),
        32,
        False,
    )
    assert source.host_copies == sink.host_copies == 0
    # held until answered, as host views are, and until the instance is done with them
    assert source.users == sink.users == 2
    use.release()  # the client went away
    assert source.users == sink.users == 1
    release_leases([resolved])  # the batch ended
    assert source.users == sink.users == 0


@pytest.mark.parametrize(("datatype", "byte_size"), [("BF16", 12), ("BYTES", 24)])
async def test_resolve_copies_datatypes_that_cannot_stay_on_the_device(datatype, byte_size) -> None:
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    if datatype == "BYTES":  # six serialized empty strings: a 4-byte length each
        source.fill(8, np.zeros(6, np.uint32))
    resolved, use = resolve(
        registry_with(source, sink), shm_request(datatype, byte_size), device=True
    )
    assert isinstance(resolved.inputs["INPUT0"].data, np.ndarray)
    assert source.to_host == [byte_size]
    use.release()


async def test_outputs_asked_as_classifications_get_no_device_target() -> None:
    registry = registry_with(HostCudaRegion("in", 64), HostCudaRegion("out", 64))
    request = shm_request()
    request.outputs = [RequestedOutput("OUTPUT0", classification=2)]
    resolved, use = resolve(registry, request, device=True)
    assert resolved.device_outputs is None
    assert isinstance(resolved.inputs["INPUT0"].data, DeviceBuffer)
    use.release()


async def test_resolve_for_device_tensors_checks_the_byte_size() -> None:
    registry = registry_with(HostCudaRegion("in", 64), HostCudaRegion("out", 64))
    with pytest.raises(TritonError) as info:
        resolve(registry, shm_request(byte_size=20), device=True)
    assert "input byte size mismatch for input 'INPUT0' for model 'm'. Expected 24, got 20" in (
        info.value.message
    )
    assert registry.acquire("in", 0, 1).users == 1  # the failed request held nothing


async def test_resolve_keeps_the_bounds_check_before_any_device_buffer() -> None:
    registry = registry_with(HostCudaRegion("in", 16), HostCudaRegion("out", 64))
    with pytest.raises(TritonError, match="Invalid offset \\+ byte size"):
        resolve(registry, shm_request(), device=True)  # 8 + 24 > 16


async def test_write_outputs_skips_outputs_the_backend_wrote_and_copies_the_rest() -> None:
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    resolved, use = resolve(registry_with(source, sink), shm_request(), device=True)
    assert resolved.device_outputs is not None
    placed = resolved.device_outputs["OUTPUT0"].laid_out("OUTPUT0", "FP32", (2, 3))
    other = resolved.inputs["INPUT0"].data
    response = InferenceResponse(
        outputs=[Tensor("OUTPUT0", "FP32", placed), Tensor("OUTPUT1", "FP32", other)]  # type: ignore[arg-type]
    )
    use.write_outputs(response)
    assert response.shared_memory_outputs == {"OUTPUT0"}
    assert sink.host_copies == 0  # written in place by the backend
    # an output for the response body comes back to the host
    assert isinstance(response.outputs[1].data, np.ndarray) and source.to_host == [24]
    use.release()


# ------------------------------------------------------------------------------------------
# the instance pool: device buffers reach only instances that accept them, one request at a time


class Taker(ModelInstance):
    def __init__(self, accepts: bool) -> None:
        self.accepts_device_tensors = accepts
        self.received: list[list[str]] = []

    def execute(self, requests: list[InferenceRequest]) -> list[InferenceResponse]:
        self.received.append([type(r.inputs["X"].data).__name__ for r in requests])
        return [InferenceResponse() for _ in requests]


def device_request(region: HostCudaRegion) -> InferenceRequest:
    return InferenceRequest("m", {"X": Tensor("X", "FP32", buffer(region))})  # type: ignore[arg-type]


def finish(requests, responses, instance):  # type: ignore[no-untyped-def]
    return list(responses)


@pytest.mark.parametrize(
    ("accepts", "batch", "expected"),
    [
        (True, 1, ["DeviceBuffer"]),
        (True, 2, ["ndarray", "ndarray"]),
        (False, 1, ["ndarray"]),
    ],
)
async def test_pool_hands_device_buffers_only_to_instances_that_accept_them(
    accepts: bool, batch: int, expected: list[str]
) -> None:
    region = HostCudaRegion("r", 64)
    # the pool routes device tensors when any of its instances accepts them
    instance, other = Taker(accepts), Taker(True)
    pool = ThreadedInstancePool(
        [instance, other], ["m_0", "m_1"], asyncio.get_running_loop(), finish, "m"
    )
    pool.pin()  # one queue per instance: the batch goes to the instance under test
    try:
        loop = asyncio.get_running_loop()
        requests = [device_request(region) for _ in range(batch)]
        futures = [loop.create_future() for _ in requests]
        pool.submit_to(0, requests, futures)
        await asyncio.wait_for(asyncio.gather(*futures), 30)
    finally:
        pool.stop()
    assert instance.received == [expected]
    assert len(region.to_host) == expected.count("ndarray")


async def test_a_pool_of_host_only_instances_never_copies() -> None:
    pool = ThreadedInstancePool([Taker(False)], ["m_0"], asyncio.get_running_loop(), finish, "m")
    try:
        assert pool.device_inputs is False
    finally:
        pool.stop()


# ------------------------------------------------------------------------------------------
# the server: which models get device tensors


async def test_a_request_dropped_before_it_ran_lets_its_regions_go() -> None:
    source, sink = HostCudaRegion("in", 64), HostCudaRegion("out", 64)
    resolved, use = resolve(registry_with(source, sink), shm_request(), device=True)
    use.release()
    assert source.users == sink.users == 1
    del resolved  # never executed: collected, its holds end on the event loop
    await wait_for(lambda: source.users == sink.users == 0)


async def wait_for(condition, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        assert loop.time() < deadline, "timed out"
        await asyncio.sleep(0.01)


async def infer_through_regions(server, model: str) -> tuple[HostCudaRegion, HostCudaRegion]:
    source, sink = HostCudaRegion(f"in_{model}", 64), HostCudaRegion(f"out_{model}", 64)
    source.fill(0, np.arange(4, dtype=np.int32))
    server.shared_memory.add(source)
    server.shared_memory.add(sink)
    spec = SharedMemoryInput("INT32", (1, 4), SharedMemoryRef(source.name, 16))
    request = InferenceRequest(
        model,
        {},
        outputs=None,
        shared_memory=SharedMemoryTensors(
            {"INPUT0": spec}, {"OUTPUT0": SharedMemoryRef(sink.name, 16, 32)}
        ),
    )
    response = await server.infer(request)
    assert response.error is None and response.shared_memory_outputs == {"OUTPUT0"}
    np.testing.assert_array_equal(sink.contents(32, np.int32, 4), np.arange(4))
    return source, sink


def instance_of(server, model: str):  # type: ignore[no-untyped-def]
    return server.models.get(model, -1).pool.instances[0]


DEVICE = 'parameters { key: "device_tensors" value { string_value: "true" } }'


def one_input_model(repo: Path, name: str, extra: str = "") -> None:
    write_numpy_model(repo, name, extra=extra)
    config = repo / name / "config.pbtxt"
    # the numpy identity model with INPUT0 only (INPUT1 optional is not its shape)
    text = config.read_text().replace(
        'input [{ name: "INPUT1" data_type: TYPE_INT32 dims: [ 4 ] }]', ""
    )
    config.write_text(text)


async def test_server_routes_device_tensors_by_what_the_model_accepts(tmp_path: Path) -> None:
    one_input_model(tmp_path, "host_only")
    one_input_model(tmp_path, "on_device", extra=DEVICE)
    one_input_model(tmp_path, "cached", extra=DEVICE + "\nresponse_cache { enable: true }")
    server = numpy_server(tmp_path, shared_memory=ALLOWED, cache=("local", {"size": "1048576"}))
    await server.start()
    try:
        source, sink = await infer_through_regions(server, "on_device")
        assert instance_of(server, "on_device").received == [{"INPUT0": "DeviceBuffer"}]
        assert source.host_copies == sink.host_copies == 0
        assert sink.device_copies == [(32, 16)]

        source, sink = await infer_through_regions(server, "host_only")
        assert instance_of(server, "host_only").received == [{"INPUT0": "ndarray"}]
        assert (source.to_host, sink.from_host) == ([16], [16])

        # the response cache reads values on the host: host copies, as before
        source, sink = await infer_through_regions(server, "cached")
        assert instance_of(server, "cached").received == [{"INPUT0": "ndarray"}]
        assert (source.to_host, sink.from_host) == ([16], [16])
    finally:
        await server.stop()


async def test_regions_unregistered_by_a_client_gone_mid_batch_close_after_it(tmp_path) -> None:
    one_input_model(tmp_path, "on_device", extra=DEVICE)
    server = numpy_server(tmp_path, shared_memory=ALLOWED)
    await server.start()
    gate = threading.Event()
    try:
        source, sink = HostCudaRegion("in_gone", 64), HostCudaRegion("out_gone", 64)
        closed: list[str] = []
        for region in (source, sink):
            region.close = lambda region=region: closed.append(region.name)  # type: ignore[method-assign]
            server.shared_memory.add(region)
        instance = instance_of(server, "on_device")
        instance.gate = gate
        spec = SharedMemoryInput("INT32", (1, 4), SharedMemoryRef(source.name, 16))
        request = InferenceRequest(
            "on_device",
            {},
            shared_memory=SharedMemoryTensors(
                {"INPUT0": spec}, {"OUTPUT0": SharedMemoryRef(sink.name, 16)}
            ),
        )
        answer = asyncio.ensure_future(server.infer(request))
        await asyncio.to_thread(instance.entered.wait, 30)
        server.unregister_cuda_shared_memory(source.name)
        server.unregister_cuda_shared_memory(sink.name)
        answer.cancel()  # the client goes away while the instance works on its regions
        await asyncio.gather(answer, return_exceptions=True)
        assert closed == []  # still mapped: the instance may be using them
        gate.set()
        await wait_for(lambda: sorted(closed) == ["in_gone", "out_gone"])
    finally:
        gate.set()
        await server.stop()


# ------------------------------------------------------------------------------------------
# the host-copy counters: what shows that CUDA tensors stayed on the device


def test_host_copy_metrics_appear_only_where_cuda_regions_can_be_opened(monkeypatch) -> None:
    from triton_core.observability import metrics
    from triton_core.shared_memory import cuda

    monkeypatch.setattr(metrics, "cuda_support", lambda: cuda.CudaSupport(reason="no GPU"))
    assert list(metrics._cuda_host_copy_families()) == []
    monkeypatch.setattr(metrics, "cuda_support", lambda: cuda.CudaSupport(device_count=1))
    monkeypatch.setattr(cuda, "HOST_COPIES", cuda.HostCopies())
    monkeypatch.setattr(metrics, "HOST_COPIES", cuda.HOST_COPIES)
    cuda.HOST_COPIES.add(24)
    cuda.HOST_COPIES.add(40)
    samples = {
        sample.name: sample.value
        for family in metrics._cuda_host_copy_families()
        for sample in family.samples
    }
    assert samples == {
        "triton_core_cuda_shared_memory_host_copies": 2,
        "triton_core_cuda_shared_memory_host_copies_bytes": 64,
    }


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ("", True),
        ("dynamic_batching { }", True),
        ("sequence_batching { }", False),
        ('parameters { key: "batch_strategy" value { string_value: "x" } }', False),
    ],
)
def test_models_whose_schedulers_read_values_get_no_device_tensors(config, expected) -> None:
    from types import SimpleNamespace

    from triton_core import parse_config_text
    from triton_core.server.model import LoadedModel

    parsed = parse_config_text(f'name: "m"\n{config}', "config.pbtxt")
    pool = SimpleNamespace(device_inputs=True)
    model = LoadedModel(parsed, 1, None, None, pool, None, None)  # type: ignore[arg-type]
    assert model.device_inputs is expected
    pool.device_inputs = False
    assert LoadedModel(parsed, 1, None, None, pool, None, None).device_inputs is False  # type: ignore[arg-type]
