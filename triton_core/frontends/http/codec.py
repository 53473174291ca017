"""KServe v2 HTTP requests (JSON + binary tensor data extension) -> triton_core types.

This is the hot path of the HTTP frontend: binary tensors are decoded as numpy views on the
request body (no copies, no Python lists). Answers are encoded in :mod:`.answers`.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, Final, NamedTuple

import numpy as np
import orjson

from triton_core.errors import invalid_arg
from triton_core.frontends.common import FRONTEND_PARAMETERS, apply_request_parameters
from triton_core.shared_memory.refs import (
    SharedMemoryInput,
    SharedMemoryRef,
    SharedMemoryTensors,
)
from triton_core.tensors.dtypes import (
    CONFIG_TO_WIRE,
    NUMPY_DTYPES,
    deserialize_bytes,
    element_count,
)
from triton_core.types import (
    InferenceRequest,
    RequestedOutput,
    Tensor,
)

#: header giving the byte length of the leading JSON object of a request or response body
HEADER_LENGTH: Final = "Inference-Header-Content-Length"

_JSONDecodeError: Final = orjson.JSONDecodeError

#: numpy kinds a JSON array may infer to for each datatype, close to Triton's AsInt/AsUInt/
#: AsDouble/AsBool: no strings, no floats for integers, no all-bool numbers (numpy coerces
#: bools mixed with numbers, which is accepted)
_JSON_KINDS: Final[dict[str, str]] = {
    "BOOL": "b",
    "UINT8": "iu",
    "UINT16": "iu",
    "UINT32": "iu",
    "UINT64": "iu",
    "INT8": "iu",
    "INT16": "iu",
    "INT32": "iu",
    "INT64": "iu",
    "FP32": "iuf",
    "FP64": "iuf",
}
_UNSIGNED: Final = frozenset({"UINT8", "UINT16", "UINT32", "UINT64"})
#: datatypes JSON cannot carry (requests and answers alike)
NO_JSON: Final = frozenset({"FP16", "BF16"})
#: the most dimensions a numpy array may have
_MAX_RANK: Final = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32


class JsonLimits(NamedTuple):
    """Caps on a request's JSON: elements are counted before it is parsed, depth after."""

    #: ``--http-max-json-elements``: the ``,``, ``[`` and ``{`` of the JSON, at least one
    #: per value; bounds what parsing can allocate (~120 bytes each at worst: 2**18 of them
    #: are under 32 MiB, in each of the two decoding threads; a 3x224x224 tensor fits). Also
    #: the elements of a binary BYTES input, each an object too
    max_elements: int = 1 << 18
    #: ``--http-max-json-depth``: arrays and objects nested in one another
    max_depth: int = 32


DEFAULT_JSON_LIMITS: Final = JsonLimits()


def check_json_elements(text: bytes, limits: JsonLimits) -> None:
    """Refuse JSON with more elements than ``limits`` allows, before it is parsed."""
    max_elements = limits.max_elements
    if len(text) <= max_elements:  # each counted byte is one byte of the text
        return
    count = text.count(b",") + text.count(b"[") + text.count(b"{")
    if count > max_elements:
        raise invalid_arg(
            f"the request JSON has {count} elements, more than the limit of {max_elements} "
            "(--http-max-json-elements)"
        )


def check_json_depth(doc: Any, text: bytes, limits: JsonLimits) -> None:
    """Refuse a parsed JSON ``doc`` (of ``text``) nested deeper than ``limits`` allows."""
    max_depth = limits.max_depth
    if len(text) <= max_depth or text.count(b"[") + text.count(b"{") <= max_depth:
        return  # not enough arrays and objects to nest that deep
    if _nested_deeper_than(doc, max_depth):
        raise invalid_arg(
            f"the request JSON is nested deeper than the limit of {max_depth} "
            "(--http-max-json-depth)"
        )


