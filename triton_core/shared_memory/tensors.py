"""Requests' tensors in shared memory: inputs as numpy views, outputs written into regions.

Inputs are views on the mapping, never copies; their region is held (its use count) until
the request is answered, and the mapping itself lives as long as any view of it does, so a
region unregistered mid-request stays valid for that request. Every use re-checks the
object's real size first: a region truncated by its owner is an INVALID_ARG, not a SIGBUS.

Tensors in CUDA regions become :class:`~triton_core.DeviceBuffer` s instead of host copies
when the server asks for it (``resolve(..., device=True)``: a model whose instances take
device tensors); outputs such an instance wrote into their region are not copied again.
"""

from __future__ import annotations

import asyncio
import contextlib
import mmap
from dataclasses import replace
from math import prod
from typing import TYPE_CHECKING, Final, cast

import numpy as np

from triton_core.errors import internal, invalid_arg
from triton_core.shared_memory.refs import SharedMemorySpans, SystemSpan
from triton_core.shared_memory.region import RegionKind
from triton_core.shared_memory.system import SystemRegion
from triton_core.tensors import buffer_manager
from triton_core.tensors.device_tensors import DEVICE_DATATYPES, DeviceBuffer, output_too_small
from triton_core.tensors.dtypes import NUMPY_DTYPES, deserialize_bytes, serialize_bytes
from triton_core.types import InferenceRequest, InferenceResponse, Tensor

if TYPE_CHECKING:
    from triton_core.shared_memory.refs import SharedMemoryInput, SharedMemoryRef
    from triton_core.shared_memory.region import Region
    from triton_core.shared_memory.registry import SharedMemoryRegistry
    from triton_core.tensors.device_tensors import DeviceMemory

#: outputs larger than this (all together) are written from a thread, off the event loop
OFFLOAD_BYTES: Final = 1 << 20


class SharedMemoryUse:
    """The regions one request holds, and where its outputs go; :meth:`release` once."""

    __slots__ = ("_held", "_registry", "outputs", "writing")

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self._registry = registry
        self._held: list[Region] = []
        #: output name -> (its region, where in it)
        self.outputs: dict[str, tuple[Region, SharedMemoryRef]] = {}
        #: outputs being written from a thread: the regions stay held until it ends
        self.writing: asyncio.Future[None] | None = None

    def hold(self, ref: SharedMemoryRef) -> Region:
        region = self._registry.acquire(ref.region, ref.offset, ref.byte_size)
        self._held.append(region)
        return region

    def release(self) -> None:
        """Let the regions go (idempotent); after the write in progress, if one is."""
        writing = self.writing
        if writing is not None and not writing.done():
            writing.add_done_callback(lambda _: self.release())
            return
        held, self._held = self._held, []
        for region in held:
            self._registry.release(region)

    def bytes_to_write(self, response: InferenceResponse) -> int:
        """Bytes :meth:`write_outputs` would copy: outputs a backend already wrote into
        their regions (SharedMemorySpans) cost nothing."""
        if response.error is not None or not self.outputs:
            return 0
        total = 0
        for tensor in response.outputs:
            target = self.outputs.get(tensor.name)
            if target is None:
                continue
            region, ref = target
            if not (isinstance(region, SystemRegion) and region.holds(ref.offset, tensor.data)):
                total += min(tensor.data.nbytes, ref.byte_size)
        return total

    def write_outputs(self, response: InferenceResponse) -> None:
        """Write the outputs asked into regions there; the response then marks them."""
        if response.error is not None or not self.outputs:
            return
        written = []
        for tensor in response.outputs:
            target = self.outputs.get(tensor.name)
            if target is not None:
                _write(tensor, *target)
                written.append(tensor.name)
            elif isinstance(tensor.data, DeviceBuffer):  # not for a region: the body needs it
                tensor.data = tensor.data.to_host()
        response.shared_memory_outputs = frozenset(written)


