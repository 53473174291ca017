"""What a backend returns, checked before it leaves the server, by Triton's rule.

Triton's core checks an output's name against the config and nothing else about it: the
shape and the datatype a backend reports go to the client as they are (a Python model may
return ``[1]`` for dims ``[1,-1]``, ``[0]`` FP64 for a STRING output, a response with no
outputs). The plan is built once per model version at load; checking a response costs a dict
lookup and a few compares per output tensor, never a loop over elements. The rules:

* only outputs the config declares (``output``, and implicit-state ``output_name``\\ s of
  ``sequence_batching``) - an undeclared output is an error, as in Triton's core;
* the tensor's datatype is a wire name (``FP32``, not ``float32``) and its data is a numpy
  array of the dtype that holds it (:data:`triton_core.tensors.dtypes.NUMPY_DTYPES`; BYTES may be
  object, bytes or str arrays), so that the codecs write what the datatype says;
* a tensor in the config's ``reshape`` shape is reshaped to its dims, as Triton presents it
  to clients.

A violation fails that request with INTERNAL; the caller names the model and plugin.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from triton_core.tensors.device_tensors import DeviceBuffer
from triton_core.tensors.dtypes import NUMPY_DTYPES

if TYPE_CHECKING:
    from triton_core.protos.model_config_pb2 import ModelConfig
    from triton_core.types import Tensor

#: numpy kinds a BYTES output may hold: objects (bytes or str), fixed bytes, fixed str
_BYTES_KINDS = frozenset("OSU")


@dataclass(frozen=True, slots=True)
class OutputSpec:
    """What the config says about one output that the check needs: its reshape."""

    name: str
    #: per-item dims (without the batch dimension)
    dims: tuple[int, ...]
    #: the config's ``reshape``: the shape a model may produce instead of ``dims``
    reshape: tuple[int, ...] | None


class OutputCheck:
    """The outputs one model version may return, and the check of one response."""

    def __init__(self, config: ModelConfig) -> None:
        self.batched = config.max_batch_size > 0
        specs = {}
        for tensor in config.output:
            reshape = tuple(tensor.reshape.shape) if tensor.HasField("reshape") else None
            specs[tensor.name] = OutputSpec(tensor.name, tuple(tensor.dims), reshape)
        for state in config.sequence_batching.state:
            if state.output_name not in specs:
                specs[state.output_name] = OutputSpec(state.output_name, tuple(state.dims), None)
        self.specs: dict[str, OutputSpec] = specs

    def problem(self, outputs: Sequence[Tensor], batch_size: int) -> str | None:
        """What is wrong with a response's outputs, or None; may reshape per the config.

        ``batch_size`` is the request's; Triton does not hold an output's shape to it.
        """
        specs = self.specs
        for tensor in outputs:
            spec = specs.get(tensor.name)
            if spec is None:
                return (
                    f"returned output '{tensor.name}', which the config does not declare "
                    f"(declared: {', '.join(specs) or 'none'})"
                )
            problem = _data_problem(tensor)
            if problem is not None:
                return problem
            if spec.reshape is not None:
                self._undo_reshape(tensor, spec)
        return None

    def _undo_reshape(self, tensor: Tensor, spec: OutputSpec) -> None:
        """A tensor in the config's reshape shape goes out in its dims, as in Triton."""
        shape = tensor.data.shape
        if self.batched and not shape:
            return
        item = shape[1:] if self.batched else shape
        if spec.reshape is not None and shape_matches(item, spec.reshape) and -1 not in spec.dims:
            target = (shape[0], *spec.dims) if self.batched else spec.dims
            tensor.data = tensor.data.reshape(target)


def _data_problem(tensor: Tensor) -> str | None:
    """Whether the data is what the tensor's datatype says, so the codecs write it right."""
    data = tensor.data
    expected = NUMPY_DTYPES.get(tensor.datatype)
    if expected is None:
        return (
            f"returned output '{tensor.name}' with datatype '{tensor.datatype}', which is not "
            "a datatype name such as 'FP32'"
        )
    if not isinstance(data, np.ndarray) and not isinstance(data, DeviceBuffer):
        return f"returned output '{tensor.name}' as a {type(data).__name__}, not a numpy array"
    if data.dtype != expected and not (
        tensor.datatype == "BYTES" and data.dtype.kind in _BYTES_KINDS
    ):
        return (
            f"returned output '{tensor.name}' ({tensor.datatype}) holding numpy {data.dtype} "
            f"values; {tensor.datatype} is held as numpy {expected}"
        )
    return None


def shape_matches(shape: Sequence[int], dims: Sequence[int]) -> bool:
    """Whether a shape fits config dims, where -1 matches any size."""
    if shape == dims:  # the common case, compared in C
        return True
    if len(shape) != len(dims):
        return False
    return all(dim == -1 or dim == actual for actual, dim in zip(shape, dims, strict=True))


def format_shape(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(dim) for dim in shape) + "]"