def _nested_deeper_than(doc: Any, max_depth: int) -> bool:
    """Whether arrays and objects nest more than ``max_depth`` deep (no recursion)."""
    stack = [(doc, 1)] if type(doc) is list or type(doc) is dict else []
    while stack:
        value, depth = stack.pop()
        if depth > max_depth:
            return True
        for item in value.values() if type(value) is dict else value:
            if type(item) is list or type(item) is dict:
                stack.append((item, depth + 1))
    return False


def parse_json(text: bytes, limits: JsonLimits, what: str) -> Any:
    """``text`` parsed within ``limits``; INVALID_ARG naming ``what`` when it is not JSON."""
    check_json_elements(text, limits)
    try:
        doc = orjson.loads(text)
    except _JSONDecodeError as exc:
        raise invalid_arg(f"failed to parse {what}: {exc}") from None
    check_json_depth(doc, text, limits)
    return doc


class DecodedRequest(NamedTuple):
    """A decoded ``/infer`` body: the request plus how each output must be sent back."""

    request: InferenceRequest
    #: outputs listed in the request -> True for binary, False for JSON (their own
    #: ``binary_data`` parameter only, see PROTOCOL 1.4 GOTCHA)
    binary_outputs: dict[str, bool]
    #: format of outputs the request did not list (request parameter ``binary_data_output``)
    default_binary: bool


# ------------------------------------------------------------------------------------------
# request decoding


class _InputPlan(NamedTuple):
    name: str
    datatype: str
    dtype: np.dtype
    shape: list[int]
    element_count: int
    #: bytes after the JSON (binary data); None when the values are in the JSON
    byte_size: int | None
    #: the values from the JSON ``data``, or None for binary data
    array: np.ndarray | None
    #: where the values are when they are in a shared-memory region
    shm: SharedMemoryInput | None = None


class _HeaderPlan(NamedTuple):
    """What a request's JSON says, checked: all but the binary data itself."""

    inputs: tuple[_InputPlan, ...]
    request_id: str | None
    #: request parameters that set request fields or travel with it (None: none do)
    parameters: dict[str, Any] | None
    default_binary: bool
    outputs: list[RequestedOutput] | None
    binary_outputs: dict[str, bool]
    #: outputs to write into shared-memory regions, by name (None: none)
    shm_outputs: dict[str, SharedMemoryRef] | None = None


#: checked JSON headers by their bytes: clients send the same header with every request
#: (only the binary data changes), so it is parsed and checked once
_PLANS: dict[bytes, _HeaderPlan] = {}
_PLANS_MAX: Final = 512
#: longer headers are not looked up (nor kept)
_PLAN_KEY_MAX: Final = 4096
#: a header longer than this, or naming more inputs, is checked against the model's inputs
#: before any value is decoded (smaller ones decode quickly and the server checks them)
_CHECK_MODEL_BYTES: Final = 4096
_CHECK_MODEL_INPUTS: Final = 4

#: the names of a model's inputs, asked for only when a request is checked against them
ModelInputs = Callable[[], Collection[str]]


def decode_request(
    model_name: str,
    model_version: int,
    body: bytes | memoryview,
    header_length: int | None = None,
    limits: JsonLimits = DEFAULT_JSON_LIMITS,
    model_inputs: ModelInputs | None = None,
) -> DecodedRequest:
    """Decode a JSON (+ binary blobs) inference request body.

    ``header_length`` is the ``Inference-Header-Content-Length`` value (None: the whole body
    is JSON); it must be > 0 here, a raw binary request goes to :func:`decode_raw_request`.
    The JSON is held to ``limits``; a large one, or one naming many inputs, is checked
    against ``model_inputs`` before its values are decoded.
    Raises INVALID_ARG for anything malformed, UNSUPPORTED for shared-memory tensors.
    """
    end = len(body)
    if header_length is None:
        header_length = end
    header = body if header_length == end else body[:header_length]
    if type(header) is not bytes:  # a large body gathered in numpy's memory
        header = bytes(header)
    check_json_elements(header, limits)
    key = header if len(header) <= _PLAN_KEY_MAX else None
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return _build_request(plan, model_name, model_version, body, header_length)
    plan = _plan_header(header, model_name, limits, model_inputs)
    decoded = _build_request(plan, model_name, model_version, body, header_length)
    # kept once a request built from it is valid, and only without values in the JSON
    if key is not None and all(spec.array is None for spec in plan.inputs):
        if len(_PLANS) >= _PLANS_MAX:
            _PLANS.clear()
        _PLANS[bytes(key)] = plan
    return decoded


