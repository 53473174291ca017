"""The response cache through the real server: hits skip execution, and show in stats/metrics."""

from __future__ import annotations

import re
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

from tests.support import ServerProcess, write_numpy_model

NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}


def inputs(value: int, module=httpclient):
    data = np.full((1, 4), value, dtype=np.int32)
    tensors = [module.InferInput(n, [1, 4], "INT32") for n in ("INPUT0", "INPUT1")]
    for tensor in tensors:
        tensor.set_data_from_numpy(data)
    return tensors


def test_repeated_requests_are_answered_from_the_cache(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "cached", kind="add_sub", extra="response_cache { enable: true }")
    with ServerProcess([repo], "--cache-config", "local,size=1048576", env=NUMPY_PLUGIN) as process:
        process.wait_ready()
        http = httpclient.InferenceServerClient(process.http_url)
        grpc = grpcclient.InferenceServerClient(process.grpc_url)
        for _ in range(3):
            result = http.infer("cached", inputs(5))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 10))
        result = grpc.infer("cached", inputs(5, grpcclient), request_id="via-grpc")
        assert result.get_response().id == "via-grpc"
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 4)))
        http.infer("cached", inputs(6))

        stats = http.get_inference_statistics("cached")["model_stats"][0]
        inference = stats["inference_stats"]
        assert inference["cache_hit"]["count"] == 3 and inference["cache_miss"]["count"] == 2
        assert stats["execution_count"] == 2 and inference["success"]["count"] == 5
        config = http.get_model_config("cached")
        assert config["response_cache"] == {"enable": True}

        with urllib.request.urlopen(process.metrics_url, timeout=10) as reply:
            text = reply.read().decode()
        assert re.search(r'^nv_cache_num_hits_per_model\{model="cached",version="1"\} 3$',
                         text, re.M)  # fmt: skip
        assert re.search(r"^nv_cache_num_hits 3$", text, re.M)
        assert re.search(r"^nv_cache_num_entries 2$", text, re.M)
        util = float(re.search(r"^nv_cache_util (\S+)$", text, re.M).group(1))
        assert 0 < util < 1
