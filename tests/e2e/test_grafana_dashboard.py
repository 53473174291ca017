"""deploy/grafana/triton-core.json queries only metrics that a live server exports."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from tests.support import ServerProcess, write_numpy_model

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "triton-core.json"
NUMPY_PLUGIN = {"TRITON_CORE_PLUGINS": "tests.plugins.numpy_backend"}
#: Triton's GPU families (DCGM, per GPU): no GPU here, so the dashboard's GPU queries are
#: checked against Triton's names (PROTOCOL.md, section 7) instead of a live /metrics
TRITON_GPU_METRICS = {
    "nv_gpu_utilization",
    "nv_gpu_memory_total_bytes",
    "nv_gpu_memory_used_bytes",
    "nv_gpu_power_usage",
    "nv_gpu_power_limit",
    "nv_energy_consumption",
}
#: PromQL words that look like metric names but are not
_NOT_METRICS = {"sum", "by", "rate", "increase", "avg", "le", "model", "reason", "pod"}


def dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    queries = [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            queries.append(variable["definition"])
    return queries


def queried_metrics() -> set[str]:
    names: set[str] = set()
    for query in dashboard_queries():
        without_labels = re.sub(r"\{[^}]*\}", "", query)
        names.update(re.findall(r"\b(nv_[a-z_]+)\b", without_labels))
    return names


def exported_samples(metrics_url: str) -> set[str]:
    with urllib.request.urlopen(metrics_url, timeout=10) as reply:
        text = reply.read().decode()
    return {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line[:1] != "#"}


def send_traffic(client: httpclient.InferenceServerClient) -> None:
    """Batched and cached requests (hits and misses), and failures."""
    for value in (1, 2, 1, 2):
        data = np.full((1, 4), value, dtype=np.int32)
        tensors = [httpclient.InferInput(n, [1, 4], "INT32") for n in ("INPUT0", "INPUT1")]
        for tensor in tensors:
            tensor.set_data_from_numpy(data)
        client.infer("batched", tensors)
        with pytest.raises(InferenceServerException):
            client.infer("failing", tensors)


def test_the_dashboard_queries_the_first_things_an_operator_looks_at():
    metrics = queried_metrics()
    for needed in (
        "nv_inference_request_success",
        "nv_inference_request_failure",
        "nv_inference_queue_duration_us",
        "nv_inference_compute_infer_duration_us",
        "nv_inference_batch_size_bucket",
        "nv_inference_batch_dispatch",
        "nv_cache_num_hits_per_model",
        "nv_inference_pending_request_count",
        "nv_cpu_utilization",
        "nv_gpu_utilization",
    ):
        assert needed in metrics
    dashboard = json.loads(DASHBOARD.read_text())
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_metric_the_dashboard_queries_is_exported(tmp_path):
    repo = tmp_path / "models"
    write_numpy_model(
        repo,
        "batched",
        kind="add_sub",
        extra="dynamic_batching { max_queue_delay_microseconds: 1000 }\n"
        "response_cache { enable: true }",
    )
    write_numpy_model(repo, "failing", kind="fail")
    with ServerProcess(
        [repo], "--cache-config", "local,size=1048576",
        env=NUMPY_PLUGIN,
    ) as process:  # fmt: skip
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            send_traffic(client)
        finally:
            client.close()
        exported = exported_samples(process.metrics_url)
    queried = queried_metrics()
    assert not queried - exported - TRITON_GPU_METRICS, sorted(exported)
    gpu = {name for name in queried if name.startswith(("nv_gpu_", "nv_energy_"))}
    assert gpu <= TRITON_GPU_METRICS
