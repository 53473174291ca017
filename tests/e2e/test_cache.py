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


def write_ensemble(repo, name: str, member: str, extra: str = "") -> None:
    """An ensemble that passes INPUT0/1 through ``member`` (the numpy add_sub model)."""
    tensors = "\n".join(
        f'{kind} [{{ name: "{prefix}{i}" data_type: TYPE_INT32 dims: [ 4 ] }}]'
        for kind, prefix in (("input", "INPUT"), ("output", "OUTPUT"))
        for i in range(2)
    )
    maps = " ".join(
        f'{kind}_map {{ key: "{prefix}{i}" value: "{prefix}{i}" }}'
        for kind, prefix in (("input", "INPUT"), ("output", "OUTPUT"))
        for i in range(2)
    )
    (repo / name / "1").mkdir(parents=True)
    (repo / name / "config.pbtxt").write_text(
        f'platform: "ensemble"\nmax_batch_size: 8\n{tensors}\n'
        f'ensemble_scheduling {{ step [{{ model_name: "{member}" model_version: -1 {maps} }}] }}\n'
        f"{extra}\n"
    )


def test_an_ensemble_caches_its_final_response_at_the_top_level(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(repo, "member", kind="add_sub")  # no cache of its own
    write_ensemble(repo, "pipeline", "member", "response_cache { enable: true }")
    write_numpy_model(repo, "stateful", kind="add_sub", extra="sequence_batching { }")
    write_ensemble(repo, "bad_cached", "stateful", "response_cache { enable: true }")
    args = ("--cache-config", "local,size=1048576", "--exit-on-error=false")
    with ServerProcess([repo], *args, env=NUMPY_PLUGIN) as process:
        process.wait_ready(path="/v2/health/live")
        http = httpclient.InferenceServerClient(process.http_url)
        grpc = grpcclient.InferenceServerClient(process.grpc_url)
        for _ in range(3):
            result = http.infer("pipeline", inputs(2))
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), np.full((1, 4), 4))
        result = grpc.infer("pipeline", inputs(2, grpcclient), request_id="hit")
        assert result.get_response().id == "hit" and result.get_response().model_name == "pipeline"
        np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), np.zeros((1, 4)))
        http.infer("pipeline", inputs(3))

        stats = http.get_inference_statistics("pipeline")["model_stats"][0]["inference_stats"]
        assert stats["cache_hit"]["count"] == 3 and stats["cache_miss"]["count"] == 2
        assert stats["success"]["count"] == 5
        # a hit never reaches the composing model
        member = http.get_inference_statistics("member")["model_stats"][0]
        assert member["execution_count"] == 2 and member["inference_stats"]["success"]["count"] == 2

        with urllib.request.urlopen(process.metrics_url, timeout=10) as reply:
            text = reply.read().decode()
        assert re.search(r"^nv_cache_num_hits 3$", text, re.M)
        assert re.search(r'^nv_cache_num_hits_per_model\{model="pipeline",version="1"\} 3$',
                         text, re.M)  # fmt: skip

        assert not http.is_model_ready("bad_cached")
        assert (
            "ensemble 'bad_cached' enables 'response_cache', but step 0 (model 'stateful') uses "
            "'sequence_batching'" in process.log()
        )