def _plan_header(
    header: bytes, model_name: str, limits: JsonLimits, model_inputs: ModelInputs | None
) -> _HeaderPlan:
    """Parse and check a request's JSON (its element count is already checked)."""
    try:
        doc = orjson.loads(header)
    except _JSONDecodeError as exc:
        raise invalid_arg(
            f"failed to parse the request JSON buffer for model '{model_name}': {exc}"
        ) from None
    check_json_depth(doc, header, limits)
    if type(doc) is not dict:
        raise invalid_arg(
            f"Unable to parse 'inputs' for model '{model_name}': the request JSON must be an object"
        )

    inputs_json = doc.get("inputs")
    if type(inputs_json) is not list:
        raise invalid_arg(f"Unable to parse 'inputs' for model '{model_name}'")
    if model_inputs is not None and (
        len(header) > _CHECK_MODEL_BYTES or len(inputs_json) > _CHECK_MODEL_INPUTS
    ):
        _check_input_names(inputs_json, model_inputs(), model_name)

    inputs: list[_InputPlan] = []
    names: set[str] = set()
    for input_json in inputs_json:
        if type(input_json) is not dict:
            raise invalid_arg(f"Unable to parse 'inputs' for model '{model_name}'")
        name = input_json.get("name")
        if type(name) is not str:
            raise invalid_arg(f"Unable to parse 'name' of an input for model '{model_name}'")
        datatype = input_json.get("datatype")
        if type(datatype) is not str:
            raise invalid_arg(
                f"Unable to parse 'datatype' for input '{name}' for model '{model_name}'"
            )
        shape = input_json.get("shape")
        if type(shape) is not list:
            raise invalid_arg(
                f"Unable to parse 'shape' for input '{name}' for model '{model_name}'"
            )
        if len(shape) > _MAX_RANK:
            raise invalid_arg(
                f"Unable to parse 'shape' for input '{name}' for model '{model_name}': "
                f"{len(shape)} dimensions, more than the {_MAX_RANK} a tensor may have"
            )
        count = 1
        for dim in shape:
            if type(dim) is not int or dim < 0:
                raise invalid_arg(
                    f"Unable to parse 'shape' for input '{name}' for model '{model_name}'"
                )
            count *= dim
        dtype = NUMPY_DTYPES.get(datatype)
        if dtype is None:
            raise invalid_arg(
                f"invalid datatype '{datatype}' for input '{name}' for model '{model_name}'"
            )
        if name in names:
            raise invalid_arg(f"input '{name}' already exists in request for model '{model_name}'")
        names.add(name)

        params = input_json.get("parameters")
        byte_size = None
        shm = None
        if params is not None:
            if type(params) is not dict:
                raise invalid_arg(
                    f"Unable to parse 'parameters' for input '{name}' for model '{model_name}'"
                )
            byte_size = params.get("binary_data_size")
            if _check_content_fields(
                name, model_name, input_json, byte_size is not None, params, count
            ):
                ref = shm_ref(params, f"input '{name}' for model '{model_name}'")
                shm = SharedMemoryInput(datatype, tuple(shape), ref)
        elif count and "data" not in input_json:
            _check_content_fields(name, model_name, input_json, False, None, count)

        array = None
        if shm is not None:
            if datatype == "BYTES" and count > limits.max_elements:
                raise invalid_arg(
                    f"input '{name}' for model '{model_name}' has {count} BYTES elements, more "
                    f"than the limit of {limits.max_elements} (--http-max-json-elements)"
                )
        elif byte_size is not None:
            if type(byte_size) is not int or byte_size < 0:
                raise invalid_arg(
                    f"Unable to parse 'binary_data_size' for input '{name}' for model "
                    f"'{model_name}'"
                )
            if datatype == "BYTES" and count > limits.max_elements:
                # each element becomes an object, as a JSON value does: the same cap
                raise invalid_arg(
                    f"input '{name}' for model '{model_name}' has {count} BYTES elements, more "
                    f"than the limit of {limits.max_elements} (--http-max-json-elements)"
                )
        else:
            array = _array_from_json(
                input_json.get("data"), datatype, dtype, shape, count, name, model_name
            )
        inputs.append(_InputPlan(name, datatype, dtype, shape, count, byte_size, array, shm))

    request_id = doc.get("id")
    if request_id is not None and type(request_id) is not str:
        raise invalid_arg(f"Unable to parse 'id' for model '{model_name}'")
    parameters = doc.get("parameters")
    default_binary = False
    if parameters is not None:
        # checked (and tried) once: only what sets request fields is applied per request
        default_binary = _apply_parameters(InferenceRequest(model_name, {}), parameters, model_name)
        if all(key in FRONTEND_PARAMETERS for key in parameters):
            parameters = None
    binary_outputs: dict[str, bool] = {}
    outputs_json = doc.get("outputs")
    outputs = None
    shm_outputs: dict[str, SharedMemoryRef] = {}
    if outputs_json is not None:
        outputs = _decode_outputs(outputs_json, binary_outputs, model_name, shm_outputs)
    return _HeaderPlan(
        tuple(inputs),
        request_id,
        parameters,
        default_binary,
        outputs,
        binary_outputs,
        shm_outputs or None,
    )


