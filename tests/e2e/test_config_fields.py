"""No config field silently ignored, on a real server: passive instances load but serve
nothing, a field this server does not honour fails the load naming it, and a GPU-only
setting loads with a warning naming it."""

from __future__ import annotations

import textwrap
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, explicit_mode_server, wait_until

pytest.importorskip("triton_core_python")

#: answers with the name of the instance that ran it; leaves a file per instance it started
#: and finalized, in the folder the config names
MODEL = """
import json
import os

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.folder = config["parameters"]["folder"]["string_value"]
        self.name = args["model_instance_name"]
        open(os.path.join(self.folder, "started." + self.name), "w").close()

    def execute(self, requests):
        name = np.array([[self.name.encode()]], dtype=object)
        return [pb_utils.InferenceResponse([pb_utils.Tensor("WHO", name)]) for _ in requests]

    def finalize(self):
        open(os.path.join(self.folder, "finalized." + self.name), "w").close()
"""


def _config(folder: Path, extra: str) -> str:
    return f"""
backend: "python"
max_batch_size: 2
input [ {{ name: "X" data_type: TYPE_FP32 dims: [ 1 ] }} ]
output [ {{ name: "WHO" data_type: TYPE_STRING dims: [ 1 ] }} ]
parameters {{ key: "folder" value {{ string_value: "{folder}" }} }}
{extra}
"""


MODELS = {
    "with_passive": 'instance_group [ { name: "serving" count: 1 kind: KIND_CPU },'
    ' { name: "standby" count: 2 kind: KIND_CPU passive: true } ]',
    "only_passive": 'instance_group [ { name: "standby" count: 1 kind: KIND_CPU passive: true } ]',
    "custom_ops": 'model_operations { op_library_filename: "libcustom_ops.so" }',
    "cuda_graphs": "optimization { cuda { graphs: true } }",
    "cached": "response_cache { enable: true }",
    "tagged": 'metric_tags { key: "team" value: "search" }',
    "bad_tag": 'metric_tags { key: "team-name" value: "search" }',
    "own_buckets": "model_metrics { metric_control [ { metric_identifier { family: "
    '"nv_inference_first_response_histogram_ms" } histogram_options { buckets: [ 7, 70000 ] } '
    "} ] }",
    "no_buckets": "model_metrics { metric_control [ { metric_identifier { family: "
    '"nv_inference_first_response_histogram_ms" } histogram_options { } } ] }',
}


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fields")
    for name, extra in MODELS.items():
        folder = root / f"{name}.files"
        folder.mkdir()
        (root / name / "1").mkdir(parents=True)
        (root / name / "1" / "model.py").write_text(textwrap.dedent(MODEL))
        (root / name / "config.pbtxt").write_text(_config(folder, extra))
    return root


@pytest.fixture(scope="module")
def server(repo: Path):
    yield from explicit_mode_server(repo, "--metrics-config=histogram_latencies=true")


def _who(client: httpclient.InferenceServerClient, model: str) -> str:
    tensor = httpclient.InferInput("X", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 1), np.float32))
    return client.infer(model, [tensor]).as_numpy("WHO").item().decode()


def test_passive_instances_load_get_no_requests_and_finalize(server, repo):
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("with_passive")
    files = repo / "with_passive.files"
    started = sorted(p.name for p in files.iterdir())
    assert started == ["started.serving_0", "started.standby_0", "started.standby_1"]
    assert {_who(client, "with_passive") for _ in range(6)} == {"serving_0"}
    client.unload_model("with_passive")
    expected = {f"finalized.{n}" for n in ("serving_0", "standby_0", "standby_1")}
    # the unload returns before the instances finalize
    wait_until(lambda: expected <= {p.name for p in files.iterdir()}, what="the finalizes")


def test_a_model_with_only_passive_instances_is_refused(server):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model("only_passive")
    assert "every instance group is 'passive'" in info.value.message()


def test_a_field_this_server_does_not_honour_fails_the_load_naming_it(server):
    client = httpclient.InferenceServerClient(server.http_url)
    with pytest.raises(InferenceServerException) as info:
        client.load_model("custom_ops")
    assert (
        "model 'custom_ops': config field 'model_operations' is not supported: backend "
        "'python' does not support it"
    ) in info.value.message()


def test_a_gpu_only_setting_loads_with_a_warning_naming_it(server):
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("cuda_graphs")
    assert _who(client, "cuda_graphs") == "cuda_graphs_0_0"
    assert "model 'cuda_graphs': config field 'optimization.cuda' has no effect" in server.log()


def test_a_field_that_needs_a_server_setting_warns_while_it_is_off(server):
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model("cached")
    assert (
        "model 'cached': config field 'response_cache' has no effect: the server has no "
        "--cache-config"
    ) in server.log()


def _metrics_after_one_request(
    server: ServerProcess, model: str
) -> tuple[httpclient.InferenceServerClient, str]:
    """Load ``model``, infer once, and read the metrics page."""
    client = httpclient.InferenceServerClient(server.http_url)
    client.load_model(model)
    _who(client, model)
    with urllib.request.urlopen(server.metrics_url, timeout=30) as answer:
        return client, answer.read().decode()


def test_metric_tags_label_the_models_metrics_as_triton(server):
    client, text = _metrics_after_one_request(server, "tagged")
    # labels in name order, as Triton writes them: "_team" before "model"
    assert 'nv_inference_count{_team="search",model="tagged",version="1"} 1' in text
    with pytest.raises(InferenceServerException) as info:
        client.load_model("bad_tag")
    assert "'metric_tags' key 'team-name' must be letters, digits and underscores" in (
        info.value.message()
    )


def test_model_metrics_set_the_models_latency_buckets(server):
    client, text = _metrics_after_one_request(server, "own_buckets")
    histogram = "nv_inference_first_response_histogram_ms_bucket"
    assert f'{histogram}{{model="own_buckets",version="1",le="70000.0"}} 1' in text
    assert f'{histogram}{{model="own_buckets",version="1",le="7.0"}}' in text
    assert f'{histogram}{{model="own_buckets",version="1",le="100.0"}}' not in text
    with pytest.raises(InferenceServerException) as info:
        client.load_model("no_buckets")
    assert "histogram options must specify non-empty 'buckets'" in info.value.message()
