"""triton-core: an inference server that speaks Triton's protocol, as a small core plus plugins.

The names in ``__all__`` are the public API: what a plugin (a backend, a frontend, a
scheduler, a batching strategy, a response cache, a repository agent) or an in-process user
may import. They are
imported from ``triton_core`` itself::

    from triton_core import Backend, InferenceResponse, Tensor, TritonError, hookimpl

The modules under ``triton_core`` (``triton_core.backends.contract``,
``triton_core.tensors.dtypes`` ...) are internal and change without notice;
``triton_core.testing`` (pytest fixtures) and ``triton_core.ray`` (a Ray Serve deployment,
with the ``ray`` extra) are the public modules besides this one. The modules that moved into
the layers' packages import at their old paths for one release, with a DeprecationWarning
(``triton_core.plugins.migration``, whose finder importing this package installs).

Each name is imported on first use, so ``import triton_core`` costs almost nothing: plugins
and processes that need a few contracts do not pay for the server. ``tests/unit/
test_public_api.py`` keeps the three lists below (what type checkers see, what is loaded on
use, ``__all__``) in step.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from triton_core.plugins.migration import install_moved_module_finder

__version__ = "0.1.0"

install_moved_module_finder()

#: module -> the public names it defines, imported from it on first access
_EXPORTS: dict[str, tuple[str, ...]] = {
    "triton_core.backends.contract": (
        "Backend",
        "BackendModel",
        "EventDrivenInstance",
        "InstanceSpec",
        "ModelContext",
        "ModelInstance",
    ),
    "triton_core.cache.base": ("CacheStatistics", "ResponseCache", "response_size"),
    "triton_core.config.model_config": (
        "config_from_json",
        "config_to_json",
        "parse_config_text",
        "wire_datatype",
    ),
    "triton_core.tensors.device_tensors": ("DEVICE_DATATYPES", "DeviceBuffer"),
    "triton_core.tensors.dtypes": (
        "CONFIG_TO_WIRE",
        "ELEMENT_SIZE",
        "NUMPY_DTYPES",
        "WIRE_TO_CONFIG",
        "deserialize_bytes",
        "serialize_bytes",
        "wire_datatype_of",
    ),
    "triton_core.frontends.base": ("Endpoint", "Frontend", "FrontendSettings"),
    "triton_core.frontends.builtin.http_endpoint": ("HttpEndpointFrontend",),
    "triton_core.frontends.server_api": ("ServerAPI",),
    "triton_core.errors": (
        "Status",
        "TritonError",
        "internal",
        "invalid_arg",
        "not_found",
        "unavailable",
        "unsupported",
    ),
    "triton_core.backends.framework.config": (
        "ReportedTensor",
        "available_cpus",
        "batchable",
        "claimed_inputs",
        "complete_batching",
        "config_shape",
        "count_instances",
        "default_max_batch_size",
        "dims_error",
        "fill_tensor",
        "fill_unset",
        "format_shape",
        "state_outputs",
        "wire_type",
        "wire_types",
    ),
    "triton_core.backends.framework.execution": (
        "BatchPlan",
        "Reshape",
        "RunBatch",
        "input_reshapes",
        "output_reshapes",
        "reshaper",
    ),
    "triton_core.backends.framework.parameters": ("Parameters",),
    "triton_core.plugins.hookspecs": ("hookimpl",),
    "triton_core.plugins.manager": ("PluginManager", "create_plugin_manager"),
    "triton_core.tensors.ragged": ("RaggedBatching",),
    "triton_core.protos.model_config_pb2": (
        "DataType",
        "ModelConfig",
        "ModelDynamicBatching",
        "ModelInput",
        "ModelInstanceGroup",
        "ModelOutput",
        "ModelParameter",
        "ModelSequenceBatching",
        "ModelTensorReshape",
    ),
    "triton_core.plugins.registry": (
        "BackendRegistry",
        "BatchStrategyRegistry",
        "CacheRegistry",
        "FrontendRegistry",
        "Registration",
        "RepositoryAgentRegistry",
        "SchedulerRegistry",
    ),
    "triton_core.repository.agents": ("AgentAction", "AgentModel", "RepositoryAgent"),
    "triton_core.repository.layout": ("is_within",),
    "triton_core.scheduling.base": ("Scheduler", "SchedulerContext"),
    "triton_core.scheduling.executor": ("InstancePool",),
    "triton_core.scheduling.strategy": ("BatchStrategy",),
    "triton_core.server.core": ("Server", "ServerOptions"),
    "triton_core.backends.services": ("ModelServices",),
    "triton_core.shared_memory.refs": (
        "SharedMemoryInput",
        "SharedMemoryRef",
        "SharedMemorySpans",
        "SharedMemoryTensors",
        "SystemSpan",
    ),
    "triton_core.shared_memory.region": ("SystemRegionStatus",),
    "triton_core.shared_memory.registry": ("SharedMemoryOptions",),
    "triton_core.observability.statistics": ("ExecutionTimes", "ModelStatistics"),
    "triton_core.types": (
        "InferenceRequest",
        "InferenceResponse",
        "ParameterValue",
        "RequestedOutput",
        "RequestFlag",
        "ResponseSender",
        "Tensor",
        "has_device_tensors",
        "request_on_device",
        "request_to_host",
    ),
}

if TYPE_CHECKING:
    from triton_core.backends.contract import (
        Backend,
        BackendModel,
        EventDrivenInstance,
        InstanceSpec,
        ModelContext,
        ModelInstance,
    )
    from triton_core.backends.framework.config import (
        ReportedTensor,
        available_cpus,
        batchable,
        claimed_inputs,
        complete_batching,
        config_shape,
        count_instances,
        default_max_batch_size,
        dims_error,
        fill_tensor,
        fill_unset,
        format_shape,
        state_outputs,
        wire_type,
        wire_types,
    )
    from triton_core.backends.framework.execution import (
        BatchPlan,
        Reshape,
        RunBatch,
        input_reshapes,
        output_reshapes,
        reshaper,
    )
    from triton_core.backends.framework.parameters import Parameters
    from triton_core.backends.services import ModelServices
    from triton_core.cache.base import CacheStatistics, ResponseCache, response_size
    from triton_core.config.model_config import (
        config_from_json,
        config_to_json,
        parse_config_text,
        wire_datatype,
    )
    from triton_core.errors import (
        Status,
        TritonError,
        internal,
        invalid_arg,
        not_found,
        unavailable,
        unsupported,
    )
    from triton_core.frontends.base import Endpoint, Frontend, FrontendSettings
    from triton_core.frontends.builtin.http_endpoint import HttpEndpointFrontend
    from triton_core.frontends.server_api import ServerAPI
    from triton_core.observability.statistics import ExecutionTimes, ModelStatistics
    from triton_core.plugins.hookspecs import hookimpl
    from triton_core.plugins.manager import PluginManager, create_plugin_manager
    from triton_core.plugins.registry import (
        BackendRegistry,
        BatchStrategyRegistry,
        CacheRegistry,
        FrontendRegistry,
        Registration,
        RepositoryAgentRegistry,
        SchedulerRegistry,
    )
    from triton_core.protos.model_config_pb2 import (
        DataType,
        ModelConfig,
        ModelDynamicBatching,
        ModelInput,
        ModelInstanceGroup,
        ModelOutput,
        ModelParameter,
        ModelSequenceBatching,
        ModelTensorReshape,
    )
    from triton_core.repository.agents import AgentAction, AgentModel, RepositoryAgent
    from triton_core.repository.layout import is_within
    from triton_core.scheduling.base import Scheduler, SchedulerContext
    from triton_core.scheduling.executor import InstancePool
    from triton_core.scheduling.strategy import BatchStrategy
    from triton_core.server.core import Server, ServerOptions
    from triton_core.shared_memory.refs import (
        SharedMemoryInput,
        SharedMemoryRef,
        SharedMemorySpans,
        SharedMemoryTensors,
        SystemSpan,
    )
    from triton_core.shared_memory.region import SystemRegionStatus
    from triton_core.shared_memory.registry import SharedMemoryOptions
    from triton_core.tensors.device_tensors import DEVICE_DATATYPES, DeviceBuffer
    from triton_core.tensors.dtypes import (
        CONFIG_TO_WIRE,
        ELEMENT_SIZE,
        NUMPY_DTYPES,
        WIRE_TO_CONFIG,
        deserialize_bytes,
        serialize_bytes,
        wire_datatype_of,
    )
    from triton_core.tensors.ragged import RaggedBatching
    from triton_core.types import (
        InferenceRequest,
        InferenceResponse,
        ParameterValue,
        RequestedOutput,
        RequestFlag,
        ResponseSender,
        Tensor,
        has_device_tensors,
        request_on_device,
        request_to_host,
    )
else:
    _MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}

    def __getattr__(name: str) -> Any:
        module = _MODULE_OF.get(name)
        if module is None:
            raise AttributeError(f"module 'triton_core' has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value  # later lookups skip this function
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "CONFIG_TO_WIRE",
    "DEVICE_DATATYPES",
    "ELEMENT_SIZE",
    "NUMPY_DTYPES",
    "WIRE_TO_CONFIG",
    "AgentAction",
    "AgentModel",
    "Backend",
    "BackendModel",
    "BackendRegistry",
    "BatchPlan",
    "BatchStrategy",
    "BatchStrategyRegistry",
    "CacheRegistry",
    "CacheStatistics",
    "DataType",
    "DeviceBuffer",
    "Endpoint",
    "EventDrivenInstance",
    "ExecutionTimes",
    "Frontend",
    "FrontendRegistry",
    "FrontendSettings",
    "HttpEndpointFrontend",
    "InferenceRequest",
    "InferenceResponse",
    "InstancePool",
    "InstanceSpec",
    "ModelConfig",
    "ModelContext",
    "ModelDynamicBatching",
    "ModelInput",
    "ModelInstance",
    "ModelInstanceGroup",
    "ModelOutput",
    "ModelParameter",
    "ModelSequenceBatching",
    "ModelServices",
    "ModelStatistics",
    "ModelTensorReshape",
    "ParameterValue",
    "Parameters",
    "PluginManager",
    "RaggedBatching",
    "Registration",
    "ReportedTensor",
    "RepositoryAgent",
    "RepositoryAgentRegistry",
    "RequestFlag",
    "RequestedOutput",
    "Reshape",
    "ResponseCache",
    "ResponseSender",
    "RunBatch",
    "Scheduler",
    "SchedulerContext",
    "SchedulerRegistry",
    "Server",
    "ServerAPI",
    "ServerOptions",
    "SharedMemoryInput",
    "SharedMemoryOptions",
    "SharedMemoryRef",
    "SharedMemorySpans",
    "SharedMemoryTensors",
    "Status",
    "SystemRegionStatus",
    "SystemSpan",
    "Tensor",
    "TritonError",
    "__version__",
    "available_cpus",
    "batchable",
    "claimed_inputs",
    "complete_batching",
    "config_from_json",
    "config_shape",
    "config_to_json",
    "count_instances",
    "create_plugin_manager",
    "default_max_batch_size",
    "deserialize_bytes",
    "dims_error",
    "fill_tensor",
    "fill_unset",
    "format_shape",
    "has_device_tensors",
    "hookimpl",
    "input_reshapes",
    "internal",
    "invalid_arg",
    "is_within",
    "not_found",
    "output_reshapes",
    "parse_config_text",
    "request_on_device",
    "request_to_host",
    "reshaper",
    "response_size",
    "serialize_bytes",
    "state_outputs",
    "unavailable",
    "unsupported",
    "wire_datatype",
    "wire_datatype_of",
    "wire_type",
    "wire_types",
]
