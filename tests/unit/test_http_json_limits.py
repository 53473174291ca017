"""Caps on the JSON of an infer request: elements, depth, inputs checked before values."""

from __future__ import annotations

import orjson
import pytest

from tests.unit.test_http_codec import error_of, request_json
from triton_core.errors import Status
from triton_core.frontends.http.codec import (
    JsonLimits,
    check_json_depth,
    check_json_elements,
    decode_request,
    parse_json,
)

SMALL = JsonLimits(max_elements=64, max_depth=6)


def fp32_input(name: str, values: list, shape: list[int] | None = None) -> dict:
    shape = [len(values)] if shape is None else shape
    return {"name": name, "datatype": "FP32", "shape": shape, "data": values}


def test_element_count_is_refused_before_parsing_and_names_the_flag() -> None:
    body = request_json([fp32_input("X", [1.0] * 100)])
    error = error_of(decode_request, "m", -1, body, None, SMALL)
    assert error.status is Status.INVALID_ARG
    assert "more than the limit of 64 (--http-max-json-elements)" in error.message
    fits = request_json([fp32_input("X", [1.0] * 40)])
    assert decode_request("m", -1, fits, None, SMALL).request.inputs["X"].data.size == 40


def test_element_count_is_refused_even_for_a_json_that_does_not_parse() -> None:
    """Counting needs no parse: a huge broken JSON costs a scan, not an allocation."""
    error = error_of(check_json_elements, b"[" + b"1," * 100, SMALL)
    assert "--http-max-json-elements" in error.message


def test_a_cached_header_is_held_to_the_element_count_too() -> None:
    binary = {"name": "X", "datatype": "FP32", "shape": [1], "parameters": {"binary_data_size": 4}}
    body = orjson.dumps({"inputs": [binary]})
    decode_request("m", -1, body + b"\0" * 4, len(body))  # now cached
    tiny = JsonLimits(max_elements=3, max_depth=6)
    error = error_of(decode_request, "m", -1, body + b"\0" * 4, len(body), tiny)
    assert "--http-max-json-elements" in error.message


@pytest.mark.parametrize("depth", [40, 1000, 5000])
def test_deep_data_is_a_400_naming_the_limit_never_a_500(depth: int) -> None:
    head = b'{"inputs":[{"name":"X","datatype":"FP32","shape":[1],"data":'
    body = head + b"[" * depth + b"1" + b"]" * depth + b"}]}"
    error = error_of(decode_request, "m", -1, body, None, JsonLimits(1 << 20, 32))
    assert error.status is Status.INVALID_ARG
    # deeper than orjson's own limit (1024), the parser refuses it first
    assert "--http-max-json-depth" in error.message or "depth limit exceeded" in error.message


def test_depth_at_the_limit_is_accepted() -> None:
    # {"inputs": [{"data": [[[1]]]}]}: the object, inputs, the input, 3 levels of data
    body = request_json([fp32_input("X", [[[1.0]]], [1, 1, 1])])
    limits = JsonLimits(max_elements=1 << 20, max_depth=6)
    assert decode_request("m", -1, body, None, limits).request.inputs["X"].data.shape == (1, 1, 1)
    deeper = request_json([fp32_input("X", [[[[1.0]]]], [1, 1, 1, 1])])
    assert (
        "--http-max-json-depth" in error_of(decode_request, "m", -1, deeper, None, limits).message
    )


def test_depth_counts_objects_and_arrays_anywhere_in_the_document() -> None:
    doc = {"inputs": [], "junk": {"a": [{"b": [{"c": [1]}]}]}}
    text = orjson.dumps(doc)
    assert "--http-max-json-depth" in error_of(check_json_depth, doc, text, SMALL).message
    assert "--http-max-json-depth" in error_of(parse_json, text, SMALL, "body").message
    check_json_depth(doc, text, JsonLimits(max_depth=7))