def _check_input_names(inputs_json: list[Any], known: Collection[str], model_name: str) -> None:
    """Refuse more inputs than the model has, or one it does not have, before decoding."""
    if len(inputs_json) > len(known):
        raise invalid_arg(
            f"expected at most {len(known)} inputs but got {len(inputs_json)} inputs for model "
            f"'{model_name}'"
        )
    names = frozenset(known)
    for input_json in inputs_json:
        name = input_json.get("name") if type(input_json) is dict else None
        if type(name) is str and name not in names:
            raise invalid_arg(
                f"unexpected inference input '{name}' for model '{model_name}', allowed inputs "
                f"are: {', '.join(known)}"
            )


def _build_request(
    plan: _HeaderPlan,
    model_name: str,
    model_version: int,
    body: bytes | memoryview,
    header_length: int,
) -> DecodedRequest:
    """The request a checked header describes, its tensors viewing the binary data."""
    end = len(body)
    inputs: dict[str, Tensor] = {}
    shm_inputs: dict[str, SharedMemoryInput] | None = None
    offset = header_length  # binary blobs follow the JSON in the order of the inputs
    for name, datatype, dtype, shape, count, byte_size, array, shm in plan.inputs:
        if shm is not None:
            if shm_inputs is None:
                shm_inputs = {}
            shm_inputs[name] = shm
            continue
        if byte_size is not None:
            stop = offset + byte_size
            if stop > end:
                raise invalid_arg(
                    f"unexpected size for input '{name}', expecting {stop - end} additional "
                    f"bytes for model '{model_name}'"
                )
            array = _array_from_binary(
                body, offset, byte_size, datatype, dtype, shape, count, name, model_name
            )
            offset = stop
        inputs[name] = Tensor(name, datatype, array)  # type: ignore[arg-type]
    if offset != end:
        raise invalid_arg(f"unexpected additional input data for model '{model_name}'")

    request = InferenceRequest(model_name, inputs, model_version)
    if plan.request_id is not None:
        request.id = plan.request_id
    if plan.parameters is not None:
        apply_request_parameters(request, plan.parameters)
    if plan.outputs is not None:
        request.outputs = list(plan.outputs)
    if shm_inputs is not None or plan.shm_outputs is not None:
        request.shared_memory = SharedMemoryTensors(shm_inputs or {}, dict(plan.shm_outputs or {}))
    return DecodedRequest(request, plan.binary_outputs, plan.default_binary)


