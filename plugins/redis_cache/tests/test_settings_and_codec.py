"""The settings as Triton names them, and the entry codec against whatever Redis may hold."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from triton_core_redis_cache.codec import CorruptEntry, decode, encode
from triton_core_redis_cache.settings import parse_settings

from triton_core import InferenceResponse, Tensor

ADDRESS = {"host": "127.0.0.1", "port": "6379"}


def test_host_and_port_are_required_in_tritons_words():
    with pytest.raises(ValueError, match="Must at a minimum specify 'host' and 'port'"):
        parse_settings({"host": "redis"})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"hostname": "x"}, r"unknown setting\(s\) \['hostname'\]"),
        ({"port": "70000"}, r"redis,port must be in \[1, 65535\]"),
        ({"socket_timeout": "0"}, r"redis,socket_timeout must be in \[1, 60000\]"),
        ({"connect_timeout": "soon"}, "redis,connect_timeout must be an integer"),
        ({"pool_size": "0"}, r"redis,pool_size must be in \[1, 1024\]"),
        ({"tls_enabled": "yes"}, "redis,tls_enabled must be 'true' or 'false'"),
        ({"cacert": "/ca.pem"}, "redis,cacert needs redis,tls_enabled=true"),
        ({"tls_enabled": "true", "cacert": "/no/ca.pem"}, "no such file '/no/ca.pem'"),
        ({"max_entry_bytes": "10"}, "redis,max_entry_bytes must be in"),
    ],
)
def test_a_wrong_setting_is_refused_by_name(settings, message):
    with pytest.raises(ValueError, match=message):
        parse_settings({**ADDRESS, **settings})


def test_credentials_come_from_tritons_environment_variables(monkeypatch):
    monkeypatch.setenv("TRITONCACHE_REDIS_USERNAME", "env-user")
    monkeypatch.setenv("TRITONCACHE_REDIS_PASSWORD", "env-pass")
    parsed = parse_settings(ADDRESS)
    assert (parsed.user, parsed.password) == ("env-user", "env-pass")
    parsed = parse_settings({**ADDRESS, "user": "u", "password": "p"})
    assert (parsed.user, parsed.password) == ("u", "p")


def test_defaults_are_bounded():
    parsed = parse_settings(ADDRESS)
    assert (parsed.connect_timeout, parsed.socket_timeout, parsed.wait_timeout) == (1000, 200, 200)
    assert (parsed.db, parsed.ttl, parsed.key_prefix) == (0, 0, "triton-core:")


def response() -> InferenceResponse:
    return InferenceResponse(
        outputs=[
            Tensor("F", "FP32", np.arange(6, dtype=np.float32).reshape(2, 3)),
            Tensor("S", "BYTES", np.array([[b"a", b""], [b"\x00bc", b"d"]], dtype=object)),
            Tensor("B", "BOOL", np.array([True, False])),
            Tensor("H", "FP16", np.ones((0, 4), np.float16)),
            Tensor("T", "INT64", np.arange(4, dtype=np.int64)[::2]),  # not contiguous
        ],
        parameters={"flag": True, "n": 3, "x": 0.5, "s": "t"},
        model_name="m",
        model_version=4,
        id="not kept",
    )


def test_a_response_comes_back_as_it_went_in():
    original = response()
    copy = decode(encode(original))
    assert (copy.model_name, copy.model_version, copy.parameters, copy.id) == (
        "m", 4, original.parameters, "",
    )  # fmt: skip
    for sent, got in zip(original.outputs, copy.outputs, strict=True):
        assert (got.name, got.datatype, got.data.shape) == (sent.name, sent.datatype, sent.shape)
        np.testing.assert_array_equal(got.data, sent.data)


@pytest.mark.parametrize(
    "mangle",
    [
        lambda v: v[:3],
        lambda v: b"XXXX" + v[4:],
        lambda v: v[:4] + b"\x09" + v[5:],
        lambda v: v[:-1],
        lambda v: v + b"\x00",
        lambda v: v.replace(b'"FP32"', b'"FP99"'),
        lambda v: v.replace(b"[2,3]", b"[9,3]"),
        lambda v: v.replace(b"[2,3]", b"[-2,3]"),
        lambda v: v.replace(b'"model_version":4', b'"model_version":"4"'),
        lambda v: v.replace(b'"n":3', b'"n":[3]'),
        lambda v: v[:5] + b"\xff\xff\xff\x7f" + v[9:],
    ],
)
def test_a_mangled_entry_is_refused(mangle):
    with pytest.raises(CorruptEntry):
        decode(mangle(encode(response())))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 300))
def test_any_bytes_decode_or_are_refused_as_corrupt(noise, position):
    valid = encode(response())
    for value in (noise, valid[:position] + noise + valid[position + len(noise) :]):
        with contextlib.suppress(CorruptEntry):
            decode(value)
