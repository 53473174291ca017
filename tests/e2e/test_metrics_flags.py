"""``summary_latencies``/``summary_quantiles`` in ``--metrics-config`` and
``--metrics-interval-ms``, read from /metrics of a real server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tritonclient.http as httpclient

from tests.e2e.test_statistics import NUMPY_PLUGIN, add_sub_inputs, metric, scrape
from tests.support import ServerProcess, refused_start_log, write_numpy_model

SUMMARIES = (
    "nv_inference_request_summary_us",
    "nv_inference_queue_summary_us",
    "nv_inference_compute_input_summary_us",
    "nv_inference_compute_infer_summary_us",
    "nv_inference_compute_output_summary_us",
)


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("metrics_flags")
    write_numpy_model(repo, "plain", kind="add_sub")
    return repo


def _memory_used_samples(process: ServerProcess, scrapes: int) -> list[float]:
    """nv_cpu_memory_used_bytes, scraped while this process holds 64 MiB more or less."""
    values = []
    held = b""
    for index in range(scrapes):
        held = b"\x01" * (64 << 20) if index % 2 else b""  # written, so really in use
        match = re.search(r"^nv_cpu_memory_used_bytes (\S+)$", scrape(process), re.MULTILINE)
        assert match, "nv_cpu_memory_used_bytes not in /metrics"
        values.append(float(match.group(1)))
    del held
    return values


def test_latency_summaries_with_tritons_names_and_quantiles(repository: Path) -> None:
    with ServerProcess(
        [repository],
        "--metrics-config", "summary_latencies=true",
        "--metrics-config", "summary_quantiles=0.5:0.05,0.9:0.01",
        "--metrics-config", "counter_latencies=false",
        env=NUMPY_PLUGIN,
    ) as process:  # fmt: skip
        process.wait_ready()
        client = httpclient.InferenceServerClient(process.http_url)
        try:
            for rows in (1, 2, 3):
                client.infer("plain", add_sub_inputs(rows))
        finally:
            client.close()
        text = scrape(process)
    labels = {"model": "plain", "version": "1"}
    for name in SUMMARIES:
        assert f"# TYPE {name} summary" in text
        assert metric(text, f"{name}_count", **labels) == 3
        median = metric(text, name, **labels, quantile="0.5")
        assert 0 <= median <= metric(text, name, **labels, quantile="0.9")
        # only the quantiles asked
        assert f'{name}{{model="plain",version="1",quantile="0.95"' not in text
    assert metric(text, "nv_inference_request_summary_us", **labels, quantile="0.5") > 0
    assert "nv_inference_request_duration_us" not in text  # counters were turned off


def test_without_summary_latencies_no_summary_is_exported(repository: Path) -> None:
    with ServerProcess([repository], env=NUMPY_PLUGIN) as process:
        process.wait_ready()
        text = scrape(process)
    assert "nv_inference_request_duration_us" in text
    assert not any(name in text for name in SUMMARIES)


def test_metrics_interval_ms_sets_how_often_cpu_gauges_refresh(repository: Path) -> None:
    with ServerProcess([repository], "--metrics-interval-ms", "600000", env=NUMPY_PLUGIN) as slow:
        slow.wait_ready()
        assert len(set(_memory_used_samples(slow, 4))) == 1  # one sample for ten minutes
    with ServerProcess([repository], "--metrics-interval-ms", "1", env=NUMPY_PLUGIN) as fast:
        fast.wait_ready()
        assert len(set(_memory_used_samples(fast, 4))) > 1  # a new sample on every scrape


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--metrics-config", "summary_quantiles=0.5"], "summary_quantiles expects"),
        (["--metrics-config", "summary_quantiles=2:0.1"], "summary_quantiles expects"),
        (["--metrics-config", "summary_latencies=maybe"], "summary_latencies must be true"),
        (["--metrics-interval-ms", "0"], "argument --metrics-interval-ms"),
    ],
)
def test_malformed_metrics_flags_are_refused(
    repository: Path, flags: list[str], message: str
) -> None:
    assert message in refused_start_log([repository], *flags)


def test_summaries_before_any_request(repository: Path) -> None:
    """No observation yet: NaN quantiles and a zero count, as a Prometheus summary has."""
    with ServerProcess(
        [repository], "--metrics-config", "summary_latencies=true", env=NUMPY_PLUGIN
    ) as process:
        process.wait_ready()
        text = scrape(process)
    labels = {"model": "plain", "version": "1"}
    assert metric(text, "nv_inference_request_summary_us_count", **labels) == 0
    assert str(metric(text, "nv_inference_request_summary_us", **labels, quantile="0.5")) == "nan"


def test_pinned_memory_pool_gauges_report_the_pool_size_as_triton_without_a_gpu(
    repository: Path,
) -> None:
    # Triton 2.51 on a machine without a GPU: total is the flag's size (256 MiB by default),
    # used stays 0 (no transfer to a GPU goes through the pool)
    with ServerProcess([repository], env=NUMPY_PLUGIN) as default:
        default.wait_ready()
        text = scrape(default)
    assert "# TYPE nv_pinned_memory_pool_total_bytes gauge" in text
    assert _unlabelled(text, "nv_pinned_memory_pool_total_bytes") == 1 << 28
    assert _unlabelled(text, "nv_pinned_memory_pool_used_bytes") == 0
    with ServerProcess(
        [repository], "--pinned-memory-pool-byte-size", "12345678", env=NUMPY_PLUGIN
    ) as sized:
        sized.wait_ready()
        text = scrape(sized)
    assert _unlabelled(text, "nv_pinned_memory_pool_total_bytes") == 12345678
    assert _unlabelled(text, "nv_pinned_memory_pool_used_bytes") == 0


def _unlabelled(text: str, name: str) -> float:
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics"
    return float(match.group(1))
