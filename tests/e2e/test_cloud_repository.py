"""An s3:// model repository served from a real S3-compatible server (moto, server mode)."""

from __future__ import annotations

import numpy as np
import pytest
import tritonclient.http as httpclient

from tests.support import S3Server, ServerProcess, write_numpy_model

pytest.importorskip("s3fs")
pytest.importorskip("moto")


def test_models_load_from_s3_and_local_copies_are_cleaned_up(tmp_path):
    s3 = S3Server()
    try:
        local = tmp_path / "src"
        write_numpy_model(local, "remote_add", kind="add_sub")
        write_numpy_model(local, "other", kind="add_sub", versions=(1, 2))
        s3.upload_tree("models", "repo", local)
        scratch = tmp_path / "scratch"
        scratch.mkdir()
        env = {
            **S3Server.CREDENTIALS,
            "TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend",
            "TMPDIR": str(scratch),
        }
        url = f"s3://127.0.0.1:{s3.port}/models/repo"
        with ServerProcess(
            [url], "--model-control-mode=explicit", "--load-model", "remote_add", env=env
        ) as process:
            process.wait_ready()
            client = httpclient.InferenceServerClient(process.http_url)
            data = np.full((1, 4), 2, dtype=np.int32)
            tensors = [httpclient.InferInput(n, [1, 4], "INT32") for n in ("INPUT0", "INPUT1")]
            for tensor in tensors:
                tensor.set_data_from_numpy(data)
            result = client.infer("remote_add", tensors)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 4))
            index = {e["name"]: e for e in client.get_model_repository_index()}
            assert index["other"] == {"name": "other"}
            client.load_model("other")
            assert client.get_model_metadata("other")["versions"] == ["2"]
            copies = list((scratch / "triton-core-repositories").glob("*/other"))
            assert len(copies) == 1
            client.unload_model("other")
            assert not copies[0].exists()
        assert process.process.returncode == 0
        assert not any((scratch / "triton-core-repositories").glob("*/*"))
    finally:
        s3.stop()