def decode_raw_request(
    model_name: str, model_version: int, body: bytes | memoryview, config: Mapping[str, Any]
) -> DecodedRequest:
    """Decode a raw binary request (``Inference-Header-Content-Length: 0``).

    The body is the bytes of the model's only input; its datatype and shape come from the
    model ``config`` (PROTOCOL 1.10 JSON): batch-1 for batching models, the one variable
    dimension deduced from the body size. All outputs are returned in binary.
    """
    config_inputs = config.get("input") or []
    if len(config_inputs) != 1:
        raise invalid_arg(
            "Raw request must only have 1 input (found 1) to be deduced but got "
            f"{len(config_inputs)} inputs in '{model_name}' model configuration"
        )
    config_input = config_inputs[0]
    name = str(config_input.get("name", ""))
    datatype = CONFIG_TO_WIRE.get(str(config_input.get("data_type", "")))
    if datatype is None:
        raise invalid_arg(
            f"invalid datatype for raw input '{name}' in '{model_name}' model configuration"
        )
    shape: list[int] = [1] if int(config.get("max_batch_size", 0)) != 0 else []
    dynamic_axis = -1
    fixed_count = 1
    for dim in config_input.get("dims") or []:
        dim = int(dim)
        if dim == -1:
            if dynamic_axis != -1:
                raise invalid_arg(
                    f"The shape of the raw input '{name}' can not be deduced because there "
                    "are more than one variable-sized dimension"
                )
            dynamic_axis = len(shape)
        else:
            fixed_count *= dim
        shape.append(dim)

    if datatype == "BYTES":
        if dynamic_axis != -1 or fixed_count != 1:
            raise invalid_arg(
                f"For BYTE datatype raw input '{name}', the model must have input shape [1]"
            )
        data = np.empty(1, dtype=object)
        data[0] = bytes(body)
        data = data.reshape(shape)
    else:
        dtype = NUMPY_DTYPES[datatype]
        if dynamic_axis != -1:
            per_item = fixed_count * dtype.itemsize
            shape[dynamic_axis] = len(body) // per_item if per_item else 0
        count = element_count(shape)
        data = _array_from_binary(
            body, 0, len(body), datatype, dtype, shape, count, name, model_name
        )

    request = InferenceRequest(model_name, {name: Tensor(name, datatype, data)}, model_version)
    return DecodedRequest(request, {}, True)


def _check_content_fields(
    name: str,
    model_name: str,
    input_json: dict[str, Any],
    has_binary: bool,
    params: dict[str, Any] | None,
    count: int,
) -> bool:
    """Exactly one of data / binary_data_size / shared_memory_region (Triton's rule); True
    when it is shared memory.

    Zero-element inputs may carry none of them.
    """
    has_data = "data" in input_json
    has_shm = params is not None and "shared_memory_region" in params
    set_count = has_data + has_binary + has_shm
    if set_count == 1:
        return has_shm
    if set_count == 0 and count == 0:
        return False
    message = (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But"
    )
    if set_count == 0:
        message += " no field is set"
    else:
        message += " set"
        if has_data:
            message += " 'data'"
        if has_binary:
            message += " 'binary_data_size'"
        if has_shm:
            message += " 'shared_memory_region'"
    raise invalid_arg(f"{message} (input '{name}' for model '{model_name}')")


