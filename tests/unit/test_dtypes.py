from __future__ import annotations

import numpy as np
import pytest

from triton_core.tensors import dtypes


def test_bytes_round_trip_keeps_embedded_nul_and_empty_elements():
    values = np.array([b"a\x00b", b"", "é".encode(), b"\x00"], dtype=object)
    encoded = dtypes.serialize_bytes(values)
    decoded = dtypes.deserialize_bytes(encoded, 4)
    assert list(decoded) == list(values)


@pytest.mark.parametrize(
    ("buffer", "message"),
    [
        (b"\x05\x00\x00\x00abc", "declares 5 bytes but only 3 remain"),
        (b"\x01\x00\x00\x00a\x01\x00", "truncated length prefix"),
    ],
)
def test_broken_bytes_prefixes_are_reported(buffer, message):
    with pytest.raises(ValueError, match=message):
        dtypes.deserialize_bytes(buffer)


def test_bytes_element_count_is_checked():
    with pytest.raises(ValueError, match="holds 1 elements, expected 2"):
        dtypes.deserialize_bytes(b"\x01\x00\x00\x00a", 2)


@pytest.mark.parametrize("datatype", [d for d in dtypes.NUMPY_DTYPES if d != "BYTES"])
def test_fixed_size_round_trip_is_a_view(datatype):
    array = np.arange(6).astype(dtypes.NUMPY_DTYPES[datatype]).reshape(2, 3)
    raw = dtypes.to_bytes(array, datatype)
    back = dtypes.from_bytes(raw, datatype, (2, 3))
    assert back.shape == (2, 3)
    np.testing.assert_array_equal(back, array)
    assert not back.flags.owndata


def test_size_mismatch_is_reported():
    with pytest.raises(ValueError, match="expected 16 bytes, got 12"):
        dtypes.from_bytes(b"\x00" * 12, "FP32", (2, 2))


def test_config_and_wire_names_map_both_ways():
    assert dtypes.CONFIG_TO_WIRE["TYPE_STRING"] == "BYTES"
    assert dtypes.WIRE_TO_CONFIG["BF16"] == "TYPE_BF16"
    assert len(dtypes.CONFIG_TO_WIRE) == 14
