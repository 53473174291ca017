"""The in-process shared-memory API and its registry, with the numpy test backend."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tests.support import numpy_server, write_numpy_model
from triton_core import (
    InferenceRequest,
    SharedMemoryInput,
    SharedMemoryOptions,
    SharedMemoryRef,
    SharedMemoryTensors,
    Status,
    SystemRegionStatus,
    TritonError,
)
from triton_core.shared_memory.region import RegionKind
from triton_core.shared_memory.registry import CLIENT_SHM_DISABLED, SharedMemoryRegistry

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
    error = error_of(registry.register_system, "r", shm_object[0], 0, 8)
    assert (error.status, error.message) == (Status.UNSUPPORTED, CLIENT_SHM_DISABLED)
    assert registry.status(RegionKind.SYSTEM) == []


def test_registry_bounds_count_and_bytes(shm_object) -> None:
    key, _ = shm_object
    registry = SharedMemoryRegistry(SharedMemoryOptions(True, 2, 4096))
    registry.register_system("a", key, 0, 2048)
    error = error_of(registry.register_system, "b", key, 0, 4096)
    assert "--shm-max-total-byte-size" in error.message
    registry.register_system("b", key, 2048, 2048)
    assert "--shm-max-regions" in error_of(registry.register_system, "c", key, 0, 8).message
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
    registry.register_system("r", key, offset, 64)
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
    assert region.users == 0
