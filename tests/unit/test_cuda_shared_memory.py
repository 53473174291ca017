"""CUDA regions in the registry: what a register request must be before any CUDA call, and the
answers of a server that cannot open CUDA handles (the real module, on this machine)."""

from __future__ import annotations

import base64
import multiprocessing
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path

import numpy as np
import pytest

from triton_core import SharedMemoryOptions, Status, TritonError
from triton_core.server.core import EXTENSIONS, Server, ServerOptions
from triton_core.shared_memory.cuda import (
    BAD_HANDLE,
    CUDA_IPC_HANDLE_SIZE,
    CudaSupport,
    check_device,
    check_request,
    cuda_support,
)
from triton_core.shared_memory.region import RegionKind
from triton_core.shared_memory.registry import CLIENT_SHM_DISABLED, SharedMemoryRegistry
from triton_core.tensors.devices import gpu_count

ALLOWED = SharedMemoryOptions(allow_client_shm=True)
HANDLE = bytes(range(CUDA_IPC_HANDLE_SIZE))
CUDA = cuda_support()
ROOT = Path(__file__).resolve().parents[2]
NEEDS_CUDA = pytest.mark.skipif(
    not CUDA.available, reason=f"CUDA regions cannot be opened here: {CUDA.reason}"
)


def error_of(call, *args) -> TritonError:  # type: ignore[no-untyped-def]
    with pytest.raises(TritonError) as info:
        call(*args)
    return info.value


@pytest.fixture
def shm_key() -> Iterator[str]:
    """A POSIX shared-memory object with this test's prefix."""
    name = f"tccudashm_unit_{uuid.uuid4().hex[:12]}"
    path = Path("/dev/shm") / name
    path.write_bytes(bytes(4096))
    try:
        yield f"/{name}"
    finally:
        path.unlink(missing_ok=True)


# ------------------------------------------------------------------------------------------
# the request, field by field


def test_a_region_needs_a_name() -> None:
    error = error_of(check_request, "", HANDLE, 0, 16)
    assert error.status is Status.INVALID_ARG
    assert error.message == "'region name' is necessary to register cuda shared memory region"


@pytest.mark.parametrize("size", [0, 1, 63, 65, 128])
def test_a_handle_is_64_bytes(size: int) -> None:
    error = error_of(check_request, "r", bytes(size), 0, 16)
    assert (error.status, error.message) == (Status.INVALID_ARG, BAD_HANDLE)


def test_a_region_has_bytes() -> None:
    error = error_of(check_request, "r", HANDLE, 0, 0)
    assert error.message == "failed to register shared memory region 'r': invalid args"


def test_a_device_id_is_not_negative() -> None:
    error = error_of(check_request, "r", HANDLE, -1, 16)
    assert error.message == "failed to register CUDA shared memory region 'r': invalid device id -1"


def test_a_device_id_is_one_of_the_servers_devices() -> None:
    two_devices = CudaSupport(device_count=2)
    check_device("r", 1, two_devices)
    error = error_of(check_device, "r", 2, two_devices)
    assert error.status is Status.INVALID_ARG
    assert error.message == (
        "failed to register CUDA shared memory region 'r': device 2 is not a CUDA device of "
        "the server, which has 2"
    )


def test_without_cuda_the_reason_is_in_the_answer() -> None:
    error = error_of(check_device, "r", 0, CudaSupport(reason="no CUDA device is visible"))
    assert error.status is Status.INVALID_ARG
    assert error.message == (
        "failed to register CUDA shared memory region: 'r', GPUs not supported: "
        "no CUDA device is visible"
    )


# ------------------------------------------------------------------------------------------
# the registry: its switch, names and limits come before any CUDA call


def test_registering_needs_allow_client_shm_before_anything_else() -> None:
    registry = SharedMemoryRegistry()
    error = error_of(registry.register_cuda, "", b"short", -1, 0)
    assert (error.status, error.message) == (Status.UNSUPPORTED, CLIENT_SHM_DISABLED)


