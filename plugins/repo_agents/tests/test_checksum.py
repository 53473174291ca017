"""The checksum agent on its own, through the public agent contract."""

from __future__ import annotations

import hashlib
import os

import pytest
from triton_core_repo_agents.checksum import ChecksumAgent

from triton_core.errors import Status, TritonError
from triton_core.protos.model_config_pb2 import ModelConfig
from triton_core.repository.agents import AgentAction, AgentModel


@pytest.fixture
def model(tmp_path):
    folder = tmp_path / "m"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.onnx").write_bytes(b"weights")
    return folder


def run(folder, parameters, action=AgentAction.LOAD):
    return ChecksumAgent().act(action, AgentModel("m", folder, ModelConfig(), parameters))


def test_matching_digests_pass(model):
    md5 = hashlib.md5(b"weights").hexdigest()
    sha = hashlib.sha256(b"weights").hexdigest()
    assert run(model, {"MD5:1/model.onnx": md5, "sha256:1/model.onnx": sha.upper()}) is None


def test_mismatch_names_file_and_both_digests(model):
    with pytest.raises(TritonError) as info:
        run(model, {"MD5:1/model.onnx": "0" * 32})
    got = hashlib.md5(b"weights").hexdigest()
    assert info.value.status is Status.INVALID_ARG
    assert info.value.message == (
        f"Mismatched MD5 hash for file 1/model.onnx, expect: {'0' * 32}, got: {got}"
    )


@pytest.mark.parametrize(
    ("key", "status", "message"),
    [
        ("nocolon", Status.INVALID_ARG, "failed to parse key: nocolon"),
        ("CRC32:1/model.onnx", Status.UNSUPPORTED, "unsupported hash algorithm 'CRC32'"),
        ("MD5:../../etc/passwd", Status.INVALID_ARG, "outside the model folder"),
        ("MD5:/etc/passwd", Status.INVALID_ARG, "outside the model folder"),
        ("MD5:1/missing.onnx", Status.INVALID_ARG, "cannot read file '1/missing.onnx'"),
    ],
)
def test_bad_parameters(model, key, status, message):
    with pytest.raises(TritonError) as info:
        run(model, {key: "00"})
    assert info.value.status is status and message in info.value.message


def test_symlink_out_of_the_model_is_refused(model, tmp_path):
    (tmp_path / "secret").write_bytes(b"x")
    os.symlink(tmp_path / "secret", model / "1" / "link")
    with pytest.raises(TritonError, match="outside the model folder"):
        run(model, {"MD5:1/link": hashlib.md5(b"x").hexdigest()})


def test_other_actions_do_nothing(model):
    assert run(model, {"MD5:1/model.onnx": "bad"}, AgentAction.UNLOAD) is None
