"""``--rate-limit execution_count`` on a real server: two Python models whose instances need
the one global resource never execute at once, nor do two instances warming up; a model
needing more than ``--rate-limit-resource`` allows fails to load with Triton's message; with
the limiter off, the same models do run at once (so the first test could fail)."""

from __future__ import annotations

import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess

pytest.importorskip("triton_core_python")

#: an execution fails when another instance's marker shows up while it runs
MODEL = """
import json
import os
import time

import triton_python_backend_utils as pb_utils

WINDOW_SECONDS = 0.5


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.folder = config["parameters"]["marker_dir"]["string_value"]
        self.name = args["model_name"] + "." + args["model_instance_name"]

    def execute(self, requests):
        mine = os.path.join(self.folder, self.name)
        open(mine, "w").close()
        others = []
        deadline = time.monotonic() + WINDOW_SECONDS
        while time.monotonic() < deadline and not others:
            others = [n for n in os.listdir(self.folder) if n != self.name]
            time.sleep(0.01)
        os.remove(mine)
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            error = pb_utils.TritonError(f"ran at once with {others}") if others else None
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x)], error=error))
        return responses
"""


WARMUP = """
model_warmup [ { name: "zeros" batch_size: 1
  inputs { key: "X" value { data_type: TYPE_FP32 dims: [ 2 ] zero_data: true } } } ]
"""


def _config(markers: Path, resources: str, count: int = 1, extra: str = "") -> str:
    return f"""
backend: "python"
max_batch_size: 4
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "Y" data_type: TYPE_FP32 dims: [ 2 ] }} ]
instance_group [ {{ kind: KIND_CPU count: {count}
                    rate_limiter {{ resources [ {resources} ] }} }} ]
parameters {{ key: "marker_dir" value {{ string_value: "{markers}" }} }}
{extra}
"""


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("rate_limited")
    markers = root / "markers"
    markers.mkdir()
    shared = '{ name: "R" global: true count: 1 }'
    for name, config in (
        ("rl_a", _config(markers, shared)),
        ("rl_b", _config(markers, shared)),
        ("rl_big", _config(markers, shared + ', { name: "G" global: true count: 3 }')),
        # two instances that warm up at once unless the limiter takes them in turn
        ("rl_warm", _config(markers, shared, count=2, extra=WARMUP)),
    ):
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(textwrap.dedent(MODEL))
        (root / name / "config.pbtxt").write_text(config)
    return root


def _concurrent_results(url: str) -> list[str]:
    """Three requests to each model at once; the error of each, or "" for success."""

    def call(model: str) -> str:
        client = httpclient.InferenceServerClient(url, network_timeout=60)
        tensor = httpclient.InferInput("X", [1, 2], "FP32")
        tensor.set_data_from_numpy(np.ones((1, 2), np.float32))
        try:
            client.infer(model, [tensor])
        except InferenceServerException as error:
            return error.message()
        return ""

    with ThreadPoolExecutor(6) as threads:
        return list(threads.map(call, ["rl_a", "rl_b"] * 3))


def _serve(repo: Path, *flags: str) -> ServerProcess:
    process = ServerProcess(
        [repo], "--model-control-mode=explicit", "--load-model=rl_a", "--load-model=rl_b", *flags
    )
    process.wait_ready(timeout=120)
    return process


def test_instances_sharing_a_global_resource_never_run_at_once(repo):
    flags = ("--rate-limit=execution_count", "--rate-limit-resource=G:2")
    with _serve(repo, *flags, "--rate-limit-resource=R:1") as process:
        assert _concurrent_results(process.http_url) == [""] * 6
        client = httpclient.InferenceServerClient(process.http_url)
        with pytest.raises(InferenceServerException) as info:
            client.load_model("rl_big")
        assert (
            'Resource count for "G" is limited to 2 which will prevent scheduling of one or more '
            "model instances, the minimum required count is 3"
        ) in info.value.message()
        client.load_model("rl_warm")  # warm-up goes through the limiter too, as in Triton
        assert client.get_inference_statistics("rl_warm")["model_stats"][0]["execution_count"] == 2


def test_with_the_limiter_off_the_same_models_run_at_once_and_a_warning_says_so(repo):
    with _serve(repo) as process:
        results = _concurrent_results(process.http_url)
        assert any("ran at once" in result for result in results), results
        assert (
            "model 'rl_a': config field 'instance_group.rate_limiter' has no effect: "
            "--rate-limit is off"
        ) in process.log()
        client = httpclient.InferenceServerClient(process.http_url)
        with pytest.raises(InferenceServerException) as info:
            client.load_model("rl_warm")
        assert "failed to run warmup sample 'zeros': ran at once" in info.value.message()
