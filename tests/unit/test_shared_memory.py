"""The in-process shared-memory API and its registry, with the numpy test backend."""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.support import numpy_server, write_numpy_model
from triton_core import (
    NUMPY_DTYPES,
    InferenceRequest,
    InferenceResponse,
    SharedMemoryInput,
    SharedMemoryOptions,
    SharedMemoryRef,
    SharedMemoryTensors,
    Status,
    SystemRegionStatus,
    Tensor,
    TritonError,
)
from triton_core.shared_memory.region import RegionKind
from triton_core.shared_memory.registry import CLIENT_SHM_DISABLED, SharedMemoryRegistry
from triton_core.shared_memory.tensors import resolve

ALLOWED = SharedMemoryOptions(allow_client_shm=True)


@pytest.fixture
def shm_object() -> Iterator[tuple[str, Path]]:
    """A 4 KiB POSIX shared-memory object with this test's prefix: (key, path)."""
    name = f"tcshm_unit_{uuid.uuid4().hex[:12]}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(4096))
    try:
        yield f"/{name}", path
    finally:
        path.unlink(missing_ok=True)


@pytest.fixture
async def server(tmp_path: Path):
    write_numpy_model(tmp_path, "identity")
    write_numpy_model(
        tmp_path,
        "slow",
        extra='parameters { key: "sleep_ms" value { string_value: "300" } }',
    )
    server = numpy_server(tmp_path, shared_memory=ALLOWED)
    await server.start()
    yield server
    await server.stop()


def shm_request(model: str, region: str, out_offset: int = 1024) -> InferenceRequest:
    spec = SharedMemoryInput("INT32", (1, 4), SharedMemoryRef(region, 16))
    return InferenceRequest(
        model,
        {},
        shared_memory=SharedMemoryTensors(
            {"INPUT0": spec, "INPUT1": spec}, {"OUTPUT0": SharedMemoryRef(region, 16, out_offset)}
        ),
    )


def error_of(call, *args) -> TritonError:  # type: ignore[no-untyped-def]
    with pytest.raises(TritonError) as info:
        call(*args)
    return info.value


async def test_in_process_register_infer_unregister(server, shm_object) -> None:
    key, path = shm_object
    values = np.arange(4, dtype=np.int32) + 7
    with path.open("r+b") as handle:
        handle.write(values.tobytes())
    server.register_system_shared_memory("r", key, 4096)
    assert server.system_shared_memory_status() == [SystemRegionStatus("r", key, 0, 4096)]
    response = await server.infer(shm_request("identity", "r"))
    assert response.shared_memory_outputs == frozenset({"OUTPUT0"})
    assert path.read_bytes()[1024:1040] == values.tobytes()
    server.unregister_system_shared_memory("r")
    assert server.system_shared_memory_status() == []


async def test_inputs_are_read_only_views_not_copies(server, shm_object) -> None:
    key, path = shm_object
    server.register_system_shared_memory("r", key, 4096)
    response = await server.infer(shm_request("identity", "r"))
    data = response.output("OUTPUT1").data  # the numpy identity answers with its input
    assert not data.flags.writeable
    with path.open("r+b") as handle:
        handle.write(np.full(4, 5, np.int32).tobytes())
    assert data.tolist() == [[5, 5, 5, 5]]  # a view on the client's memory


async def test_unregister_while_in_use_closes_after_the_last_user(server, shm_object) -> None:
    key, _ = shm_object
    server.register_system_shared_memory("r", key, 4096)
    region = server.shared_memory._regions["r"]
    task = asyncio.ensure_future(server.infer(shm_request("slow", "r")))
    await asyncio.sleep(0)  # scheduled: the request holds the region
    assert region.users == 3  # held once per tensor in it
    server.unregister_system_shared_memory("r")
    assert region.closing and region._map is not None  # still mapped for its user
    response = await task
    assert response.shared_memory_outputs == frozenset({"OUTPUT0"})
    assert region.users == 0 and region._map is None


def test_a_view_that_outlives_its_region_still_reads_its_bytes(shm_object) -> None:
    """A region closed (unregistered, last user gone) while something still holds a view of
    it, e.g. a Python model's output view of a region or a model keeping its input: the
    mapping stays until the view goes, instead of being unmapped under it (a SIGSEGV)."""
    key, path = shm_object
    path.write_bytes(np.arange(1024, dtype=np.int32).tobytes())
    registry = SharedMemoryRegistry(ALLOWED)
    registry.register_system("r", key, 4096)
    region = registry.acquire("r", 0, 4096)
    view = np.ndarray((1024,), np.int32, region.view(0, 4096))
    registry.unregister(RegionKind.SYSTEM, "r")
    registry.release(region)  # the last user: the region closes
    assert region._map is None
    assert int(view.sum()) == sum(range(1024))


async def refused_input(server, key: str, byte_size: int, spec: SharedMemoryInput) -> TritonError:
    """The error of a request whose two inputs are ``spec``, in region "r" of ``key``."""
    server.register_system_shared_memory("r", key, byte_size)
    request = InferenceRequest(
        "identity", {}, shared_memory=SharedMemoryTensors({"INPUT0": spec, "INPUT1": spec})
    )
    with pytest.raises(TritonError) as info:
        await server.infer(request)
    assert server.shared_memory._regions["r"].users == 0  # released on failure
    return info.value


async def test_malformed_bytes_in_a_region_are_an_invalid_arg(server, shm_object) -> None:
    key, path = shm_object
    with path.open("r+b") as handle:
        handle.write((1 << 31).to_bytes(4, "little"))  # a length running past the region
    spec = SharedMemoryInput("BYTES", (1, 1), SharedMemoryRef("r", 64))
    error = await refused_input(server, key, 64, spec)
    assert error.status is Status.INVALID_ARG
    assert "unable to parse BYTES data for input 'INPUT0'" in error.message