def test_a_name_registered_as_system_memory_is_refused(shm_key: str) -> None:
    registry = SharedMemoryRegistry(ALLOWED)
    registry.register_system("taken", shm_key, 4096)
    try:
        error = error_of(registry.register_cuda, "taken", HANDLE, 0, 16)
        assert error.status is Status.ALREADY_EXISTS
        assert error.message == "shared memory region 'taken' already in manager"
        assert registry.status(RegionKind.CUDA) == []
    finally:
        registry.close()


def test_the_total_byte_limit_holds_for_cuda_regions() -> None:
    registry = SharedMemoryRegistry(SharedMemoryOptions(True, max_total_byte_size=1024))
    error = error_of(registry.register_cuda, "big", HANDLE, 0, 1025)
    assert error.status is Status.INVALID_ARG
    assert "--shm-max-total-byte-size" in error.message and "'big'" in error.message


def test_the_region_count_limit_holds_for_cuda_regions() -> None:
    registry = SharedMemoryRegistry(SharedMemoryOptions(True, max_regions=0))
    error = error_of(registry.register_cuda, "one", HANDLE, 0, 16)
    assert "--shm-max-regions" in error.message


@pytest.mark.skipif(CUDA.available, reason="checks a machine that cannot open CUDA handles")
def test_without_cuda_registering_says_why_and_registers_nothing() -> None:
    registry = SharedMemoryRegistry(ALLOWED)
    error = error_of(registry.register_cuda, "r", HANDLE, 0, 1024)
    assert error.status is Status.INVALID_ARG
    assert error.message.startswith(
        "failed to register CUDA shared memory region: 'r', GPUs not supported: "
    )
    assert CUDA.reason and error.message.endswith(CUDA.reason)
    assert len(registry) == 0
    registry.unregister(RegionKind.CUDA)  # nothing to unregister is not an error
    assert registry.status(RegionKind.CUDA) == []


@pytest.mark.skipif(gpu_count() > 0, reason="checks a machine without a GPU")
def test_without_a_gpu_cuda_python_is_never_imported() -> None:
    """A server without a GPU answers CUDA register requests without loading cuda-python."""
    script = (
        "import sys\n"
        "from triton_core.shared_memory.registry import SharedMemoryRegistry\n"
        "from triton_core import SharedMemoryOptions, TritonError\n"
        "registry = SharedMemoryRegistry(SharedMemoryOptions(allow_client_shm=True))\n"
        "try:\n"
        "    registry.register_cuda('r', bytes(64), 0, 16)\n"
        "except TritonError as error:\n"
        "    print(error.message)\n"
        "print(sorted(m for m in sys.modules if m == 'cuda' or m.startswith('cuda.')))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env
    )
    assert result.returncode == 0, result.stderr
    message, modules = result.stdout.splitlines()
    assert "GPUs not supported: no CUDA device is visible to the server" in message
    assert modules == "[]"


# ------------------------------------------------------------------------------------------
# the server metadata


def test_metadata_lists_cuda_shared_memory_only_where_cuda_works() -> None:
    extensions = Server(ServerOptions(model_repositories=[])).metadata().extensions
    if CUDA.available:
        at = extensions.index("system_shared_memory")
        assert extensions[at + 1] == "cuda_shared_memory"
        assert len(extensions) == len(EXTENSIONS) + 1
    else:
        assert tuple(extensions) == EXTENSIONS
        assert "cuda_shared_memory" not in extensions


# ------------------------------------------------------------------------------------------
# a GPU machine: a region another process exported, through the real CudaRegion