def test_more_inputs_than_the_model_has_are_refused_before_values_are_decoded() -> None:
    # the last input's data would fail to decode: the count is checked first
    inputs = [fp32_input(f"INPUT{i}", [1.0]) for i in range(9)]
    inputs.append(fp32_input("INPUT9", ["not a number"]))
    asked = []

    def model_inputs() -> list[str]:
        asked.append(True)
        return ["INPUT0", "INPUT1"]

    body = request_json(inputs)
    error = error_of(decode_request, "m", -1, body, None, SMALL._replace(max_elements=1000),
                     model_inputs)  # fmt: skip
    assert error.message == "expected at most 2 inputs but got 10 inputs for model 'm'"
    assert asked == [True]


def test_an_unknown_input_of_a_large_request_is_refused_before_values_are_decoded() -> None:
    values = [1.0] * 2000  # a header over 4 KiB
    body = request_json([fp32_input("INPUT0", values), fp32_input("NOPE", ["x"])])
    error = error_of(decode_request, "m", -1, body, None, JsonLimits(), lambda: ["INPUT0", "B"])
    assert error.message == (
        "unexpected inference input 'NOPE' for model 'm', allowed inputs are: INPUT0, B"
    )


def test_small_requests_do_not_ask_for_the_model() -> None:
    def never() -> list[str]:
        raise AssertionError("asked")

    body = request_json([fp32_input("A", [1.0]), fp32_input("B", [2.0])])
    assert set(decode_request("m", -1, body, None, JsonLimits(), never).request.inputs) == {
        "A",
        "B",
    }


def test_generate_requests_are_held_to_the_same_limits() -> None:
    from tests.unit.test_http_generate import LLM
    from triton_core.frontends.http.generate import decode_generate_request

    deep = b'{"text_input": "hi", "junk": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    error = error_of(decode_generate_request, "llm", -1, deep, LLM)
    assert error.status is Status.INVALID_ARG  # was a RecursionError: a 500
    nested = b'{"text_input": "hi", "junk": ' + b"[" * 40 + b"]" * 40 + b"}"
    assert (
        "--http-max-json-depth" in error_of(decode_generate_request, "llm", -1, nested, LLM).message
    )
    many = b'{"text_input": "hi", "junk": [' + b"1," * 100 + b"1]}"
    error = error_of(decode_generate_request, "llm", -1, many, LLM, SMALL)
    assert "--http-max-json-elements" in error.message
    fits = decode_generate_request("llm", -1, b'{"text_input": "hi", "max_tokens": 3}', LLM, SMALL)
    assert set(fits.inputs) == {"text_input", "max_tokens"}


def binary_bytes_request(shape: list[int], blob: bytes) -> tuple[bytes, int]:
    binary = {"name": "X", "datatype": "BYTES", "shape": shape,
              "parameters": {"binary_data_size": len(blob)}}  # fmt: skip
    header = orjson.dumps({"inputs": [binary]})
    return header + blob, len(header)


def test_binary_bytes_elements_are_held_to_the_element_cap() -> None:
    """Each BYTES element becomes an object, as a JSON value does: the same cap holds."""
    body, length = binary_bytes_request([100], b"\0\0\0\0" * 100)
    error = error_of(decode_request, "m", -1, body, length, SMALL)
    assert "has 100 BYTES elements, more than the limit of 64 (--http-max-json-elements)" in (
        error.message
    )
    body, length = binary_bytes_request([64], b"\1\0\0\0a" * 64)
    assert decode_request("m", -1, body, length, SMALL).request.inputs["X"].data.shape == (64,)


def test_more_bytes_elements_than_the_shape_says_are_not_all_decoded() -> None:
    import tracemalloc

    body, length = binary_bytes_request([1], b"\0\0\0\0" * 1_000_000)  # a million, not one
    tracemalloc.start()
    try:
        error = error_of(decode_request, "m", -1, body, length)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "holds more than 1 elements, expected 1" in error.message
    assert peak < 1 << 20  # not a list of a million elements (8 MB of pointers alone)
