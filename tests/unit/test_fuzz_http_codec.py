"""Property-based fuzzing of the HTTP infer codec: hostile bodies are a 400, never a crash.

Whatever a client sends as the JSON header, the binary data after it and the
``Inference-Header-Content-Length`` value, decoding either succeeds or raises a
:class:`TritonError` (which the frontend answers 400), and it never allocates much more than
the body it was given.
"""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import orjson
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tests.unit.test_http_app import StubServer
from triton_core.errors import TritonError
from triton_core.frontends.http.codec import JsonLimits
from triton_core.frontends.http.decoding import decode_infer_body

FUZZ = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
LIMITS = JsonLimits(max_elements=4096, max_depth=16)
#: what decoding may hold beyond the body: parsed JSON costs tens of bytes per body byte
ALLOWED_BYTES_PER_BODY_BYTE = 200
ALLOWED_FIXED_BYTES = 1 << 20

DATATYPES = [
    "BOOL", "UINT8", "UINT16", "UINT32", "UINT64", "INT8", "INT16", "INT32", "INT64",
    "FP16", "FP32", "FP64", "BF16", "BYTES",
]  # fmt: skip

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=6), st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=40,
)
dims = st.one_of(
    st.integers(min_value=-2, max_value=8),
    st.sampled_from([2**31, 2**40, 2**63, 2**64 + 1]),
    json_scalars,
)
shapes = st.one_of(
    st.lists(dims, max_size=5),
    st.lists(st.sampled_from([0, 1]), min_size=60, max_size=120),  # many dimensions
    json_values,
)
datas = st.one_of(
    json_values,
    st.lists(st.one_of(st.floats(allow_nan=False), st.integers(-300, 300)), max_size=16),
    st.lists(st.lists(st.integers(-2, 2), max_size=4), max_size=4),
    st.lists(st.text(max_size=4), max_size=8),
)
input_parameters = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "binary_data_size": st.one_of(
                st.integers(min_value=-4, max_value=64), st.just(2**62), json_scalars
            ),
            "shared_memory_region": st.text(max_size=4),
            "shared_memory_byte_size": st.integers(0, 64),
        },
    ),
    json_values,
)
inputs = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["INPUT0", "X", ""]), json_scalars),
        "datatype": st.one_of(st.sampled_from(DATATYPES), json_scalars),
        "shape": shapes,
        "data": datas,
        "parameters": input_parameters,
    },
)
outputs = st.fixed_dictionaries(
    {},
    optional={
        "name": st.one_of(st.sampled_from(["OUTPUT0", "Y"]), json_scalars),
        "parameters": st.one_of(
            json_values,
            st.fixed_dictionaries(
                {},
                optional={
                    "binary_data": json_scalars,
                    "classification": st.one_of(st.integers(-2, 5), json_scalars),
                    "shared_memory_region": st.text(max_size=4),
                },
            ),
        ),
    },
)
documents = st.one_of(
    st.fixed_dictionaries(
        {"inputs": st.one_of(st.lists(inputs, max_size=4), json_values)},
        optional={
            "id": json_scalars,
            "outputs": st.one_of(st.lists(outputs, max_size=3), json_values),
            "parameters": st.one_of(
                json_values,
                st.dictionaries(
                    st.sampled_from(
                        ["binary_data_output", "priority", "timeout", "sequence_id", "x"]
                    ),
                    json_scalars,
                    max_size=3,
                ),
            ),
        },
    ),
    json_values,
)
header_lengths = st.one_of(
    st.none(),
    st.just("exact"),
    st.integers(min_value=-3, max_value=4096).map(str),
    st.text(max_size=6),
    st.sampled_from(["0", " 1", "1_0", "+2", "9" * 5000]),
)


def decode_within_bounds(body: bytes, header_length: str | None) -> None:
    """Decode ``body``: success or a TritonError, and a bounded allocation."""
    server = StubServer()
    tracemalloc.start()
    try:
        decode_infer_body(server, "simple", -1, body, header_length, LIMITS)  # type: ignore[arg-type]
    except TritonError:
        pass
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    assert peak <= ALLOWED_FIXED_BYTES + ALLOWED_BYTES_PER_BODY_BYTE * len(body), peak


@FUZZ
@given(document=documents, tail=st.binary(max_size=96), header_length=header_lengths)
@example(  # regression: more dimensions than numpy arrays have were a ValueError (500)
    document={"inputs": [{"name": "X", "datatype": "FP32", "shape": [1] * 100, "data": [1.0]}]},
    tail=b"",
    header_length=None,
)
@example(
    document={"inputs": [{"name": "X", "datatype": "FP32", "shape": [0] * 70, "data": []}]},
    tail=b"",
    header_length=None,
)
@example(
    document={
        "inputs": [
            {
                "name": "X",
                "datatype": "BYTES",
                "shape": [1] * 65,
                "parameters": {"binary_data_size": 5},
            }
        ]
    },
    tail=b"\x01\0\0\0a",
    header_length="exact",
)
@example(  # regression: zero elements, yet too big for numpy (ValueError, a 500)
    document={"inputs": [{"name": "X", "datatype": "FP32", "shape": [0, 2**40, 2**40]}]},
    tail=b"",
    header_length=None,
)
def test_any_json_header_and_binary_tail(
    document: Any, tail: bytes, header_length: str | None
) -> None:
    header = json.dumps(document).encode()
    if header_length == "exact":
        header_length = str(len(header))
    decode_within_bounds(header + tail, header_length)


@FUZZ
@given(body=st.binary(max_size=512), header_length=header_lengths)
def test_any_bytes(body: bytes, header_length: str | None) -> None:
    if header_length == "exact":
        header_length = str(len(body))
    decode_within_bounds(body, header_length)


@FUZZ
@given(
    datatype=st.sampled_from(DATATYPES),
    shape=st.lists(st.integers(min_value=0, max_value=2**33), max_size=4),
    blob=st.binary(max_size=128),
)
@example(datatype="BOOL", shape=[0, 3_036_988_439, 3_037_012_561], blob=b"")  # regression:
# zero elements, but numpy refused the shape (ValueError, a 500)
def test_binary_layouts_that_claim_more_than_they_carry(
    datatype: str, shape: list[int], blob: bytes
) -> None:
    document = {
        "inputs": [
            {
                "name": "INPUT0",
                "datatype": datatype,
                "shape": shape,
                "parameters": {"binary_data_size": len(blob)},
            }
        ]
    }
    header = orjson.dumps(document)
    decode_within_bounds(header + blob, str(len(header)))


@FUZZ
@given(
    prefix=st.sampled_from([b"[", b"{", b'{"inputs":[', b'{"inputs":[{"data":']),
    depth=st.integers(min_value=1, max_value=1200),
    count=st.integers(min_value=0, max_value=6000),
)
def test_nesting_and_element_counts_around_the_limits(
    prefix: bytes, depth: int, count: int
) -> None:
    nested = b"[" * depth + b",".join([b"1"] * min(count, 6000)) + b"]" * depth
    decode_within_bounds(prefix + nested, None)