def _exporter(pipe: Connection) -> None:
    """Another process: a device allocation of 4 KiB holding 0..255 repeated, its handle sent
    to the parent, its contents sent back when asked."""
    import tritonclient.utils.cuda_shared_memory as cudashm

    region = cudashm.create_shared_memory_region("tccudashm_unit_export", 4096, 0)
    try:
        cudashm.set_shared_memory_region(
            region, [np.arange(4096, dtype=np.uint32).astype(np.uint8)]
        )
        pipe.send(base64.b64decode(cudashm.get_raw_handle(region)))
        while pipe.poll(120) and pipe.recv() == "read":
            pipe.send(cudashm.get_contents_as_numpy(region, np.uint8, [4096]).tobytes())
    finally:
        cudashm.destroy_shared_memory_region(region)


@pytest.fixture
def exported() -> Iterator[tuple[bytes, Connection]]:
    """(handle, pipe) of a 4 KiB allocation on device 0 in another process."""
    context = multiprocessing.get_context("spawn")
    parent, child = context.Pipe()
    process = context.Process(target=_exporter, args=(child,), daemon=True)
    process.start()
    try:
        assert parent.poll(120), "the exporting process sent no handle"
        yield parent.recv(), parent
    finally:
        parent.send("done")
        process.join(60)
        if process.is_alive():
            process.kill()


@pytest.mark.gpu
@NEEDS_CUDA
def test_a_region_reads_and_writes_another_processes_device_memory(exported) -> None:
    handle, pipe = exported
    registry = SharedMemoryRegistry(ALLOWED)
    registry.register_cuda("tccudashm_unit", handle, 0, 4096)
    try:
        assert [row.byte_size for row in registry.status(RegionKind.CUDA)] == [4096]
        region = registry.acquire("tccudashm_unit", 16, 64)
        assert bytes(region.view(16, 64)) == bytes(range(16, 80))
        region.write(1024, np.arange(16, dtype=np.float32).reshape(4, 4).T)
        registry.unregister(RegionKind.CUDA, "tccudashm_unit")  # in use: closed at release
        region.check_alive()
        registry.release(region)
        with pytest.raises(TritonError):
            region.check_alive()
        pipe.send("read")
        assert pipe.poll(60)
        contents = np.frombuffer(pipe.recv(), np.uint8)
        expected = np.ascontiguousarray(np.arange(16, dtype=np.float32).reshape(4, 4).T)
        assert contents[1024:1088].tobytes() == expected.tobytes()
        assert contents[:1024].tobytes() == (np.arange(1024) % 256).astype(np.uint8).tobytes()
    finally:
        registry.close()


@pytest.mark.gpu
@NEEDS_CUDA
def test_a_byte_size_past_the_exported_allocation_is_refused(exported) -> None:
    handle, _ = exported
    registry = SharedMemoryRegistry(ALLOWED)
    error = error_of(registry.register_cuda, "tccudashm_unit", handle, 0, 64 << 20)
    assert error.message == "failed to register shared memory region 'tccudashm_unit': invalid args"
    assert len(registry) == 0


@pytest.mark.gpu
@NEEDS_CUDA
def test_a_region_copies_on_the_device_and_counts_its_host_copies(exported) -> None:
    from triton_core.shared_memory.cuda import HOST_COPIES

    handle, _ = exported
    registry = SharedMemoryRegistry(ALLOWED)
    registry.register_cuda("tccudashm_unit_dtod", handle, 0, 4096)
    try:
        region = registry.acquire("tccudashm_unit_dtod", 0, 4096)
        before = (HOST_COPIES.count, HOST_COPIES.byte_size)
        region.copy_from_device(2048, region.device_pointer(16), 64)  # type: ignore[attr-defined]
        assert (HOST_COPIES.count, HOST_COPIES.byte_size) == before
        assert bytes(region.view(2048, 64)) == bytes(range(16, 80))
        assert (HOST_COPIES.count, HOST_COPIES.byte_size) == (before[0] + 1, before[1] + 64)
        region.write(0, np.zeros(8, np.uint8))
        assert HOST_COPIES.count == before[0] + 2
        registry.release(region)
    finally:
        registry.close()