async def test_input_byte_size_must_match_its_shape(server, shm_object) -> None:
    spec = SharedMemoryInput("INT32", (1, 4), SharedMemoryRef("r", 12))
    error = await refused_input(server, shm_object[0], 4096, spec)
    assert error.message == (
        "input byte size mismatch for input 'INPUT0' for model 'identity'. Expected 16, got 12"
    )


def test_registry_refuses_when_client_shm_is_off(shm_object) -> None:
    registry = SharedMemoryRegistry()
    error = error_of(registry.register_system, "r", shm_object[0], 8)
    assert (error.status, error.message) == (Status.UNSUPPORTED, CLIENT_SHM_DISABLED)
    assert registry.status(RegionKind.SYSTEM) == []


def test_registry_bounds_count_and_bytes(shm_object) -> None:
    key, _ = shm_object
    registry = SharedMemoryRegistry(SharedMemoryOptions(True, 2, 4096))
    registry.register_system("a", key, 2048)
    error = error_of(registry.register_system, "b", key, 4096)
    assert "--shm-max-total-byte-size" in error.message
    registry.register_system("b", key, 2048, offset=2048)
    assert "--shm-max-regions" in error_of(registry.register_system, "c", key, 8).message
    registry.close()
    assert len(registry) == 0


def test_negative_limits_are_refused_naming_the_flag() -> None:
    with pytest.raises(ValueError, match="--shm-max-regions"):
        SharedMemoryOptions(True, -1)
    with pytest.raises(ValueError, match="--shm-max-total-byte-size"):
        SharedMemoryOptions(True, 1, -1)


def test_a_region_at_an_unaligned_offset_maps_the_right_bytes(shm_object) -> None:
    key, path = shm_object
    offset = 1001  # not a multiple of mmap.ALLOCATIONGRANULARITY
    with path.open("r+b") as handle:
        handle.seek(offset)
        handle.write(b"hello")
    registry = SharedMemoryRegistry(ALLOWED)
    registry.register_system("r", key, 64, offset)
    region = registry.acquire("r", 0, 5)
    assert bytes(region.view(0, 5)) == b"hello"
    region.write(5, np.frombuffer(b"!", np.uint8))
    registry.release(region)
    registry.close()
    assert path.read_bytes()[offset : offset + 6] == b"hello!"
    assert os.path.getsize(path) == 4096


async def test_a_request_cancelled_at_once_lets_its_regions_go(server, shm_object) -> None:
    key, _ = shm_object
    server.register_system_shared_memory("r", key, 4096)
    region = server.shared_memory._regions["r"]
    answer = server.submit(shm_request("slow", "r"))
    assert region.users == 3
    answer.cancel()  # the client went away before anything ran
    with pytest.raises(asyncio.CancelledError):
        await answer
    await asyncio.sleep(0)  # the answer's callbacks run on the loop's next turn
    assert region.users == 0


_SIZES = st.one_of(st.integers(-8, 300), st.integers(-(2**63), 2**64))


@settings(max_examples=300, deadline=None)
@given(
    datatype=st.sampled_from([*NUMPY_DTYPES, "INVALID"]),
    shape=st.lists(st.one_of(st.integers(-2, 6), st.integers(2**31, 2**62)), max_size=3),
    offset=_SIZES,
    byte_size=_SIZES,
    content=st.binary(max_size=256),
    output_size=_SIZES,
)
@example("INT32", [2, 2], 1008, 16, b"", 16)  # the region's last 16 bytes, in and out
@example("BYTES", [2], 0, 11, b"\x01\x00\x00\x00a\x02\x00\x00\x00bc", 11)
@example("BYTES", [1], 0, 8, b"\xff\xff\xff\xff", 64)  # a length past the region
@example("FP32", [4], 1020, 16, b"", 16)  # runs past the end
def test_whatever_a_client_names_is_a_view_or_an_error(
    fuzz_registry, datatype, shape, offset, byte_size, content, output_size
) -> None:
    """Hostile offsets, sizes, shapes and bytes: a view inside the region, or a TritonError."""
    registry, path = fuzz_registry
    with path.open("r+b") as handle:
        handle.seek(256)  # where the region starts
        handle.write(content)
    spec = SharedMemoryInput(datatype, tuple(shape), SharedMemoryRef("fuzz", byte_size, offset))
    request = InferenceRequest(
        "m",
        {},
        shared_memory=SharedMemoryTensors(
            {"X": spec}, {"Y": SharedMemoryRef("fuzz", output_size, offset)}
        ),
    )
    try:
        resolved, use = resolve(registry, request)
    except TritonError:
        return
    try:
        array = resolved.inputs["X"].data
        if array.dtype != object and array.size:
            assert array.nbytes == byte_size and offset + byte_size <= 1024  # inside
        response = InferenceResponse([Tensor("Y", datatype, array)])
        with contextlib.suppress(TritonError):
            use.write_outputs(response)
    finally:
        use.release()


@pytest.fixture(scope="module")
def fuzz_registry() -> Iterator[tuple[SharedMemoryRegistry, Path]]:
    path = Path("/dev/shm") / f"tcshm_fuzz_{uuid.uuid4().hex[:12]}"
    path.write_bytes(bytes(4096))
    registry = SharedMemoryRegistry(ALLOWED)
    registry.register_system("fuzz", f"/{path.name}", 1024, offset=256)
    try:
        yield registry, path
    finally:
        registry.close()
        path.unlink()
