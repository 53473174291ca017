"""One stand-in for the real :class:`~triton_core.server.core.Server`, for frontend unit tests.

:class:`FakeServer` implements the whole :class:`~triton_core.frontends.server_api.ServerAPI`
(mypy checks it: ``tests/fake_server.py`` is in ``[tool.mypy] files``) and answers as the
real server does where a frontend can tell: the same errors, in the same words, for unknown
models and versions and unavailable statistics; the configs it serves are real
``ModelConfig`` messages rendered by the real ``config_to_json``; shared memory is the real
registry. What a test varies is the models (:class:`FakeModel`) and how ``infer`` answers
(``handler``, or an override in a subclass).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_core.backends.streaming import ResponsePool
from triton_core.config.model_config import config_to_json
from triton_core.errors import invalid_arg
from triton_core.observability.statistics import ModelStatistics
from triton_core.protos import model_config_pb2
from triton_core.shared_memory.region import CudaRegionStatus, RegionKind, SystemRegionStatus
from triton_core.shared_memory.registry import SharedMemoryOptions, SharedMemoryRegistry
from triton_core.types import (
    InferenceRequest,
    InferenceResponse,
    ModelIndexEntry,
    ModelMetadata,
    ServerMetadata,
    Tensor,
    TensorMetadata,
)

if TYPE_CHECKING:
    from triton_core.frontends.server_api import ServerAPI

Handler = Callable[[InferenceRequest], Awaitable[InferenceResponse]]


@dataclass
class FakeModel:
    """A model the fake serves: its versions, which are ready, and its tensors."""

    name: str
    inputs: tuple[TensorMetadata, ...]
    outputs: tuple[TensorMetadata, ...]
    versions: tuple[int, ...] = (1,)
    ready: set[int] = field(default_factory=lambda: {1})
    decoupled: bool = False
    platform: str = "python"
    #: 0: no batching; else the metadata's shapes lead with -1 for the batch
    max_batch_size: int = 8
    #: its folder in a local repository (version folders inside), or None as for a cloud one
    folder: Path | None = None

    def config(self) -> model_config_pb2.ModelConfig:
        config = model_config_pb2.ModelConfig(
            name=self.name, backend=self.platform, max_batch_size=self.max_batch_size
        )
        for tensors, field_ in ((self.inputs, config.input), (self.outputs, config.output)):
            for tensor in tensors:
                dims = tensor.shape[1:] if self.max_batch_size else tensor.shape
                data_type = model_config_pb2.DataType.Value(f"TYPE_{tensor.datatype}")
                field_.add(name=tensor.name, data_type=data_type, dims=dims)
        config.model_transaction_policy.decoupled = self.decoupled
        return config


async def echo(request: InferenceRequest) -> InferenceResponse:
    """Every input back as an output of the same name and data."""
    outputs = [Tensor(t.name, t.datatype, t.data) for t in request.inputs.values()]
    return InferenceResponse(
        outputs=outputs, model_name=request.model_name, model_version=1, id=request.id
    )


class FakeServer:
    """The server API over a table of :class:`FakeModel` s; ``infer`` calls ``handler``."""

    def __init__(
        self,
        models: list[FakeModel],
        handler: Handler = echo,
        metadata: ServerMetadata | None = None,
    ) -> None:
        self.models = {model.name: model for model in models}
        self.handler = handler
        self.server_metadata = metadata or ServerMetadata(
            "triton", "2.73.0", ("binary_tensor_data", "model_configuration")
        )
        self.live = True
        self.ready = True
        #: every request that reached infer or submit, in order
        self.requests: list[InferenceRequest] = []
        self.loaded: list[str] = []
        self.unloaded: list[str] = []
        self.repositories: dict[str, dict[str, str]] = {}
        self.shared_memory = SharedMemoryRegistry(SharedMemoryOptions(allow_client_shm=True))

    def model(self, name: str, version: int = -1) -> FakeModel:
        """The model, with the real server's errors for an unknown model or version."""
        model = self.models.get(name)
        if model is None:
            raise invalid_arg(f"Request for unknown model: '{name}' is not found")
        if version != -1 and version not in model.versions:
            raise invalid_arg(f"Request for unknown model: '{name}' version {version} is not found")
        return model

    # -- health and metadata

    def is_live(self) -> bool:
        return self.live

    def is_ready(self) -> bool:
        return self.ready

    async def check_ready(self) -> bool:
        return self.is_ready()

    def model_ready(self, name: str, version: int = -1) -> bool:
        model = self.model(name, version)
        return bool(model.ready) if version == -1 else version in model.ready

    async def check_model_ready(self, name: str, version: int = -1) -> bool:
        return self.model_ready(name, version)

    def metadata(self) -> ServerMetadata:
        return self.server_metadata

    def model_metadata(self, name: str, version: int = -1) -> ModelMetadata:
        model = self.model(name, version)
        versions = (str(version),) if version >= 0 else tuple(str(v) for v in sorted(model.ready))
        return ModelMetadata(name, versions, model.platform, model.inputs, model.outputs)

    def model_config(self, name: str, version: int = -1) -> model_config_pb2.ModelConfig:
        return self.model(name, version).config()

    def model_config_json(self, name: str, version: int = -1) -> dict[str, Any]:
        return config_to_json(self.model_config(name, version))

    def model_is_decoupled(self, name: str, version: int = -1) -> bool:
        return self.model(name, version).decoupled

    def statistics(self, name: str = "", version: int = -1) -> list[ModelStatistics]:
        if not name:
            return [ModelStatistics(m.name, v) for m in self.models.values() for v in m.ready]
        model = self.models.get(name)
        if version >= 0:
            if model is None or version not in model.ready:
                raise invalid_arg(f"requested model version is not available for model '{name}'")
            return [ModelStatistics(name, version)]
        if model is None or not model.ready:
            raise invalid_arg(f"requested model '{name}' is not available")
        return [ModelStatistics(name, v) for v in sorted(model.ready)]

    # -- inference

    async def infer(self, request: InferenceRequest) -> InferenceResponse:
        self.model(request.model_name, request.model_version)
        self.requests.append(request)
        return await self.handler(request)

    def submit(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Unknown models raise at once, as the real server's do."""
        self.model(request.model_name, request.model_version)
        return asyncio.ensure_future(self.infer(request))

    async def infer_stream(
        self, request: InferenceRequest, *, pool: ResponsePool | None = None
    ) -> AsyncIterator[InferenceResponse]:
        """A model answers once on a stream, as the real server's ordinary models do."""
        response = await self.infer(request)
        if response.error is not None:
            raise response.error
        if pool is not None:
            pool.take()  # released by the caller once written
        yield response

    # -- repository

    def repository_index(self, ready_only: bool = False) -> list[ModelIndexEntry]:
        return [
            ModelIndexEntry(model.name, version, "READY" if version in model.ready else "")
            for model in self.models.values()
            for version in model.versions
            if version in model.ready or not ready_only
        ]

    def model_version_path(self, name: str, version: int = -1) -> Path | None:
        model = self.model(name, version)
        if model.folder is None:
            return None
        return model.folder / str(max(model.ready or model.versions) if version == -1 else version)

    async def load_model(
        self, name: str, config: str | None = None, files: dict[str, bytes] | None = None
    ) -> None:
        self.model(name).ready = set(self.models[name].versions)
        self.loaded.append(name)

    async def unload_model(self, name: str, unload_dependents: bool = False) -> None:
        self.model(name).ready = set()
        self.unloaded.append(name)

    def register_model_repository(self, path: str, mapping: dict[str, str] | None = None) -> None:
        self.repositories[path] = dict(mapping or {})

    def unregister_model_repository(self, path: str) -> None:
        self.repositories.pop(path, None)

    # -- shared memory: the real registry

    def check_client_shm(self) -> None:
        self.shared_memory.check_allowed()

    def register_system_shared_memory(
        self, name: str, key: str, byte_size: int, offset: int = 0
    ) -> None:
        self.shared_memory.register_system(name, key, byte_size, offset)

    def system_shared_memory_status(self, name: str = "") -> list[SystemRegionStatus]:
        return self.shared_memory.status_of(SystemRegionStatus, RegionKind.SYSTEM, name)

    def unregister_system_shared_memory(self, name: str = "") -> None:
        self.shared_memory.unregister(RegionKind.SYSTEM, name)

    def register_cuda_shared_memory(
        self, name: str, raw_handle: bytes, device_id: int, byte_size: int
    ) -> None:
        self.shared_memory.register_cuda(name, raw_handle, device_id, byte_size)

    def cuda_shared_memory_status(self, name: str = "") -> list[CudaRegionStatus]:
        return self.shared_memory.status_of(CudaRegionStatus, RegionKind.CUDA, name)

    def unregister_cuda_shared_memory(self, name: str = "") -> None:
        self.shared_memory.unregister(RegionKind.CUDA, name)


if TYPE_CHECKING:
    #: mypy checks here that the fake implements every method of the frontends' protocol
    _implements: type[ServerAPI] = FakeServer
