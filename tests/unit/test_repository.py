from __future__ import annotations

import os

import pytest

from tests.support import write_numpy_model
from triton_core.errors import TritonError
from triton_core.protos.model_config_pb2 import ModelVersionPolicy
from triton_core.repository.layout import select_versions, version_folders


def policy(text: str) -> ModelVersionPolicy:
    from google.protobuf import text_format

    return text_format.Parse(text, ModelVersionPolicy())


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", [3]),
        ("latest { num_versions: 2 }", [2, 3]),
        ("all {}", [1, 2, 3]),
        ("specific { versions: [1, 3] }", [1, 3]),
    ],
)
def test_version_policies(text, expected):
    assert select_versions(policy(text), [3, 1, 2], "m") == expected


def test_specific_version_that_does_not_exist_is_an_error():
    with pytest.raises(TritonError, match=r"version\(s\) \[7\]"):
        select_versions(policy("specific { versions: [7] }"), [1], "m")


def test_version_folders_ignore_non_numeric_and_leading_zero(tmp_path):
    model = tmp_path / "m"
    for name in ("1", "2", "01", "latest", "0"):
        (model / name).mkdir(parents=True)
    assert sorted(version_folders(model, tmp_path)) == [1, 2]


def test_version_symlink_out_of_the_repository_is_refused(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    repo = tmp_path / "repo"
    (repo / "m").mkdir(parents=True)
    os.symlink(outside, repo / "m" / "1")
    with pytest.raises(TritonError, match="resolves outside the model repository"):
        version_folders(repo / "m", repo)


def test_model_symlink_out_of_the_repository_fails_only_that_model(tmp_path):
    from tests.support import numpy_server

    repo = tmp_path / "repo"
    write_numpy_model(repo, "good")
    elsewhere = write_numpy_model(tmp_path / "elsewhere", "evil")
    os.symlink(elsewhere, repo / "evil")
    import asyncio

    async def run():
        server = numpy_server(repo, exit_on_error=False)
        await server.start()
        try:
            index = {entry.name: entry for entry in server.repository_index()}
            assert index["good"].state == "READY"
            assert index["evil"].state == "UNAVAILABLE"
            assert "outside the model repository" in index["evil"].reason
        finally:
            await server.stop()

    asyncio.run(run())


def test_a_load_failure_names_its_model_once():
    from triton_core.repository.records import LoadFailure

    for detail in ("model 'm' uses backend 'x'", "model 'm': uses backend 'x'"):
        assert LoadFailure("m", detail).message == "load failed for model 'm': uses backend 'x'\n"
    # another model's name, or the name inside the message, stays
    assert LoadFailure("m", "model 'n' is missing").message == (
        "load failed for model 'm': model 'n' is missing\n"
    )