def _array_from_binary(
    body: bytes | memoryview,
    offset: int,
    size: int,
    datatype: str,
    dtype: np.dtype,
    shape: list[int],
    count: int,
    name: str,
    model_name: str,
) -> np.ndarray:
    """The tensor in ``body[offset:offset + size]``: a read-only view for fixed-size types."""
    if datatype == "BYTES":
        try:
            blob = memoryview(body)[offset : offset + size]
            return deserialize_bytes(blob, count).reshape(shape)
        except ValueError as exc:
            raise invalid_arg(
                f"unable to parse BYTES data for input '{name}' for model '{model_name}': {exc}"
            ) from None
    expected = count * dtype.itemsize
    if size != expected:
        raise invalid_arg(
            f"input byte size mismatch for input '{name}' for model '{model_name}'. "
            f"Expected {expected}, got {size}"
        )
    if not count:
        return _empty(shape, dtype, name, model_name)
    # np.ndarray over the body is one call, half the cost of frombuffer + reshape
    return np.ndarray(shape, dtype, body, offset)


def _empty(shape: list[int], dtype: np.dtype, name: str, model_name: str) -> np.ndarray:
    """A zero-element array; its other dimensions may still multiply past what numpy holds."""
    try:
        return np.empty(shape, dtype=dtype)
    except ValueError as exc:
        raise invalid_arg(
            f"Unable to parse 'shape' for input '{name}' for model '{model_name}': {exc}"
        ) from None


def _array_from_json(
    data: Any,
    datatype: str,
    dtype: np.dtype,
    shape: list[int],
    count: int,
    name: str,
    model_name: str,
) -> np.ndarray:
    """A shaped array from JSON ``data`` (nested or flat, row-major)."""
    if count == 0:
        # Triton ignores 'data' of a zero-element input
        return _empty(shape, dtype, name, model_name)
    if datatype in NO_JSON:
        raise invalid_arg(
            f"receiving {datatype} data via JSON is not supported. Please use the binary data "
            f"format for input '{name}' for model '{model_name}'"
        )
    if type(data) is not list:
        raise invalid_arg(
            f"Unable to parse 'data' for input '{name}' for model '{model_name}': expected a "
            "JSON array"
        )
    if datatype == "BYTES":
        items: list[bytes] = []
        try:
            _flatten_strings(data, items)
        except TypeError:
            raise invalid_arg(
                f"Unable to parse 'data' for input '{name}' for model '{model_name}': "
                "BYTES elements must be JSON strings"
            ) from None
        _check_count(len(items), count, shape, name, model_name)
        array = np.empty(count, dtype=object)
        array[:] = items
        return array.reshape(shape)

    try:
        array = np.array(data)
    except ValueError:
        # ragged nesting; Triton only counts elements, so flatten and retry
        flat: list[Any] = []
        _flatten(data, flat)
        array = np.array(flat)
    _check_count(array.size, count, shape, name, model_name)
    kinds = _JSON_KINDS[datatype]
    if array.dtype.kind not in kinds:
        exact = _exact_integers(data, datatype)
        if exact is None:
            expected = {
                "b": "true/false",
                "iu": "integer",
                "iuf": "number",
            }[kinds]
            raise invalid_arg(
                f"Unable to parse 'data' for input '{name}' for model '{model_name}': "
                f"expected {expected} values for datatype {datatype}"
            )
        return exact.reshape(shape)
    if datatype in _UNSIGNED and array.dtype.kind == "i" and array.min() < 0:
        raise invalid_arg(
            f"Unable to parse 'data' for input '{name}' for model '{model_name}': "
            f"negative value for datatype {datatype}"
        )
    return array.reshape(-1).astype(dtype, copy=False).reshape(shape)


def _exact_integers(data: list[Any], datatype: str) -> np.ndarray | None:
    """Integer data numpy could not type by itself (UINT64 values above 2**63 mixed with
    small ones infer to float64); None when the values are not all integers in range."""
    if datatype not in _UNSIGNED and not datatype.startswith("INT"):
        return None
    values: list[Any] = []
    _flatten(data, values)
    if not all(type(v) is int for v in values):
        return None
    try:
        return np.array(values, dtype=NUMPY_DTYPES[datatype])
    except OverflowError:
        return None


def _check_count(got: int, count: int, shape: list[int], name: str, model_name: str) -> None:
    if got != count:
        raise invalid_arg(
            f"Unable to parse 'data' for input '{name}' for model '{model_name}': Shape does "
            f"not match true shape of 'data' field (shape {shape} has {count} elements, "
            f"'data' has {got})"
        )