def resolve(
    registry: SharedMemoryRegistry, request: InferenceRequest, *, device: bool = False
) -> tuple[InferenceRequest, SharedMemoryUse]:
    """A copy of ``request`` whose shared-memory inputs are views, and the regions it holds.

    ``device``: tensors in CUDA regions stay there, as :class:`DeviceBuffer` inputs and
    ``device_outputs`` targets, for a model whose instances accept device tensors.
    """
    tensors = request.shared_memory
    assert tensors is not None
    use = SharedMemoryUse(registry)
    inputs = dict(request.inputs)
    model = request.model_name
    spans = SharedMemorySpans()
    device_outputs: dict[str, DeviceBuffer] = {}
    lease = DeviceLease(registry) if device else None
    try:
        for name, spec in tensors.inputs.items():
            if name in inputs:
                raise invalid_arg(f"input '{name}' already exists in request for model '{model}'")
            region = use.hold(spec.ref)
            region.check_alive()
            on_device = (
                device and region.kind is RegionKind.CUDA and spec.datatype in DEVICE_DATATYPES
            )
            data = _input_array(region, spec, name, model, on_device)
            if lease is not None and isinstance(data, DeviceBuffer):
                data = cast(np.ndarray, replace(data, lease=lease.hold(spec.ref)))
            inputs[name] = Tensor(name, spec.datatype, data)
            if isinstance(region, SystemRegion) and data.size:
                # BYTES: the serialized elements, which the server has parsed and checked
                size = spec.ref.byte_size if data.dtype.kind == "O" else data.nbytes
                spans.inputs[name] = (data, SystemSpan(region, spec.ref.offset, size))
        for name, ref in tensors.outputs.items():
            region = use.hold(ref)
            use.outputs[name] = (region, ref)
            if isinstance(region, SystemRegion):
                spans.outputs[name] = SystemSpan(region, ref.offset, ref.byte_size)
            elif (
                lease is not None
                and region.kind is RegionKind.CUDA
                and name not in _classified(request)
            ):
                device_outputs[name] = _output_target(region, ref, lease.hold(ref))
    except BaseException:
        if lease is not None:
            lease.end()
        use.release()
        raise
    in_regions = spans if spans.inputs or spans.outputs else None
    resolved = replace(request, inputs=inputs, shared_memory=None, shared_memory_spans=in_regions)
    if device_outputs:
        resolved.device_outputs = device_outputs
    return resolved, use


def _classified(request: InferenceRequest) -> set[str]:
    """Outputs asked as top-K labels: the server reads their values on the host."""
    return {output.name for output in request.outputs or () if output.classification > 0}


def _output_target(region: Region, ref: SharedMemoryRef, lease: DeviceLease) -> DeviceBuffer:
    """The client's bytes for an output, as a writable buffer (laid out by the backend)."""
    memory = cast("DeviceMemory", region)
    size = ref.byte_size
    return DeviceBuffer(memory, ref.offset, size, "UINT8", (size,), False, lease)


class DeviceLease:
    """One request's holds on the regions of its device tensors, besides its own.

    A client that goes away releases the request's regions at once (SharedMemoryUse), but
    an instance may still read and write them on the device until its batch ends, and a
    region closed under it (its IPC mapping) would fault the GPU. These holds end after the
    batch (``release_leases``), when its tensors are copied to host, or, for a request
    dropped before it ran, when it is collected (released on the event loop then, never
    inside whatever code the collector interrupted).
    """

    __slots__ = ("_held", "_loop", "_registry")

    def __init__(self, registry: SharedMemoryRegistry) -> None:
        self._registry = registry
        self._held: list[Region] = []
        self._loop = asyncio.get_running_loop()

    def hold(self, ref: SharedMemoryRef) -> DeviceLease:
        self._held.append(self._registry.acquire(ref.region, ref.offset, ref.byte_size))
        return self

    def end(self) -> None:
        held, self._held = self._held, []
        for region in held:
            self._registry.release(region)

    def __del__(self) -> None:
        if self._held:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server stopped
                self._loop.call_soon_threadsafe(self.end)


def _input_array(
    region: Region, spec: SharedMemoryInput, name: str, model: str, on_device: bool = False
) -> np.ndarray:
    """The input as a view of its region, or where it is (``on_device``: a CUDA region)."""
    shape = spec.shape
    dtype = NUMPY_DTYPES.get(spec.datatype)
    if dtype is None:
        raise invalid_arg(
            f"invalid datatype '{spec.datatype}' for input '{name}' for model '{model}'"
        )
    if any(dim < 0 for dim in shape):
        raise invalid_arg(f"invalid shape {list(shape)} for input '{name}' for model '{model}'")
    count = prod(shape)
    ref = spec.ref
    if spec.datatype == "BYTES":
        try:
            flat = deserialize_bytes(region.view(ref.offset, ref.byte_size), count)
        except ValueError as exc:
            raise invalid_arg(
                f"unable to parse BYTES data for input '{name}' for model '{model}': {exc}"
            ) from None
        return _shaped(flat, shape, name, model)
    expected = count * dtype.itemsize
    if ref.byte_size != expected:
        raise invalid_arg(
            f"input byte size mismatch for input '{name}' for model '{model}'. "
            f"Expected {expected}, got {ref.byte_size}"
        )
    if not count:
        return _shaped(np.empty(0, dtype), shape, name, model)
    if on_device:
        memory = cast("DeviceMemory", region)
        # Tensor.data holds a DeviceBuffer only on the way to instances that accept one
        return cast(np.ndarray, DeviceBuffer(memory, ref.offset, expected, spec.datatype, shape))
    array = np.ndarray(shape, dtype, region.view(ref.offset, expected))
    array.flags.writeable = False  # the client's memory: models read it, never write it
    return array


