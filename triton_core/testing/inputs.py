"""Build requests from numpy arrays: tritonclient inputs (HTTP, gRPC) and in-process requests."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from triton_core.tensors.dtypes import wire_datatype_of
from triton_core.types import InferenceRequest, RequestedOutput, Tensor

if TYPE_CHECKING:
    import tritonclient.grpc
    import tritonclient.http

#: an input: an array (its datatype follows from its dtype: object, str and bytes arrays are
#: BYTES), or ``(datatype, array)`` where the dtype does not say (``"BF16"``)
ArrayInput: TypeAlias = np.ndarray | tuple[str, np.ndarray]


def _datatype_and_array(
    name: str, value: ArrayInput, known: Callable[[np.dtype], str | None] = lambda dtype: None
) -> tuple[str, np.ndarray]:
    if isinstance(value, tuple):
        datatype, array = value
        return datatype, np.asarray(array)
    array = np.asarray(value)
    try:
        return known(array.dtype) or wire_datatype_of(array), array
    except ValueError as exc:
        raise ValueError(f"input '{name}': {exc}; pass (datatype, array)") from None


def _client_inputs(module: Any, arrays: Mapping[str, ArrayInput], **options: Any) -> list[Any]:
    # tritonclient's own names first: it knows ml_dtypes.bfloat16 arrays (BF16)
    from tritonclient.utils import np_to_triton_dtype

    inputs = []
    for name, value in arrays.items():
        datatype, array = _datatype_and_array(name, value, np_to_triton_dtype)
        tensor = module.InferInput(name, list(array.shape), datatype)
        tensor.set_data_from_numpy(array, **options)
        inputs.append(tensor)
    return inputs


def http_inputs(
    arrays: Mapping[str, ArrayInput], *, binary_data: bool = True
) -> list[tritonclient.http.InferInput]:
    """``tritonclient.http.InferInput``s with data, one per ``{name: array}`` entry."""
    import tritonclient.http

    return _client_inputs(tritonclient.http, arrays, binary_data=binary_data)


def grpc_inputs(arrays: Mapping[str, ArrayInput]) -> list[tritonclient.grpc.InferInput]:
    """``tritonclient.grpc.InferInput``s with data, one per ``{name: array}`` entry."""
    import tritonclient.grpc

    return _client_inputs(tritonclient.grpc, arrays)


def inference_request(
    model_name: str,
    arrays: Mapping[str, ArrayInput],
    outputs: Iterable[str] | None = None,
    **fields: Any,
) -> InferenceRequest:
    """An in-process ``InferenceRequest``; ``outputs`` None asks for every output.

    ``fields`` are further ``InferenceRequest`` fields (``model_version``, ``parameters``...).
    """
    inputs = {}
    for name, value in arrays.items():
        datatype, array = _datatype_and_array(name, value)
        inputs[name] = Tensor(name, datatype, array)
    requested = None if outputs is None else [RequestedOutput(name) for name in outputs]
    return InferenceRequest(model_name, inputs, outputs=requested, **fields)
