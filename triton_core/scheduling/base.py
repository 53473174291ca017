"""The scheduler contract and what a scheduler is given to work with."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_core.backends.services import ModelServices
    from triton_core.observability.statistics import ModelStatistics
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.repository.ensembles import EnsemblePlan
    from triton_core.scheduling.executor import InstancePool
    from triton_core.scheduling.strategy import BatchStrategy
    from triton_core.types import InferenceRequest, InferenceResponse


@dataclass(frozen=True, slots=True)
class SchedulerContext:
    """What a scheduler factory gets for one loaded model version."""

    model_name: str
    model_version: int
    config: ModelConfig
    #: the model's instances, each with its own worker thread
    pool: InstancePool
    loop: asyncio.AbstractEventLoop
    #: the version's statistics; schedulers record why they dispatch each batch here
    statistics: ModelStatistics
    #: the custom batching strategy the config names (parameter ``batch_strategy``), if any
    batch_strategy: BatchStrategy | None = None
    #: the server, for schedulers that call other models (ensembles)
    server: ModelServices | None = None
    #: ``<repository>/<model>``, for files a scheduler reads (sequence ``initial_state``)
    model_dir: Path | None = None
    #: an ensemble's steps, planned and checked by the repository when the version loaded
    ensemble: EnsemblePlan | None = None


class Scheduler(ABC):
    """Sits between the server and a model's instances; one per loaded model version.

    ``enqueue`` is called on the event loop for every validated request and must not block;
    the returned future resolves with the response, or with a
    :class:`~triton_core.TritonError`.
    """

    @abstractmethod
    def enqueue(self, request: InferenceRequest) -> asyncio.Future[InferenceResponse]:
        """Accept one request; answer through the returned future."""

    @property
    @abstractmethod
    def pending_count(self) -> int:
        """Requests accepted but not yet executing."""

    @abstractmethod
    async def stop(self) -> None:
        """Stop accepting work, finish what was accepted, and stop the instances."""
