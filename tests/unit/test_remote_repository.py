"""Cloud repositories against a real S3-compatible server (moto in server mode)."""

from __future__ import annotations

import pytest

from tests.support import S3Server, numpy_server, write_numpy_model
from triton_core.errors import TritonError
from triton_core.repository.remote import (
    RemoteRepository,
    check_relative_key,
    is_remote,
    parse_location,
)

pytest.importorskip("s3fs")
pytest.importorskip("moto")


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    monkeypatch = pytest.MonkeyPatch()
    for key, value in S3Server.CREDENTIALS.items():
        monkeypatch.setenv(key, value)
    server = S3Server()
    local = tmp_path_factory.mktemp("s3src")
    write_numpy_model(local, "alpha")
    write_numpy_model(local, "beta", versions=(1, 2))
    server.upload_tree("models", "repo", local)
    yield server
    server.stop()
    monkeypatch.undo()


def test_url_forms():
    assert parse_location("s3://bucket/a/b").options == {}
    endpoint = parse_location("s3://127.0.0.1:9000/bucket/a")
    assert endpoint.options == {"endpoint_url": "http://127.0.0.1:9000"}
    assert endpoint.root == "bucket/a"
    secure = parse_location("s3://https://host:443/bucket/a")
    assert secure.options == {"endpoint_url": "https://host:443"} and secure.root == "bucket/a"
    azure = parse_location("as://account/container/path")
    assert azure.protocol == "abfs" and azure.options == {"account_name": "account"}
    assert parse_location("gs://bucket/p").protocol == "gcs"
    assert is_remote("s3://x") and not is_remote("/models")


@pytest.mark.parametrize("key", ["../x", "/etc/passwd", "1/../../x", "a\\b", "x" * 256])
def test_keys_that_leave_the_model_folder_are_refused(key):
    with pytest.raises(TritonError):
        check_relative_key(key, "model 'm'")


def test_list_fetch_and_clean_up(s3, tmp_path):
    url = f"s3://127.0.0.1:{s3.port}/models/repo"
    repository = RemoteRepository(url, tmp_path / "cache")
    assert repository.list_models() == ["alpha", "beta"]
    local = repository.fetch_model("beta")
    assert (local / "config.pbtxt").is_file()
    assert (local / "2" / "model.npy").is_file()
    assert local.is_relative_to(tmp_path / "cache")
    before = repository.fingerprint("beta")
    s3.client().put_object(Bucket="models", Key="repo/beta/3/model.npy", Body=b"")
    assert repository.fingerprint("beta") != before
    repository.remove_model("beta")
    assert not local.exists()
    repository.fetch_model("alpha")
    repository.close()
    assert not repository.local_root.exists()


def test_missing_repository_is_reported(s3, tmp_path):
    repository = RemoteRepository(f"s3://127.0.0.1:{s3.port}/nobucket/x", tmp_path)
    with pytest.raises(TritonError, match="nobucket"):
        repository.list_models()


async def test_a_model_from_a_cloud_repository_has_no_version_folder(s3, tmp_path):
    url = f"s3://127.0.0.1:{s3.port}/models/repo"
    async with numpy_server(url, repository_cache_dir=tmp_path) as server:
        assert server.model_ready("alpha")
        assert server.model_version_path("alpha") is None