def _shaped(flat: np.ndarray, shape: tuple[int, ...], name: str, model: str) -> np.ndarray:
    """``flat`` in ``shape``; a zero-element shape may still multiply past what numpy holds."""
    try:
        return flat.reshape(shape)
    except ValueError as exc:
        raise invalid_arg(
            f"invalid shape {list(shape)} for input '{name}' for model '{model}': {exc}"
        ) from None


def _write(tensor: Tensor, region: Region, ref: SharedMemoryRef) -> None:
    """One copy, from the output's array into the region (cast to the wire type first)."""
    data = tensor.data
    if isinstance(data, DeviceBuffer):
        if data.memory is region and data.offset == ref.offset:
            if data.nbytes > ref.byte_size:
                raise output_too_small(tensor.name, ref.byte_size, data.nbytes)
            return  # the backend wrote it there
        data = data.to_host()
    datatype = tensor.datatype
    if datatype == "BYTES":
        data = np.frombuffer(serialize_bytes(data), np.uint8)
    else:
        wire = NUMPY_DTYPES.get(datatype)
        if wire is None:
            raise internal(f"output '{tensor.name}' has an invalid datatype '{datatype}'")
        if datatype == "BF16" and data.dtype.itemsize == 2:
            data = data.view(wire)  # bfloat16 bit patterns, e.g. from ml_dtypes
        if data.dtype != wire:
            data = data.astype(wire)
    size = data.nbytes
    if size > ref.byte_size:
        raise output_too_small(tensor.name, ref.byte_size, size)
    if not size:
        return
    if isinstance(region, SystemRegion) and region.holds(ref.offset, data):
        return  # a backend wrote it there itself (SharedMemorySpans)
    region.check_alive()
    region.write(ref.offset, data)


def owned_outputs(response: InferenceResponse) -> InferenceResponse:
    """``response`` with outputs that view a client's region copied: what a cache may keep
    (a client rewrites its region; a cached answer must not change with it)."""
    if not any(_views_mapping(tensor.data) for tensor in response.outputs):
        return response
    outputs = [
        Tensor(t.name, t.datatype, t.data.copy()) if _views_mapping(t.data) else t
        for t in response.outputs
    ]
    return replace(response, outputs=outputs)


def _views_mapping(array: np.ndarray) -> bool:
    base = array.base
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    return isinstance(base, mmap.mmap)


def answer_in_regions(
    answer: asyncio.Future[InferenceResponse],
    use: SharedMemoryUse,
    done: asyncio.Future[InferenceResponse],
) -> None:
    """The model answered (``done``): write the outputs asked into regions, then ``answer``
    (the server's answer to a request with shared-memory tensors)."""
    if answer.done():
        return  # cancelled: the client went away
    if done.cancelled():
        answer.cancel()
        return
    error = done.exception()
    if error is not None:
        answer.set_exception(error)
        return
    response = done.result()
    try:
        writing = _start_writing(use, response)
    except Exception as exc:  # an output region too small, say
        answer.set_exception(exc)
        return
    if writing is None:
        answer.set_result(response)
    else:
        writing.add_done_callback(lambda written: _written(answer, response, written))


def _written(
    answer: asyncio.Future[InferenceResponse],
    response: InferenceResponse,
    written: asyncio.Future[None],
) -> None:
    if answer.done():
        return
    if written.cancelled():
        answer.cancel()
    elif (error := written.exception()) is not None:
        answer.set_exception(error)
    else:
        answer.set_result(response)


def _start_writing(
    use: SharedMemoryUse, response: InferenceResponse
) -> asyncio.Future[None] | None:
    """Write a response's shared-memory outputs: small ones at once (None), large ones from
    a thread (numpy copies without the GIL), so that the event loop goes on serving
    meanwhile; the regions stay held until that write ends."""
    if use.bytes_to_write(response) <= OFFLOAD_BYTES:
        use.write_outputs(response)
        return None
    copiers = buffer_manager.threads()  # --buffer-manager-thread-count, when given
    if copiers is not None:
        writing = copiers.run(use.write_outputs, response)
    else:
        writing = asyncio.get_running_loop().run_in_executor(None, use.write_outputs, response)
    use.writing = writing  # a cancelled caller's release waits for the write to end
    return writing


async def write_outputs(use: SharedMemoryUse, response: InferenceResponse) -> None:
    """:func:`_start_writing`, awaited."""
    writing = _start_writing(use, response)
    if writing is not None:
        await writing