def _flatten(data: list[Any], out: list[Any]) -> None:
    for item in data:
        if type(item) is list:
            _flatten(item, out)
        else:
            out.append(item)


def _flatten_strings(data: list[Any], out: list[bytes]) -> None:
    for item in data:
        if type(item) is str:
            out.append(item.encode("utf-8"))
        elif type(item) is list:
            _flatten_strings(item, out)
        else:
            raise TypeError(item)


def _apply_parameters(request: InferenceRequest, parameters: Any, model_name: str) -> bool:
    """Apply request-level parameters; returns ``binary_data_output``."""
    if type(parameters) is not dict:
        raise invalid_arg(f"Unable to parse 'parameters' for model '{model_name}'")
    default_binary = parameters.get("binary_data_output", False)
    if type(default_binary) is not bool:
        raise invalid_arg(f"Unable to parse 'binary_data_output' for model '{model_name}'")
    for key, value in parameters.items():
        if not isinstance(value, bool | int | float | str):
            raise invalid_arg(
                f"parameter '{key}' has invalid type. It should be either 'int', 'bool', "
                "'double' or 'string'."
            )
    apply_request_parameters(request, parameters)
    return default_binary


def _decode_outputs(
    outputs_json: Any,
    binary_outputs: dict[str, bool],
    model_name: str,
    shm_outputs: dict[str, SharedMemoryRef],
) -> list[RequestedOutput] | None:
    if type(outputs_json) is not list:
        raise invalid_arg(f"Unable to parse 'outputs' for model '{model_name}'")
    requested: list[RequestedOutput] = []
    for output_json in outputs_json:
        if type(output_json) is not dict:
            raise invalid_arg(f"Unable to parse 'outputs' for model '{model_name}'")
        name = output_json.get("name")
        if type(name) is not str:
            raise invalid_arg(f"Unable to parse 'name' of an output for model '{model_name}'")
        binary = False
        classification = 0
        params = output_json.get("parameters")
        if params is not None:
            if type(params) is not dict:
                raise invalid_arg(
                    f"Unable to parse 'parameters' for output '{name}' for model '{model_name}'"
                )
            binary = params.get("binary_data", False)
            if type(binary) is not bool:
                raise invalid_arg(
                    f"Unable to parse 'binary_data' for output '{name}' for model '{model_name}'"
                )
            classification = params.get("classification", 0)
            if type(classification) is not int or classification < 0:
                raise invalid_arg(
                    f"Unable to set 'classification' for output '{name}' for model '{model_name}'"
                )
            if "shared_memory_region" in params:
                if classification:
                    raise invalid_arg(
                        "Output can't set both 'shared_memory_region' and 'classification'"
                    )
                if binary:
                    raise invalid_arg(
                        "Output can't set both 'shared_memory_region' and 'binary_data'"
                    )
                shm_outputs[name] = shm_ref(params, f"output '{name}' for model '{model_name}'")
        binary_outputs[name] = binary
        requested.append(RequestedOutput(name, classification))
    # an empty list asks for every output, like no list at all
    return requested or None


_UINT64_LIMIT: Final = 1 << 64


def shm_ref(params: dict[str, Any], what: str) -> SharedMemoryRef:
    """The ``shared_memory_*`` parameters of a tensor (``what`` names it), checked."""
    region = params["shared_memory_region"]
    if type(region) is not str:
        raise invalid_arg(f"Unable to parse 'shared_memory_region' for {what}")
    numbers = []
    for key in ("shared_memory_offset", "shared_memory_byte_size"):
        value = params.get(key, 0)
        if type(value) is not int or not 0 <= value < _UINT64_LIMIT:
            raise invalid_arg(f"Unable to parse '{key}' for {what}")
        numbers.append(value)
    return SharedMemoryRef(region, numbers[1], numbers[0])
