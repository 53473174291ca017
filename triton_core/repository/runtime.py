"""The seam between the repository and scheduling: what a loaded version needs to serve.

The repository turns a model folder into a config, a backend model and its instances; it
does not know how requests reach them. The server hands the loader a :class:`ModelRuntime`
(:class:`triton_core.scheduling.runtime.SchedulingRuntime`), which puts a loaded version's
instances in a pool and builds its scheduler. So the repository imports nothing from
:mod:`triton_core.scheduling`, and scheduling plugins can change without touching it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from triton_core.backends.contract import BackendModel, InstanceSpec, ModelInstance
    from triton_core.observability.statistics import ModelStatistics
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.repository.ensembles import EnsemblePlan
    from triton_core.server.model import LoadedModel, ModelSignature
    from triton_core.server.warmup import WarmupSample


@dataclass(frozen=True, slots=True)
class VersionParts:
    """What the loader made of one version, for the runtime to serve."""

    config: ModelConfig
    version: int
    model_dir: Path
    signature: ModelSignature
    statistics: ModelStatistics
    backend_model: BackendModel
    #: every instance the config asks for, passive ones included, in ``instances``' order
    specs: list[InstanceSpec]
    instances: list[ModelInstance]
    samples: list[WarmupSample]
    #: an ensemble's checked steps (None for a model with a backend)
    ensemble: EnsemblePlan | None = None

    def discard(self) -> None:
        """Finalize what a load that failed half way created."""
        discard(self.instances, self.backend_model)


#: serves a version: pool, warm-up and scheduler; on a failure it finalizes the version's
#: instances and backend model, then raises
ServeVersion = Callable[[VersionParts], "LoadedModel"]


class ModelRuntime(Protocol):
    """What the loader needs from scheduling."""

    @property
    def rate_limiting(self) -> bool:
        """``--rate-limit`` is on: instance groups' ``rate_limiter`` settings take effect."""
        ...

    def serving(self, config: ModelConfig) -> ServeVersion:
        """How versions of ``config`` will be served; raises TritonError naming the field when
        no installed plugin provides its scheduler or batching strategy (checked before the
        backend loads anything)."""
        ...


def discard(instances: list[ModelInstance], backend_model: BackendModel) -> None:
    """Finalize the instances, then the backend model."""
    for instance in instances:
        instance.finalize()
    backend_model.finalize()
