"""What a backend returns, checked against the model config before it leaves the server.

The plan is built once per model version at load; checking a response costs a dict lookup
and a few compares per output tensor, never a loop over elements. The rules:

* only outputs the config declares (``output``, and implicit-state ``output_name``\\ s of
  ``sequence_batching``) - an undeclared output is an error, as in Triton, not dropped;
* the tensor's datatype is the config's wire name (``FP32``, not ``float32``) and its data is
  a numpy array of the dtype that holds it (:data:`triton_core.dtypes.NUMPY_DTYPES`; BYTES
  may be object, bytes or str arrays);
* the shape is the config's dims (-1 matches any size), after the batch dimension when
  ``max_batch_size`` > 0, which must equal the request's batch size. A tensor in the
  config's ``reshape`` shape is reshaped to its dims, as Triton presents it to clients;
* a response with no outputs at all is an error (decoupled models may send empty ones).

A violation fails that request with INTERNAL; the caller names the model and plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from triton_core.config import wire_datatype
from triton_core.device_tensors import DeviceBuffer
from triton_core.dtypes import NUMPY_DTYPES

if TYPE_CHECKING:
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.types import Tensor

#: numpy kinds a BYTES output may hold: objects (bytes or str), fixed bytes, fixed str
_BYTES_KINDS = frozenset("OSU")


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What the config says about one output, precomputed for the check."""

    name: str
    datatype: str
    dtype: np.dtype
    #: per-item dims (without the batch dimension)
    dims: tuple[int, ...]
    #: the config's ``reshape``: the shape a model may produce instead of ``dims``
    reshape: tuple[int, ...] | None


class OutputCheck:
    """The outputs one model version may return, and the check of one response."""

    def __init__(self, config: ModelConfig) -> None:
        self.batched = config.max_batch_size > 0
        self.allow_empty = config.model_transaction_policy.decoupled
        specs = {}
        for tensor in config.output:
            reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
            specs[tensor.name] = _spec(tensor.name, tensor.data_type, tensor.dims, reshape)
        for state in config.sequence_batching.state:
            if state.output_name not in specs:
                specs[state.output_name] = _spec(
                    state.output_name, state.data_type, state.dims, None
                )
        self.specs: dict[str, OutputSpec] = specs

    def problem(self, outputs: Sequence[Tensor], batch_size: int) -> str | None:
        """What is wrong with a response's outputs, or None; may reshape per the config."""
        if not outputs:
            if self.specs and not self.allow_empty:
                return "returned no outputs"
            return None
        specs = self.specs
        for tensor in outputs:
            spec = specs.get(tensor.name)
            if spec is None:
                return (
                    f"returned output '{tensor.name}', which the config does not declare "
                    f"(declared: {', '.join(specs) or 'none'})"
                )
            problem = self._tensor_problem(tensor, spec, batch_size)
            if problem is not None:
                return problem
        return None

    def _tensor_problem(self, tensor: Tensor, spec: OutputSpec, batch_size: int) -> str | None:
        data = tensor.data
        if tensor.datatype != spec.datatype:
            return (
                f"returned output '{spec.name}' with datatype '{tensor.datatype}', but the config "
                f"says '{spec.datatype}'"
            )
        if not isinstance(data, np.ndarray) and not isinstance(data, DeviceBuffer):
            return f"returned output '{spec.name}' as a {type(data).__name__}, not a numpy array"
        if data.dtype != spec.dtype and not (
            spec.datatype == "BYTES" and data.dtype.kind in _BYTES_KINDS
        ):
            return (
                f"returned output '{spec.name}' ({spec.datatype}) holding numpy {data.dtype} "
                f"values; {spec.datatype} is held as numpy {spec.dtype}"
            )
        shape = data.shape
        if self.batched:
            if not shape or shape[0] != batch_size:
                return (
                    f"returned output '{spec.name}' with shape {format_shape(shape)} for a "
                    f"request of batch size {batch_size} (expected "
                    f"{format_shape((batch_size, *spec.dims))})"
                )
            item = shape[1:]
        else:
            item = shape
        if shape_matches(item, spec.dims):
            return None
        if spec.reshape is not None and shape_matches(item, spec.reshape) and -1 not in spec.dims:
            target = (batch_size, *spec.dims) if self.batched else spec.dims
            tensor.data = data.reshape(target)
            return None
        expected = (batch_size, *spec.dims) if self.batched else spec.dims
        return (
            f"returned output '{spec.name}' with shape {format_shape(shape)}, expected "
            f"{format_shape(expected)}"
        )


def _spec(
    name: str, data_type: int, dims: Sequence[int], reshape: tuple[int, ...] | None
) -> OutputSpec:
    datatype = wire_datatype(data_type)
    return OutputSpec(name, datatype, NUMPY_DTYPES[datatype], tuple(dims), reshape)


def shape_matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether a shape fits config dims, where -1 matches any size."""
    if shape == dims:  # the common case, compared in C
        return True
    if len(shape) != len(dims):
        return False
    return all(dim == -1 or dim == actual for actual, dim in zip(shape, dims, strict=True))


def format_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(dim) for dim in shape) + "]"
